"""A step's per-rank STEP_HEALTHY reports stored as one row: whole once every rank reported, in
parts when the group ends mid-step or a rank is late, and never a rank twice when a new ingestor
re-reads the channel from its start (control/step_holding.py). Real channel files (fsynced by the
runtime's writer) and a real SQLite store."""

from collections import Counter

import pytest

from runwright.control.ingest import Ingestor
from runwright.layout import run_paths
from runwright.observe.rank_steps import RankReport, fold, per_rank, rank_view, reports
from runwright.runtime import ChannelWriter
from runwright.store import NewEvent, Outcome

WORLD = 4


@pytest.fixture
def writers(tmp_path):
    channel = run_paths(tmp_path, "run-a").channel
    found = [ChannelWriter(channel, generation=1, rank=r) for r in range(WORLD)]
    yield found
    for writer in found:
        writer.close()


def report(writer, step, **figures):
    """What the runtime's `step_healthy` sends: its id and the group's world size."""
    writer.send(
        "STEP_HEALTHY",
        step=step,
        event_id=f"g1-r{writer.rank}-step{step}",
        world_size=WORLD,
        attributes={"loss": 1.0 / step + writer.rank, "step_seconds": 0.1, **figures},
    )


def rows(store):
    return store.events("run-a", types=["STEP_HEALTHY"])


def reports_by_rank_and_step(store):
    return Counter((e.attributes["rank"], e.step) for e in per_rank(rows(store)))


def test_a_step_is_one_row_once_every_rank_reported_it(running_run, writers):
    ingestor = Ingestor(running_run, running_run.get_run("run-a"))
    seen = []
    for writer in writers[:3]:
        report(writer, 1)
    ingestor.poll(lambda m, outcome: seen.append((m.rank, outcome)))
    # Held, not stored; the watchdog, alerts and replay check see each rank's message already.
    assert rows(running_run) == [] and running_run.get_run("run-a").last_step is None
    assert seen == [(r, Outcome.APPLIED) for r in range(3)]
    report(writers[3], 1, samples=[0, 8])
    ingestor.poll()
    (row,) = rows(running_run)
    assert row.attributes["ranks"] == [0, 1, 2, 3] and row.step == 1 and row.world_size == WORLD
    assert "ids" not in row.attributes  # the runtime's own ids are not repeated
    unfolded = list(per_rank([row]))
    assert [e.attributes["loss"] for e in unfolded] == [1.0, 2.0, 3.0, 4.0]
    assert [e.attributes.get("samples") for e in unfolded] == [None, None, None, [0, 8]]
    assert row.time_unix_s == max(e.time_unix_s for e in unfolded)
    assert rank_view(row, 3).attributes["samples"] == [0, 8] and rank_view(row, 5) is None
    assert running_run.get_run("run-a").last_step == 1


def test_a_group_that_ends_mid_step_leaves_a_part_naming_its_ranks(running_run, writers):
    ingestor = Ingestor(running_run, running_run.get_run("run-a"))
    for writer in writers:
        report(writer, 1)
    for writer in writers[:2]:
        report(writer, 2)
    ingestor.poll()
    assert [e.step for e in rows(running_run)] == [1]
    ingestor.settle_with_fence()  # the controller's call once the group has exited
    assert [(e.step, e.attributes["ranks"]) for e in rows(running_run)] == [
        (1, [0, 1, 2, 3]),
        (2, [0, 1]),
    ]
    assert running_run.get_run("run-a").last_step == 2
    ingestor.settle_with_fence()  # nothing held: nothing more
    assert len(rows(running_run)) == 2


def test_a_new_ingestor_mid_step_stores_only_the_ranks_no_part_covers(running_run, writers):
    """A late rank cut step 2 into a part; the controller then restarts: the new ingestor
    re-reads every file from its start, finds step 2 whole, and stores only what is missing."""
    first = Ingestor(running_run, running_run.get_run("run-a"))
    first.steps.hold_seconds = 0.0  # every step not complete at the poll's end is late
    for writer in writers:
        report(writer, 1)
    for writer in writers[:2]:
        report(writer, 2)
    first.poll()
    assert [(e.step, e.attributes["ranks"]) for e in rows(running_run)] == [
        (1, [0, 1, 2, 3]),
        (2, [0, 1]),
    ]
    for writer in writers[2:]:
        report(writer, 2)
    for writer in writers:
        report(writer, 3)
    second = Ingestor(running_run, running_run.get_run("run-a"))
    outcomes = []
    assert second.poll(lambda m, outcome: outcomes.append((m.rank, m.step, outcome))) == 12
    assert [(e.event_id.rsplit(":", 1)[-1], e.attributes["ranks"]) for e in rows(running_run)] == [
        ("s1", [0, 1, 2, 3]),
        ("s2", [0, 1]),
        ("p2", [2, 3]),
        ("s3", [0, 1, 2, 3]),
    ]
    assert reports_by_rank_and_step(running_run) == Counter(
        {(r, s): 1 for r in range(WORLD) for s in (1, 2, 3)}
    )
    # Re-read reports already stored say so; the rest were stored now.
    assert {(r, s): o for r, s, o in outcomes if s == 1} == {
        (r, 1): Outcome.ALREADY_APPLIED for r in range(WORLD)
    }
    assert {o for _, s, o in outcomes if s == 3} == {Outcome.APPLIED}
    assert running_run.get_run("run-a").last_step == 3
    # A third controller finds nothing left to store.
    third = Ingestor(running_run, running_run.get_run("run-a"))
    third.poll()
    third.settle_with_fence()
    assert len(rows(running_run)) == 4


def test_too_many_held_reports_store_the_oldest_steps_first(running_run, writers):
    ingestor = Ingestor(running_run, running_run.get_run("run-a"))
    ingestor.steps.max_reports = 4
    for step in (1, 2, 3):
        report(writers[0], step)
        report(writers[1], step)
    ingestor.poll()
    # 6 held reports, 4 allowed: step 1 went as a part; steps 2 and 3 wait for ranks 2 and 3.
    assert [(e.step, e.attributes["ranks"]) for e in rows(running_run)] == [(1, [0, 1])]
    assert sorted(ingestor.steps.held) == [(1, 2), (1, 3)]


def test_a_run_stored_per_rank_stays_per_rank(running_run, writers):
    """A store written before steps were folded: a re-read must meet the per-rank ids again."""
    running_run.append_event(
        NewEvent(
            event_id="run-a:g1-r0-step1",
            run_id="run-a",
            generation=1,
            type="STEP_HEALTHY",
            step=1,
            time_unix_s=1.0,
            attributes={"rank": 0, "loss": 1.0},
        )
    )
    for writer in writers:
        report(writer, 1)
    Ingestor(running_run, running_run.get_run("run-a")).poll()
    assert reports_by_rank_and_step(running_run) == Counter({(r, 1): 1 for r in range(WORLD)})
    assert all("ranks" not in e.attributes for e in rows(running_run))


def test_fold_keeps_every_figure_time_and_id():
    sent = [
        RankReport(2, "custom-id", 12.0, {"loss": float("nan"), "data_lost": {"a": 1}}),
        RankReport(0, "g3-r0-step7", 10.0, {"loss": 0.5, "note": None}),
    ]
    folded = fold(3, 7, sent)
    assert folded["ranks"] == [0, 2] and folded["ids"] == {"2": "custom-id"}
    assert folded["sparse"] == {"note": {"0": None}, "data_lost": {"2": {"a": 1}}}

    class Row:
        type, generation, step, attributes = "STEP_HEALTHY", 3, 7, folded

    back = reports(Row())
    assert [(r.rank, r.event_id, r.time_unix_s) for r in back] == [
        (0, "g3-r0-step7", 10.0),
        (2, "custom-id", 12.0),
    ]
    assert back[0].attributes == {"loss": 0.5, "note": None}
    assert back[1].attributes["data_lost"] == {"a": 1}


def test_a_refused_folded_row_counts_every_rank_it_spoke_for(running_run):
    """A fenced-off generation's folded step row is one write of four reports: its rejection
    says so, and the stale-write tally (status, the report) counts the four."""
    sent = [RankReport(r, f"g0-r{r}-step3", 10.0 + r, {"loss": 1.0}) for r in range(WORLD)]
    row = NewEvent(
        event_id="run-a:g0:step3",
        run_id="run-a",
        generation=0,  # the run is at generation 1: this writer was fenced off
        type="STEP_HEALTHY",
        step=3,
        world_size=WORLD,
        time_unix_s=13.0,
        attributes=fold(0, 3, sent),
    )
    assert running_run.append_events([row]) == [Outcome.STALE_GENERATION]
    (rejection,) = running_run.events("run-a", types=["STALE_WRITE_REJECTED"])
    assert rejection.attributes["reports"] == WORLD
    (tally,) = running_run.stale_write_tally("run-a")
    assert (tally.writer_generation, tally.rejected_type, tally.count) == (0, "STEP_HEALTHY", 4)
