"""The controller side of the channel: tail every worker's channel file of a run.

Workers append one JSON line per message (runtime/channel.py); the format is the worker protocol's
(`runwright.protocol`). A line from a newer protocol is not guessed at: the reader stops at it,
keeps it for the next poll and remembers the error, which the ingestor records once per file, so
an upgraded worker is visible instead of silently dropped.
"""

import fnmatch
import os
import time
from collections.abc import Iterator
from pathlib import Path

from runwright.layout import RANK_FILE_GLOB
from runwright.protocol import ChannelMessage, ProtocolVersionError, decode_message

READ_CHUNK_BYTES = 1 << 18
"""How much of one rank's file is read before the next rank's: files are read in turns, so a
poll cut short by its deadline has advanced every rank alike (a backlog in one rank's file must
not hide another rank's heartbeats from the watchdog), and memory stays bounded whatever the
backlog."""


class ChannelReader:
    """Tails every file in a channel folder, yielding only complete new lines.

    The cursor moves past a message only when the consumer asks for the next one, i.e. once it
    has handled this one. A consumer that raises (the store went away while it stored the
    message) or stops early gets the same message again on the next poll, so the file stays the
    buffer of everything not yet handled; the event id makes the second copy harmless."""

    def __init__(self, channel_dir: Path) -> None:
        self.channel_dir = channel_dir
        self._offsets: dict[Path, int] = {}
        self._last_turn: Path | None = None
        """The file whose turn began last: the next poll starts with the file after it, so a
        poll cut at its deadline does not begin with the same rank every time."""
        self._known: dict[str, Path] = {}
        """File name -> its Path, built once per file."""
        self.unreadable: dict[Path, ProtocolVersionError] = {}
        """Files stopped at a line of a newer protocol, with the error that names the versions."""

    def poll(self) -> Iterator[ChannelMessage]:
        """Every new message, one at a time; the cursor passes each when the next is asked for."""
        for path, message, next_offset in self._lines():
            if message is not None:
                yield message
            self._offsets[path] = next_offset

    def poll_batches(
        self, max_messages: int, until: float | None = None
    ) -> Iterator[list[ChannelMessage]]:
        """Every new message, in lists of at most `max_messages`, in the order `poll` yields them.
        The cursor passes a whole list when the next one is asked for (or the generator ends),
        so a consumer that raises while storing a list gets all of it again next poll. Past
        `until` (time.monotonic()) no further list is read once the consumer has handled one: the
        rest waits for the next poll."""
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
                if until is not None and time.monotonic() >= until:
                    return
        if batch:
            yield batch
        self._offsets.update(pending)

    def unread_bytes(self) -> int:
        """Bytes the channel's files hold past this reader's cursor: its backlog."""
        return sum(max(0, size - self._offsets.get(path, 0)) for path, size in self._files())

    def holds_unread(self, path: Path) -> bool:
        """Whether `path` holds bytes this reader has not consumed: its writer wrote more than
        the controller has read (an ingest backlog), so it was not silent. A file stopped at a
        line of a newer protocol never counts: those bytes are never read."""
        if path in self.unreadable:
            return False
        try:
            size = path.stat().st_size
        except OSError:
            return False
        return size > self._offsets.get(path, 0)

    def _files(self) -> list[tuple[Path, int]]:
        """(file, its size) for every rank file of the channel, in name order. One directory
        read with a stat per file: a run of 1,024 ranks has 1,024 files, and globbing, sorting
        and opening each as a Path every pass cost 50 ms of CPU even with nothing new in them
        (benchmarks/cluster_sim.py), a quarter of a core at five passes a second."""
        if not self.channel_dir.is_dir():
            return []
        found = []
        with os.scandir(self.channel_dir) as entries:
            for entry in entries:
                if fnmatch.fnmatchcase(entry.name, RANK_FILE_GLOB):
                    path = self._known.get(entry.name)
                    if path is None:
                        path = self._known[entry.name] = self.channel_dir / entry.name
                    found.append((entry.name, path, entry.stat().st_size))
        found.sort()
        return [(path, size) for _, path, size in found]

    def _lines(self) -> Iterator[tuple[Path, ChannelMessage | None, int]]:
        """(file, decoded message or None for a line to skip, offset just past the line) for
        every complete new line, the files read in turns of READ_CHUNK_BYTES; the caller moves
        the cursor. A file no longer than the cursor is not opened."""
        files = self._files()
        names = [path for path, _ in files]
        if self._last_turn in names:
            after = names.index(self._last_turn) + 1
            files = files[after:] + files[:after]
        paths = [path for path, size in files if size > self._offsets.get(path, 0)]
        positions = {path: self._offsets.get(path, 0) for path in paths}
        turn = paths
        while turn:
            again = []
            for path in turn:
                self._last_turn = path
                offset = positions[path]
                data = _read_from(path, offset)
                full = len(data) >= READ_CHUNK_BYTES
                start = 0
                # A line without its newline is still being written; read it next time.
                while (end := data.find(b"\n", start)) >= 0:
                    try:
                        message = decode_message(data[start:end])
                    except ProtocolVersionError as error:
                        self.unreadable[path] = error
                        full = False
                        break
                    start = end + 1
                    yield path, message, offset + start
                positions[path] = offset + start
                if full:
                    again.append(path)
            turn = again


def _read_from(path: Path, offset: int) -> bytes:
    """Up to READ_CHUNK_BYTES of `path` from `offset`, or to its end when that much holds no
    newline (one line longer than a turn is taken whole). os.pread on a raw descriptor: the
    buffered file object `open()` builds was most of a 1,024-rank pass's file reading."""
    fd = os.open(path, os.O_RDONLY)
    try:
        data = os.pread(fd, READ_CHUNK_BYTES, offset)
        if len(data) == READ_CHUNK_BYTES and b"\n" not in data:
            rest = os.fstat(fd).st_size - offset - len(data)
            data += os.pread(fd, max(rest, 0), offset + len(data))
        return data
    finally:
        os.close(fd)
