"""Recovery equivalence for any run that follows the integration: what a run did not report is
named (with what would report it), never a traceback, and the rest is still compared."""

import pytest

from runwright.errors import RunwrightError
from runwright.events import EventType
from runwright.govern.compare import compare_runs
from runwright.store import NewEvent, Store


def _run(
    store, run_id, *, steps, digests=None, samples=True, complete=True, loss_shift=0.0, spec=None
):
    store.create_run(
        run_id=run_id, name="cmp", spec=spec or {}, spec_hash="0" * 64, plan={}, workdir="/tmp",
        root="/tmp", state="SUCCEEDED" if complete else "RUNNING",
    )  # fmt: skip
    events = []
    for step in range(1, steps + 1):
        attributes = {"rank": 0, "loss": 1.0 / step + (loss_shift if step == steps else 0.0)}
        if samples:
            attributes["samples"] = [8 * (step - 1), 8 * step]
        events.append((EventType.STEP_HEALTHY, step, attributes))
    if complete:
        done = {"rank": 0, **({"parameter_digests": digests} if digests is not None else {})}
        events.append((EventType.TRAINING_COMPLETE, steps, done))
    for index, (type_, step, attributes) in enumerate(events):
        store.append_event(
            NewEvent(event_id=f"{run_id}-{index}", run_id=run_id, generation=1, type=type_,
                     step=step, time_unix_s=float(index), attributes=attributes),
            fenced=False,
        )  # fmt: skip


@pytest.fixture
def store(tmp_path):
    opened = Store(f"sqlite:///{tmp_path / 'state.db'}")
    yield opened
    opened.close()


def test_full_evidence_equal_and_different(store):
    _run(store, "a", steps=4, digests={"w": "1"})
    _run(store, "b", steps=4, digests={"w": "1"})
    _run(store, "c", steps=4, digests={"w": "1"}, loss_shift=0.5)
    assert compare_runs(store, "a", "b").equivalence == "bitwise-equal"
    other = compare_runs(store, "a", "c")
    assert (other.equivalence, other.first_difference) == ("different", "loss:step 4")


def test_a_two_line_script_is_incomplete_with_what_would_report_it(store):
    _run(store, "a", steps=4, samples=False)
    _run(store, "b", steps=4, samples=False)
    result = compare_runs(store, "a", "b")
    assert result.equivalence == "incomplete" and result.first_difference is None
    text = "\n".join(result.missing)
    assert "run a reported no parameter digests" in text and "ctx.checkpointer()" in text
    assert "runwright.data.DataLoader" in text
    assert result.steps_compared == 4  # the losses were still compared


def test_a_difference_in_what_was_reported_is_still_a_difference(store):
    _run(store, "a", steps=3, samples=False)
    _run(store, "b", steps=3, samples=False, loss_shift=1.0)
    assert compare_runs(store, "a", "b").equivalence == "different"


def test_an_unfinished_run_is_refused_by_name(store):
    _run(store, "a", steps=2, digests={"w": "1"})
    _run(store, "b", steps=2, complete=False)
    with pytest.raises(
        RunwrightError, match=r"run b has not completed its training \(state RUNNING"
    ):
        compare_runs(store, "a", "b")


NOT_REPLAYED = {"reproducibility": {"level": "statistical"}}
"""These fake runs have two attempts but no replay check (tests/replay_verdicts.py asks bitwise
runs that recovered for one)."""


def _ranks(store, run_id, worlds, shift_rank_1_at=None):
    """Attempts at `worlds` (generation i+1 at worlds[i]) and rank 1's reports of each step (its
    range one sample longer at step `shift_rank_1_at`)."""
    for generation, world in enumerate(worlds, start=1):
        store.start_attempt(run_id, generation, world)
    for step in range(1, 5):
        moved = 1 if step == shift_rank_1_at else 0
        store.append_event(
            NewEvent(event_id=f"{run_id}-r1-{step}", run_id=run_id, generation=1,
                     type=EventType.STEP_HEALTHY, step=step, time_unix_s=float(step),
                     attributes={"rank": 1, "samples": [8 * (step - 1), 8 * step + moved]}),
            fenced=False,
        )  # fmt: skip


def test_runs_of_different_world_sizes_are_compared_by_coverage(store):
    """An elastic run that shrank (world 2 then 1) against a fixed one (world 2): the ledger and
    the global batches decide; the parameters are compared by distance, which needs the final
    checkpoints (none here: named as missing, never a traceback)."""
    _run(store, "elastic", steps=4, digests={"w": "1"}, spec=NOT_REPLAYED)
    _run(store, "fixed", steps=4, digests={"w": "2"})
    _ranks(store, "elastic", [2, 1])
    _ranks(store, "fixed", [2])
    result = compare_runs(store, "elastic", "fixed")
    assert result.ledger_identical and result.global_batches_identical
    assert (result.world_sizes_a, result.world_sizes_b) == ((2, 1), (2,))
    assert "bitwise equality is not expected" in result.note
    assert result.equivalence == "incomplete" and result.first_difference is None
    assert any("no committed checkpoint" in m for m in result.missing), result.missing


def test_a_global_batch_that_differs_on_one_rank_is_a_difference(store):
    _run(store, "elastic", steps=4, digests={"w": "1"}, spec=NOT_REPLAYED)
    _run(store, "fixed", steps=4, digests={"w": "2"})
    _ranks(store, "elastic", [2, 1], shift_rank_1_at=3)
    _ranks(store, "fixed", [2])
    result = compare_runs(store, "elastic", "fixed")
    assert result.ledger_identical and not result.global_batches_identical
    assert (result.equivalence, result.first_difference) == ("different", "global batch:step 3")


def test_runs_of_different_world_sizes_without_id_ranges_are_not_called_equivalent(store):
    """Across world sizes the global batches are the coverage proof: a script that reports its
    `samples` as a count gives none, and the comparison says so rather than passing on nothing."""
    _run(store, "elastic", steps=4, digests={"w": "1"}, samples=False, spec=NOT_REPLAYED)
    _run(store, "fixed", steps=4, digests={"w": "2"}, samples=False)
    for run_id, worlds in (("elastic", [2, 1]), ("fixed", [2])):
        for generation, world in enumerate(worlds, start=1):
            store.start_attempt(run_id, generation, world)
    result = compare_runs(store, "elastic", "fixed")
    assert result.equivalence == "incomplete"
    assert any(m.startswith("global batches: a run of another world size") for m in result.missing)
