"""The controller side of the channel: tail every worker's channel file of a run.

Workers append one JSON line per message (runtime/channel.py); the format is the worker protocol's
(`runwright.protocol`). A line from a newer protocol is not guessed at: the reader stops at it,
keeps it for the next poll and remembers the error, which the ingestor records once per file, so
an upgraded worker is visible instead of silently dropped.
"""

from collections.abc import Iterator
from pathlib import Path

from runwright.layout import RANK_FILE_GLOB
from runwright.protocol import ChannelMessage, ProtocolVersionError, decode_message


class ChannelReader:
    """Tails every file in a channel folder, yielding only complete new lines.

    The cursor moves past a message only when the consumer asks for the next one, i.e. once it
    has handled this one. A consumer that raises (the store went away while it stored the
    message) or stops early gets the same message again on the next poll, so the file stays the
    buffer of everything not yet handled; the event id makes the second copy harmless."""

    def __init__(self, channel_dir: Path) -> None:
        self.channel_dir = channel_dir
        self._offsets: dict[Path, int] = {}
        self.unreadable: dict[Path, ProtocolVersionError] = {}
        """Files stopped at a line of a newer protocol, with the error that names the versions."""

    def poll(self) -> Iterator[ChannelMessage]:
        if not self.channel_dir.is_dir():
            return
        for path in sorted(self.channel_dir.glob(RANK_FILE_GLOB)):
            offset = self._offsets.get(path, 0)
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read()
            start = 0
            # A line without its newline is still being written; read it next time.
            while (end := data.find(b"\n", start)) >= 0:
                try:
                    message = decode_message(data[start:end])
                except ProtocolVersionError as error:
                    self.unreadable[path] = error
                    break
                if message is not None:
                    yield message
                start = end + 1
                self._offsets[path] = offset + start
