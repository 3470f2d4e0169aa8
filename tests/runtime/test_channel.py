"""The worker -> controller file channel and the rank manifest."""

import os

from runwright.control.channel import ChannelReader
from runwright.layout import RunPaths
from runwright.protocol import HEARTBEAT, build_rank_manifest
from runwright.runtime import ChannelWriter, init


def test_reader_sees_only_complete_lines_once(tmp_path):
    writer = ChannelWriter(tmp_path, generation=2, rank=1)
    writer.send("STEP_HEALTHY", step=1, attributes={"loss": 1.5})
    reader = ChannelReader(tmp_path)
    first = list(reader.poll())
    assert [(m.type, m.step, m.generation, m.rank) for m in first] == [("STEP_HEALTHY", 1, 2, 1)]
    # A half-written line is left for the next poll.
    with open(writer.path, "a") as f:
        f.write('{"event_id": "x", "type": "HEART')
    assert list(reader.poll()) == []
    with open(writer.path, "a") as f:
        f.write('BEAT", "generation": 2, "rank": 1, "time_unix_s": 1.0}\n')
    assert [m.type for m in reader.poll()] == ["HEARTBEAT"]
    assert list(reader.poll()) == []
    writer.close()


def test_rereading_from_scratch_repeats_event_ids(tmp_path):
    """A restarted controller re-reads everything; stable event ids make that harmless."""
    writer = ChannelWriter(tmp_path, generation=0, rank=0)
    writer.send("CHECKPOINT_COMMITTED", step=4, event_id="ck-4")
    writer.close()
    ids = [[m.event_id for m in ChannelReader(tmp_path).poll()] for _ in range(2)]
    assert ids[0] == ids[1] == ["ck-4"]


def test_batches_pass_the_cursor_only_when_the_next_is_asked_for(tmp_path):
    """A consumer that fails while storing a batch (the generator is dropped at its yield) gets
    the whole batch again, across files too; one that asks for the next has passed it."""
    for rank in (0, 1):
        writer = ChannelWriter(tmp_path, generation=1, rank=rank)
        for step in (1, 2, 3):
            writer.send("STEP_HEALTHY", step=step)
        writer.close()
    with open(sorted(tmp_path.iterdir())[0], "a") as f:  # rank 0's file
        f.write("not json\n")  # skipped, as `poll` skips it
    reader = ChannelReader(tmp_path)

    def steps(batch):
        return [(m.rank, m.step) for m in batch]

    batches = reader.poll_batches(4)
    assert steps(next(batches)) == [(0, 1), (0, 2), (0, 3), (1, 1)]
    batches.close()  # broken off: nothing passed
    batches = reader.poll_batches(4)
    assert steps(next(batches)) == [(0, 1), (0, 2), (0, 3), (1, 1)]
    assert steps(next(batches)) == [(1, 2), (1, 3)]  # the first one passed
    batches.close()
    assert [steps(b) for b in reader.poll_batches(4)] == [[(1, 2), (1, 3)]]
    assert list(reader.poll_batches(4)) == []


def test_rank_manifest_keeps_tp_inside_a_node():
    entries = build_rank_manifest(
        nodes=2, devices_per_node=4, dp=2, tp=2, pp=2, device_type="cuda", hosts=["a", "b"]
    )
    assert [(e.pp, e.dp, e.tp) for e in entries[:4]] == [(0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1)]
    assert entries[5].host == "b" and entries[5].device == "cuda:1" and entries[5].pp == 1
    for a, b in zip(entries[::2], entries[1::2], strict=True):
        assert a.node == b.node  # every tp pair shares a node


def test_init_outside_the_control_plane(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in (
        "RUNWRIGHT_RUN_ID",
        "RUNWRIGHT_SPEC_FILE",
        "RUNWRIGHT_RANK_MANIFEST",
        "RANK",
        "WORLD_SIZE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MASTER_PORT", "29555")
    ctx = init(heartbeat=False)
    try:
        assert not ctx.managed and ctx.rank == 0 and ctx.world_size == 1
        assert ctx.run_id == "local-29555" and ctx.spec is None
        ctx.step_healthy(1, loss=0.5)
    finally:
        ctx.close()
    messages = list(ChannelReader(RunPaths(ctx.run_dir).channel).poll())
    # The node's system sampler (local rank 0) takes its last sample as the context closes.
    assert [m.type for m in messages] == ["WORKER_STARTED", "STEP_HEALTHY", "SYSTEM_SAMPLE"]
    assert messages[0].attributes["pid"] == os.getpid()


def test_runwright_init_is_the_runtime_init():
    import runwright

    assert runwright.init is init


def test_a_consumer_that_fails_gets_the_message_again(tmp_path):
    """The cursor passes a message only once the consumer asks for the next one, so a message
    whose handling failed (the store went away) is read again, and nothing after it is lost."""
    writer = ChannelWriter(tmp_path, generation=1, rank=0)
    for step in (1, 2, 3):
        writer.send("STEP_HEALTHY", step=step)
    reader = ChannelReader(tmp_path)
    handled = []
    try:
        for message in reader.poll():
            if message.step == 2:
                raise ConnectionError("store unavailable")
            handled.append(message.step)
    except ConnectionError:
        pass
    writer.send("STEP_HEALTHY", step=4)
    handled += [m.step for m in reader.poll()]
    assert handled == [1, 2, 3, 4]
    writer.close()


def test_the_telemetry_line_decodes_as_the_same_message_as_send(tmp_path):
    """The step loop writes STEP_HEALTHY with `telemetry` (the json module, cheaper on a cold
    cache); the controller must read it exactly as a `send` of the same report, and a value json
    cannot encode (NaN) goes through `send`."""
    attributes = {"loss": 2.5, "samples": [8, 12], "phases": {"forward": 0.01}, "skipped": False}
    a = ChannelWriter(tmp_path / "a", generation=3, rank=1)
    b = ChannelWriter(tmp_path / "b", generation=3, rank=1)
    a.telemetry("STEP_HEALTHY", step=7, event_id="g3-r1-step7", world_size=2, attributes=attributes)
    b.send("STEP_HEALTHY", step=7, event_id="g3-r1-step7", world_size=2, attributes=attributes)
    a.telemetry("STEP_HEALTHY", step=8, event_id="g3-r1-step8", attributes={"loss": float("nan")})
    a.close()
    b.close()
    telemetry, nan = ChannelReader(tmp_path / "a").poll()
    (sent,) = ChannelReader(tmp_path / "b").poll()
    fields = {"time_unix_s"}
    assert telemetry.model_dump(exclude=fields) == sent.model_dump(exclude=fields)
    assert (nan.step, nan.event_id) == (8, "g3-r1-step8")
    assert nan.attributes["loss"] is None or nan.attributes["loss"] != nan.attributes["loss"]


def test_the_heartbeat_line_decodes_as_a_sent_heartbeat(tmp_path):
    """The heartbeat thread writes with `heartbeat` (json, not the pydantic model); the controller
    reads it as the HEARTBEAT `send` writes, and each beat has its own id."""
    a = ChannelWriter(tmp_path / "a", generation=3, rank=1)
    b = ChannelWriter(tmp_path / "b", generation=3, rank=1)
    a.heartbeat()
    a.heartbeat()
    b.send(HEARTBEAT)
    a.close()
    b.close()
    first, second = ChannelReader(tmp_path / "a").poll()
    (sent,) = ChannelReader(tmp_path / "b").poll()
    fields = {"time_unix_s", "event_id"}
    assert first.model_dump(exclude=fields) == sent.model_dump(exclude=fields)
    assert first.type == HEARTBEAT and first.event_id != second.event_id
