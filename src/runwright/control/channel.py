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
        """Every new message, one at a time; the cursor passes each when the next is asked for."""
        for path, message, next_offset in self._lines():
            if message is not None:
                yield message
            self._offsets[path] = next_offset

    def poll_batches(self, max_messages: int) -> Iterator[list[ChannelMessage]]:
        """Every new message, in lists of at most `max_messages`, in the order `poll` yields them.
        The cursor passes a whole list when the next one is asked for (or the generator ends),
        so a consumer that raises while storing a list gets all of it again next poll."""
        batch: list[ChannelMessage] = []
        pending: dict[Path, int] = {}
        for path, message, next_offset in self._lines():
            if message is not None:
                batch.append(message)
            pending[path] = next_offset
            if len(batch) >= max_messages:
                yield batch
                self._offsets.update(pending)
                batch, pending = [], {}
        if batch:
            yield batch
        self._offsets.update(pending)

    def _lines(self) -> Iterator[tuple[Path, ChannelMessage | None, int]]:
        """(file, decoded message or None for a line to skip, offset just past the line) for
        every complete new line; the caller moves the cursor."""
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
                start = end + 1
                yield path, message, offset + start
