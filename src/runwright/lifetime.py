"""Process lifetimes: a child process that dies with its parent, and a process's launch tags.

Linux's parent-death signal (prctl(2), PR_SET_PDEATHSIG) makes the kernel signal a process when
its parent exits, however the parent exits (SIGKILL included), so a killed supervisor, torchrun or
data build cannot leave its workers running. Two caveats from prctl(2) shape every use here:
- the signal fires when the parent *thread* that forked the child exits, so set it only where
  that thread is the parent's long-lived main thread;
- it is set by the child after fork, and the parent may already be gone by then (the child was
  re-parented to init or a subreaper): check the parent again after setting it, and die if it is
  not the expected one.
The setting is cleared in a forked child and survives execve, so it ties exactly one generation.

This module imports nothing of ours, so every layer (data, runtime, control) may use it.
"""

import ctypes
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

PR_SET_PDEATHSIG = 1
"""From <linux/prctl.h>."""

_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def set_parent_death_signal(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send `sig` to this process when its parent exits. False where the
    platform has no parent-death signal (not Linux)."""
    if _LIBC is None:
        return False
    if _LIBC.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"prctl(PR_SET_PDEATHSIG) failed: {os.strerror(errno)}")
    return True


def die_with_parent(is_parent: Callable[[int], bool]) -> bool:
    """Die (SIGKILL) when the parent exits, and at once if the parent is already gone.

    `is_parent(ppid)` says whether the current parent pid is the process that started this one;
    it is asked after the signal is set, so a parent that exits in between is caught either by
    the signal or by the check. Safe in a `preexec_fn` and a pool initializer. Returns False (and
    changes nothing) where the platform has no parent-death signal."""
    if not set_parent_death_signal():
        return False
    if not is_parent(os.getppid()):
        os.kill(os.getpid(), signal.SIGKILL)
    return True


def die_with_pid(parent_pid: int) -> None:
    """`die_with_parent` for a parent whose pid is known before the fork (a pool initializer's
    argument; a module-level function, so it pickles)."""
    die_with_parent(lambda ppid: ppid == parent_pid)


def environ_of(pid: int) -> dict[str, str] | None:
    """The environment process `pid` was started with (/proc/<pid>/environ, readable for the
    same user's processes); None when it is gone, a zombie (empty environ) or not readable."""
    try:
        raw = (Path("/proc") / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    if not raw:
        return None
    pairs = (item.partition(b"=") for item in raw.split(b"\0") if item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, _, v in pairs}


def has_tags(pid: int, tags: dict[str, str]) -> bool:
    """True if process `pid` was started with every `tags` variable set to its value."""
    env = environ_of(pid)
    return env is not None and all(env.get(k) == v for k, v in tags.items())
