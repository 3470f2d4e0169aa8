"""Finding and stopping every process of a worker group.

torchrun starts each rank in a session of its own (so a signal to torchrun's process group does
not reach the ranks), and a SIGKILLed torchrun leaves its ranks running. Stopping a generation
therefore walks the process tree under the group's supervisor through /proc and signals every
member, plus the rank pids the workers reported themselves.
"""

import contextlib
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

PROC = Path("/proc")


def _parent_of(pid: int) -> int | None:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # Field 4 is the parent pid; the command name (field 2) may contain spaces, so split after
    # its closing parenthesis.
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[1])


def is_alive(pid: int) -> bool:
    """True for a running process, False for a missing one or a zombie."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def descendants(root_pid: int) -> list[int]:
    """Every live process below `root_pid`, found by scanning parent pids in /proc."""
    children: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            parent = _parent_of(int(entry.name))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry.name))
    found, frontier = [], [root_pid]
    while frontier:
        pid = frontier.pop()
        for child in children.get(pid, []):
            found.append(child)
            frontier.append(child)
    return found


def signal_all(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def kill_tree(root_pid: int, extra_pids: Iterable[int] = (), grace_seconds: float = 0.0) -> None:
    """SIGTERM the tree (and `extra_pids`), wait up to the grace period, then SIGKILL what is
    left. SIGKILL also ends a SIGSTOPped process, which SIGTERM cannot."""
    members = {root_pid, *descendants(root_pid), *extra_pids}
    if grace_seconds > 0:
        signal_all(members, signal.SIGTERM)
        deadline = time.monotonic() + grace_seconds
        while time.monotonic() < deadline and any(is_alive(p) for p in members):
            time.sleep(0.1)
    members |= set(descendants(root_pid)) if is_alive(root_pid) else set()
    signal_all([p for p in members if is_alive(p)], signal.SIGKILL)
