"""Finding and stopping every process of a worker group.

torchrun starts each rank in a session of its own, so a signal to torchrun's process group does
not reach the ranks. Two ways find a group's processes through /proc: the tree under its
supervisor (parent pids), and the launch tags every process of a generation inherits in its
environment (`processes_tagged`), which still find ranks whose supervisor and torchrun are gone
(re-parented to init, so no longer in any tree of ours). The parent-death signals set at every
level (runwright/lifetime.py) normally take such ranks down already; the tags are the check that
does not depend on them.
"""

import contextlib
import os
import signal
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from runwright.lifetime import environ_of

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


@dataclass(frozen=True)
class ProcessSample:
    """One look at a live process in /proc/<pid>/stat."""

    state: str
    """The kernel's one-letter state: R running, S sleeping, D in I/O, T stopped, t traced."""
    cpu_ticks: int
    """User plus system CPU time of all its threads, in clock ticks (utime + stime)."""


def sample(pid: int) -> ProcessSample | None:
    """The process's state and CPU time; None once it is gone or a zombie."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # After the command name: field 3 (state) is index 0, fields 14-15 (utime, stime) 11-12.
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        return None
    return ProcessSample(state=fields[0], cpu_ticks=int(fields[11]) + int(fields[12]))


def sample_all(pids: Iterable[int]) -> ProcessSample | None:
    """The processes as one: their CPU time summed, stopped only when every live one is; None
    once all are gone."""
    seen = [s for s in map(sample, pids) if s is not None]
    if not seen:
        return None
    running = [s.state for s in seen if s.state not in ("T", "t")]
    return ProcessSample(
        state=running[0] if running else seen[0].state,
        cpu_ticks=sum(s.cpu_ticks for s in seen),
    )


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


def environs() -> Iterator[tuple[int, dict[str, str]]]:
    """(pid, launch environment) of every live process this user may read, this one excepted."""
    me = os.getpid()
    for entry in PROC.iterdir():
        if entry.name.isdigit() and int(entry.name) != me:
            env = environ_of(int(entry.name))
            if env is not None:
                yield int(entry.name), env


def processes_tagged(tags: dict[str, str]) -> list[int]:
    """Every live process (this one excepted) started with each `tags` variable set to its
    value. Other users' processes are unreadable and never match."""
    return [pid for pid, env in environs() if all(env.get(k) == v for k, v in tags.items())]


def wait_gone(pids: Iterable[int], timeout_seconds: float) -> list[int]:
    """Wait until none of `pids` is alive (a zombie counts as gone); the survivors at the
    deadline. SIGKILL takes effect when a process leaves the kernel, so one blocked in
    uninterruptible I/O (a hung NFS mount) can outlast any deadline."""
    pending = set(pids)
    deadline = time.monotonic() + timeout_seconds
    while True:
        pending = {p for p in pending if is_alive(p)}
        if not pending or time.monotonic() >= deadline:
            return sorted(pending)
        time.sleep(0.02)


def boot_time_unix_s() -> float | None:
    """When this machine booted (`btime` in /proc/stat), or None where unknown."""
    try:
        for line in (PROC / "stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None
