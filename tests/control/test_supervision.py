"""A rank is silent only once the controller has read everything it wrote: a backlog in its
channel file (the controller fell behind, or waited for a core) is not a hang."""

import time
from types import SimpleNamespace

from runwright.control.channel import ChannelReader
from runwright.control.supervision import Supervision
from runwright.control.watchdog import Watchdog
from runwright.layout import rank_file_name
from runwright.protocol import HEARTBEAT, ChannelMessage, encode_message
from runwright.spec import FailureClass, RecoverySpec

RECOVERY = RecoverySpec(
    heartbeat_interval_seconds=0.5, heartbeat_timeout_seconds=4, progress_timeout_seconds=60
)


def beat(path, n):
    message = ChannelMessage(
        event_id=f"hb-{n}", type=HEARTBEAT, generation=1, rank=0, time_unix_s=time.time()
    )
    with path.open("a") as f:
        f.write(encode_message(message))


def test_a_rank_with_unread_messages_is_not_silent_and_is_once_they_are_read(tmp_path):
    channel = tmp_path / "channel"
    channel.mkdir()
    rank_file = channel / rank_file_name(1, 0)
    reader = ChannelReader(channel)
    watchdog = Watchdog(RECOVERY, world_size=1)
    sup = Supervision(
        group=SimpleNamespace(generation=1),
        watchdog=watchdog,
        unread=lambda rank: reader.holds_unread(channel / rank_file_name(1, rank)),
    )
    watchdog.beats[0] = time.monotonic() - 10  # last read ten seconds ago
    beat(rank_file, 1)  # ...but it wrote since: the controller is behind
    assert sup.watch() is None
    assert time.monotonic() - watchdog.beats[0] < 1  # silence now counts from here
    assert list(reader.poll())  # the backlog is read: nothing unread is left
    watchdog.beats[0] = time.monotonic() - 10
    verdict = sup.watch()  # no pid to look at: the watchdog's verdict stands
    assert verdict is not None and verdict.failure_class is FailureClass.HANG
    assert verdict.rank == 0


def test_a_partial_line_counts_as_written_and_a_newer_protocols_line_does_not(tmp_path):
    channel = tmp_path / "channel"
    channel.mkdir()
    rank_file = channel / rank_file_name(1, 0)
    reader = ChannelReader(channel)
    rank_file.write_text('{"v": 1, "event_id": "half')  # being written
    assert reader.holds_unread(rank_file)
    rank_file.write_text('{"v": 99, "event_id": "x", "type": "HEARTBEAT"}\n')
    assert list(reader.poll()) == []
    assert reader.unreadable  # stopped at the newer line, which stays unread for ever
    assert not reader.holds_unread(rank_file)
    assert not reader.holds_unread(channel / rank_file_name(1, 7))  # no such file
