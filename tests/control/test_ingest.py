"""Ingesting the workers' channel while the store fails part-way: nothing is lost, nothing is
stored twice, and the follow-up writes of an event cut short are finished on the next poll. Each
test runs on SQLite and on PostgreSQL (the batch append speaks to each driver directly)."""

from collections import Counter

import pytest

from runwright.control import ingest
from runwright.control.ingest import Ingestor
from runwright.errors import StoreUnavailableError
from runwright.layout import run_paths
from runwright.protocol import build_rank_manifest
from runwright.runtime import ChannelWriter
from runwright.store import Outcome


class Flaky:
    """Makes one store method fail once, after (or before) doing its write, as a connection that
    drops around a commit does."""

    def __init__(self, store, name, *, after_write):
        self.store, self.name, self.after_write = store, name, after_write
        self.real = getattr(store, name)
        self.armed = False
        setattr(store, name, self)

    def __call__(self, *args, **kwargs):
        if not self.armed:
            return self.real(*args, **kwargs)
        self.armed = False
        if self.after_write:
            self.real(*args, **kwargs)
        raise StoreUnavailableError("the store at test is unavailable: injected")


@pytest.fixture
def setup(tmp_path, running_run_on_each_store):
    store = running_run_on_each_store
    writer = ChannelWriter(run_paths(tmp_path, "run-a").channel, generation=1, rank=0)
    yield store, Ingestor(store, store.get_run("run-a")), writer
    writer.close()


def steps_stored(store):
    return [e.step for e in store.events("run-a", types=["STEP_HEALTHY"])]


@pytest.mark.parametrize("after_write", [False, True], ids=["before-commit", "after-commit"])
def test_an_append_cut_short_is_retried_once_stored(setup, after_write):
    store, ingestor, writer = setup
    for step in (1, 2, 3):
        writer.send("STEP_HEALTHY", step=step)
    flaky = Flaky(store, "append_events", after_write=after_write)
    ingestor.poll()
    writer.send("STEP_HEALTHY", step=4)
    flaky.armed = True
    seen = []
    with pytest.raises(StoreUnavailableError):
        ingestor.poll(lambda m, outcome: seen.append((m.step, outcome)))
    writer.send("STEP_HEALTHY", step=5)
    ingestor.poll(lambda m, outcome: seen.append((m.step, outcome)))
    assert steps_stored(store) == [1, 2, 3, 4, 5]
    retried = Outcome.ALREADY_APPLIED if after_write else Outcome.APPLIED
    assert seen == [(4, retried), (5, Outcome.APPLIED)]
    assert store.get_run("run-a").last_step == 5


def test_a_follow_up_cut_short_is_finished_on_the_next_poll(setup):
    """The event was stored but the run's last step was not moved: the retry reads the event as
    ALREADY_APPLIED and must still move it."""
    store, ingestor, writer = setup
    writer.send("STEP_HEALTHY", step=1)
    flaky = Flaky(store, "fenced_update", after_write=False)
    flaky.armed = True
    with pytest.raises(StoreUnavailableError):
        ingestor.poll()
    assert steps_stored(store) == [1] and store.get_run("run-a").last_step is None
    ingestor.poll()
    assert steps_stored(store) == [1] and store.get_run("run-a").last_step == 1


def test_a_heartbeat_the_store_missed_is_written_next_time(setup):
    store, ingestor, writer = setup
    beat = writer.send("HEARTBEAT")
    flaky = Flaky(store, "fenced_update", after_write=False)
    flaky.armed = True
    with pytest.raises(StoreUnavailableError):
        ingestor.poll()
    assert ingestor.poll() == 0  # nothing new in the channel, but the beat is still written
    assert store.get_run("run-a").last_heartbeat_unix_s == beat.time_unix_s


def test_a_commit_the_fence_names_but_no_event_reported_is_recorded(setup, tmp_path):
    """A writer lost between its publish and its report: the fence's pointer is the authority, so
    once the group has ended the controller records the commit from the checkpoint itself."""
    import torch

    from runwright.ckpt import Checkpointer, MemorySink, TrainState
    from runwright.spec.policies import CheckpointSpec

    store, ingestor, _ = setup
    root = run_paths(tmp_path, "run-a").checkpoints
    ckpt = Checkpointer(str(root), policy=CheckpointSpec(), generation=1, events=MemorySink())
    saved = ckpt.save(5, TrainState(model=torch.nn.Linear(2, 1)))
    ckpt.close()
    assert store.events("run-a", types=["CHECKPOINT_COMMITTED"]) == []

    ingestor.settle_with_fence()
    ingestor.settle_with_fence()  # once only
    (event,) = store.events("run-a", types=["CHECKPOINT_COMMITTED"])
    assert (event.checkpoint_id, event.step, event.generation) == (saved.checkpoint_id, 5, 1)
    assert event.attributes["reported_by"] == "controller"
    (row,) = store.checkpoints.list("run-a", status="COMMITTED")
    assert row.checkpoint_id == saved.checkpoint_id and row.manifest_sha256
    assert store.get_run("run-a").data_cursor is None  # this state had no loader


class Counting:
    """Counts the calls of one store method, passing them through."""

    def __init__(self, store, name):
        self.real, self.calls = getattr(store, name), []
        setattr(store, name, self)

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return self.real(*args, **kwargs)


def test_a_poll_stores_batches_and_coalesces_the_follow_ups(setup, tmp_path, monkeypatch):
    store, ingestor, writer = setup
    monkeypatch.setattr(ingest, "BATCH_MESSAGES", 4)
    other = ChannelWriter(run_paths(tmp_path, "run-a").channel, generation=1, rank=1)
    for step in range(1, 6):
        writer.send("STEP_HEALTHY", step=step)
        other.send("STEP_HEALTHY", step=step)
        writer.send("HEARTBEAT")
    other.close()
    appends = Counting(store, "append_events")
    updates = Counting(store, "fenced_update")
    seen = []
    assert ingestor.poll(lambda m, outcome: seen.append((m.type, outcome))) == 15
    # Rank 0's file (step, beat) x 5, then rank 1's 5 steps, in batches of 4 messages:
    # [s1 b s2 b] [s3 b s4 b] [s5 b | s1 s2] [s3 s4 s5]: appends of 2, 2, 3 and 3 events.
    assert [len(args[0]) for args, _ in appends.calls] == [2, 2, 3, 3]
    assert Counter(seen) == {("STEP_HEALTHY", Outcome.APPLIED): 10, ("HEARTBEAT", None): 5}
    assert sorted(steps_stored(store)) == sorted([*range(1, 6)] * 2)
    # One last-step write per batch that moved it (the last batch's 5 does not), one heartbeat
    # write per poll.
    assert [kw for _, kw in updates.calls if "last_step" in kw] == [
        {"last_step": 2},
        {"last_step": 4},
        {"last_step": 5},
    ]
    assert sum("last_heartbeat_unix_s" in kw for _, kw in updates.calls) == 1
    assert store.get_run("run-a").last_step == 5
    assert ingestor.poll() == 0


@pytest.mark.parametrize("after_write", [False, True], ids=["before-commit", "after-commit"])
def test_a_batch_the_store_broke_off_is_read_again_whole(setup, monkeypatch, after_write):
    store, ingestor, writer = setup
    monkeypatch.setattr(ingest, "BATCH_MESSAGES", 3)
    for step in range(1, 8):
        writer.send("STEP_HEALTHY", step=step)
    flaky = Flaky(store, "append_events", after_write=after_write)
    batches = Counting(store, "append_events")  # wraps the flaky one

    def arm_on_the_second_batch(*args, **kwargs):
        flaky.armed = len(batches.calls) == 1
        return batches(*args, **kwargs)

    store.append_events = arm_on_the_second_batch
    seen = []
    with pytest.raises(StoreUnavailableError):
        ingestor.poll(lambda m, outcome: seen.append((m.step, outcome)))
    assert seen == [(1, Outcome.APPLIED), (2, Outcome.APPLIED), (3, Outcome.APPLIED)]
    assert sorted(steps_stored(store)) == ([1, 2, 3, 4, 5, 6] if after_write else [1, 2, 3])
    # The first batch's last step was written; the broken batch's follow-up was not.
    assert store.get_run("run-a").last_step == 3
    seen.clear()
    assert ingestor.poll(lambda m, outcome: seen.append((m.step, outcome))) == 4
    retried = Outcome.ALREADY_APPLIED if after_write else Outcome.APPLIED
    assert seen == [(4, retried), (5, retried), (6, retried), (7, Outcome.APPLIED)]
    # Steps are folded rows (control/step_holding.py): a step the store already holds whole is
    # known from the look-up of its id before the retry, so the retried batch stores nothing.
    assert [[e.step for e in args[0]] for args, _ in batches.calls] == [
        [1, 2, 3],
        [4, 5, 6],
        [] if after_write else [4, 5, 6],
        [7],
    ]
    assert steps_stored(store) == [1, 2, 3, 4, 5, 6, 7]
    assert store.get_run("run-a").last_step == 7


def test_stale_messages_in_a_batch_are_rejected_without_follow_ups(setup, tmp_path):
    store, ingestor, writer = setup
    old = ChannelWriter(run_paths(tmp_path, "run-a").channel, generation=0, rank=0)
    old.send("STEP_HEALTHY", step=50)
    old.send("HEARTBEAT")
    old.close()
    writer.send("STEP_HEALTHY", step=2)
    seen = []
    assert ingestor.poll(lambda m, outcome: seen.append((m.generation, m.type, outcome))) == 3
    assert seen == [
        (0, "STEP_HEALTHY", Outcome.STALE_GENERATION),
        (0, "HEARTBEAT", None),
        (1, "STEP_HEALTHY", Outcome.APPLIED),
    ]
    run = store.get_run("run-a")
    assert run.last_step == 2 and run.last_heartbeat_unix_s is None
    (rejection,) = store.events("run-a", types=["STALE_WRITE_REJECTED"])
    assert rejection.attributes["writer_generation"] == 0 and rejection.step == 50
    Ingestor(store, run).poll()  # a new controller re-reads the channel: nothing twice
    assert len(store.events("run-a")) == 2


def test_the_rank_manifest_follows_where_the_ranks_report_they_run(setup, tmp_path):
    """Under c10d the rendezvous, not launch order, decides which node runs which global rank:
    the run record's manifest ends up saying what the ranks found (rank 0 on node 1, whose host
    the allocation calls h1, whatever the machine calls itself)."""
    store, ingestor, writer = setup
    planned = build_rank_manifest(
        nodes=2, devices_per_node=1, dp=2, tp=1, pp=1, device_type="cpu", hosts=["h0", "h1"]
    )
    store.update_run(
        "run-a",
        allocation={"hosts": ["h0", "h1"]},
        rank_manifest=[e.model_dump() for e in planned],
    )
    writer.send("WORKER_STARTED", attributes={"local_rank": 0, "host": "vm", "node": 1})
    ingestor.poll()  # for now both ranks say node 1: the next one is still named by allocation
    other = ChannelWriter(run_paths(tmp_path, "run-a").channel, generation=1, rank=1)
    other.send("WORKER_STARTED", attributes={"local_rank": 0, "host": "vm", "node": 0})
    other.close()
    stale = ChannelWriter(run_paths(tmp_path, "run-a").channel, generation=0, rank=1)
    stale.send("WORKER_STARTED", attributes={"local_rank": 0, "host": "old", "node": 7})
    stale.close()
    ingestor.poll()
    manifest = store.get_run("run-a").rank_manifest
    assert [(e["rank"], e["node"], e["host"], e["dp"]) for e in manifest] == [
        (0, 1, "h1", 0),
        (1, 0, "h0", 1),
    ]
