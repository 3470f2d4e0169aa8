"""The worker protocol: versioned messages both sides read, and what a reader does with a version
it does not know (refuses it by name, never guesses)."""

import json

import pytest

from runwright import protocol
from runwright.control.channel import ChannelReader
from runwright.control.ingest import Ingestor
from runwright.errors import RunwrightError
from runwright.layout import RunPaths, run_paths
from runwright.protocol import (
    PROTOCOL_VERSION,
    ChannelMessage,
    ProtocolVersionError,
    StopRequest,
    build_rank_manifest,
    decode_message,
    decode_rank_manifest,
    decode_skip_steps,
    encode_message,
    encode_rank_manifest,
    encode_skip_steps,
    placed_entry,
    read_stop_request,
    write_stop_request,
)
from runwright.runtime import ChannelWriter, init


def _message(**fields):
    base = {"event_id": "e1", "type": "STEP_HEALTHY", "generation": 1, "rank": 0}
    return {**base, "time_unix_s": 1.0, **fields}


def test_a_written_message_carries_the_writer_version_and_reads_back(tmp_path):
    writer = ChannelWriter(tmp_path, generation=2, rank=1)
    sent = writer.send("STEP_HEALTHY", step=7, attributes={"loss": 1.5})
    writer.close()
    line = (tmp_path / writer.path.name).read_bytes()
    assert json.loads(line)["v"] == PROTOCOL_VERSION
    assert decode_message(line.rstrip(b"\n")) == sent
    assert encode_message(sent).endswith("\n")


def test_a_line_from_before_versions_reads_as_version_1():
    message = decode_message(json.dumps(_message()).encode())
    assert message is not None and message.v == 1


def test_a_torn_or_foreign_line_is_skipped_not_fatal():
    assert decode_message(b"") is None
    assert decode_message(b'{"event_id": "e1", "ty') is None
    assert decode_message(json.dumps({"hello": "world"}).encode()) is None


def test_a_newer_message_is_refused_with_both_versions():
    with pytest.raises(
        ProtocolVersionError, match=rf"v{PROTOCOL_VERSION + 1}.*v{PROTOCOL_VERSION}"
    ):
        decode_message(json.dumps(_message(v=PROTOCOL_VERSION + 1)).encode())


def test_the_reader_stops_at_a_newer_line_and_the_ingestor_says_so(tmp_path, running_run):
    store = running_run
    channel = run_paths(tmp_path, "run-a").channel
    writer = ChannelWriter(channel, generation=1, rank=0)
    writer.send("STEP_HEALTHY", step=1)
    writer.close()
    with open(writer.path, "a") as f:
        f.write(json.dumps(_message(event_id="e-new", v=PROTOCOL_VERSION + 1, step=2)) + "\n")
        f.write(json.dumps(_message(event_id="e-after", step=3)) + "\n")
    ingestor = Ingestor(store, store.get_run("run-a"))
    assert ingestor.poll() == 1
    assert ingestor.poll() == 0  # still stopped there, not skipped past
    steps = [e.step for e in store.events("run-a", types=["STEP_HEALTHY"])]
    assert steps == [1]
    (unreadable,) = store.events("run-a", types=["CHANNEL_UNREADABLE"])
    assert unreadable.attributes["path"] == str(writer.path)
    assert f"v{PROTOCOL_VERSION + 1}" in unreadable.attributes["error"]


def test_the_reader_yields_only_complete_lines(tmp_path):
    writer = ChannelWriter(tmp_path, generation=1, rank=0)
    writer.send("STEP_HEALTHY", step=1)
    writer.close()
    with open(writer.path, "a") as f:
        f.write('{"event_id": "half')
    reader = ChannelReader(tmp_path)
    assert [m.step for m in reader.poll()] == [1]
    assert list(reader.poll()) == []


def test_stop_requests_round_trip_and_a_newer_one_is_refused(tmp_path):
    path = write_stop_request(tmp_path, 3, "cancel", save=False, fence_generation=4)
    request = read_stop_request(path)
    assert request == StopRequest.model_validate_json(path.read_text())
    assert (request.v, request.reason, request.save, request.fence_generation) == (
        PROTOCOL_VERSION,
        "cancel",
        False,
        4,
    )
    assert path == RunPaths(tmp_path).stop_file(3)
    assert read_stop_request(RunPaths(tmp_path).stop_file(9)) is None
    path.write_text(json.dumps({**json.loads(path.read_text()), "v": PROTOCOL_VERSION + 1}))
    with pytest.raises(ProtocolVersionError):
        read_stop_request(path)


def test_rank_manifest_and_skip_steps_round_trip():
    entries = build_rank_manifest(
        nodes=2, devices_per_node=2, dp=2, tp=2, pp=1, device_type="cuda", hosts=["a", "b"]
    )
    assert decode_rank_manifest(encode_rank_manifest(entries)) == entries
    assert [(e.host, e.local_rank, e.dp, e.tp) for e in entries] == [
        ("a", 0, 0, 0),
        ("a", 1, 0, 1),
        ("b", 0, 1, 0),
        ("b", 1, 1, 1),
    ]
    assert decode_skip_steps(encode_skip_steps([(3, 5), (9, 9)])) == [(3, 5), (9, 9)]
    assert decode_skip_steps(None) == []


def test_a_worker_refuses_a_controller_of_a_newer_protocol(tmp_path, monkeypatch):
    monkeypatch.setenv(protocol.ENV_RUN_ID, "run-x")
    monkeypatch.setenv(protocol.ENV_RUN_DIR, str(tmp_path))
    monkeypatch.setenv(protocol.ENV_GENERATION, "1")
    monkeypatch.setenv(protocol.ENV_PROTOCOL_VERSION, str(PROTOCOL_VERSION + 1))
    with pytest.raises(RunwrightError, match="install the same runwright version"):
        init(heartbeat=False)


def test_messages_reject_unknown_fields():
    with pytest.raises(ValueError, match="extra"):
        ChannelMessage.model_validate(_message(surprise=1))


def test_a_rank_is_placed_where_it_really_runs():
    """c10d may give the agent started as node 1 node rank 0: rank 0's entry then says node 1 and
    the allocation's host of node 1, and keeps its grid coordinates, local rank and device."""
    entries = build_rank_manifest(
        nodes=2, devices_per_node=2, dp=2, tp=2, pp=1, device_type="cuda", hosts=["a", "b"]
    )
    moved = placed_entry(entries, 0, node=1, host="machine-b")
    assert moved == entries[0].model_copy(update={"node": 1, "host": "b"})
    assert (moved.local_rank, moved.device, moved.dp, moved.tp) == (0, "cuda:0", 0, 0)
    # A node the allocation does not name keeps the machine's own name.
    assert placed_entry(entries, 1, node=5, host="machine-x").host == "machine-x"
    assert placed_entry(entries, 3, node=None, host="b") == entries[3]  # no executor said
    assert placed_entry(entries, 4, node=0, host="a") is None
