"""Wait until a file grows, at no CPU cost while it does not.

The collective dumper waits for faulthandler to write a stack into a file from a C signal handler,
where no Python code runs. Polling the file's size wakes a thread that takes the GIL from the
training thread every time it looks (at 4 looks a second, 20-30 us of CPU per step of the
reference trainer, benchmarks/runtime_overhead.py). On Linux the kernel says when the file was
written instead (inotify, through libc: the standard library has no binding), and the waiting
thread sleeps in `select` with the GIL released. Elsewhere, or when the kernel refuses another
inotify instance (`fs.inotify.max_user_instances`), it polls as before.
"""

import contextlib
import ctypes
import ctypes.util
import os
import select
import sys
import threading
from pathlib import Path

IN_MODIFY = 0x00000002
"""inotify's event for a write to the watched file (<sys/inotify.h>)."""
IN_CLOEXEC = 0o2000000
IN_NONBLOCK = 0o4000
POLL_SECONDS = 0.25
"""The fallback's look interval."""


def _inotify(path: Path) -> int | None:
    """An inotify descriptor watching `path` for writes, or None where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fd = libc.inotify_init1(IN_CLOEXEC | IN_NONBLOCK)
    except (OSError, AttributeError):
        return None
    if fd < 0:
        return None
    if libc.inotify_add_watch(fd, os.fsencode(path), IN_MODIFY) < 0:
        os.close(fd)
        return None
    return fd


class FileGrowth:
    """`wait()` returns once `path` grew since the last call, or False once `close()` ran."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen = path.stat().st_size
        self._closed = threading.Event()
        self._inotify = _inotify(path)
        self._wake_read, self._wake_write = os.pipe() if self._inotify is not None else (-1, -1)

    @property
    def kernel_notified(self) -> bool:
        """True when the kernel wakes the waiter (inotify), False when it polls."""
        return self._inotify is not None

    def wait(self) -> bool:
        while not self._closed.is_set():
            if self._inotify is None:
                self._closed.wait(POLL_SECONDS)
            else:
                ready, _, _ = select.select([self._inotify, self._wake_read], [], [])
                if self._inotify in ready:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self._inotify, 4096)  # drain the events: only the size counts
            if self._closed.is_set():
                return False
            try:
                size = self.path.stat().st_size
            except OSError:  # the folder was removed under the process: nothing left to watch
                return False
            if size != self._seen:
                self._seen = size
                return True
        return False

    def settled(self, pause_seconds: float) -> bool:
        """Wait until the file stops growing for `pause_seconds` (a writer that writes in many
        small writes has finished); False once `close()` ran."""
        while not self._closed.wait(pause_seconds):
            try:
                size = self.path.stat().st_size
            except OSError:
                return False
            if size == self._seen:
                return True
            self._seen = size
        return False

    def close(self) -> None:
        """Wake and end a `wait()` in another thread (idempotent)."""
        if self._closed.is_set():
            return
        self._closed.set()
        if self._inotify is not None:
            os.write(self._wake_write, b"x")

    def release(self) -> None:
        """Close the descriptors once no thread waits any more."""
        for fd in (self._inotify, self._wake_read, self._wake_write):
            if fd is not None and fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._inotify, self._wake_read, self._wake_write = None, -1, -1
