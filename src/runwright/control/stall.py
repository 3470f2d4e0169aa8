"""Telling a slow step from a blocked group before a steady-state stall counts as no progress.

The watchdog's steady-state limit (control/watchdog.py) is a few step times, far under the
progress timeout, so its NO_PROGRESS verdict is a suspicion until the ranks' processes confirm it.
A group blocked in a collective whose peer never comes (or in a deadlock) has every rank's
training thread asleep: heartbeats still arrive, but no rank computes. A slow group has at least
one rank computing: the one its peers wait for, an evaluation, a long data read. So:

- every rank's process is looked at (its pid from WORKER_STARTED); if any is not visible from
  here (a rank on another host), nothing is confirmed and the progress timeout, the cap, decides;
- a rank computes when its main thread used CPU, waits on a disk (state D), or the whole
  process used at least BUSY_SHARE of a core (reader threads decoding while the main thread
  waits for them);
- no rank computed for `confirm_seconds`: blocked, the verdict stands; a rank computed: a new
  window begins, so a later block is still measured from when it began.

The main thread is told apart from the heartbeat thread through /proc/<pid>/task/<pid>/stat
(the main thread's id is the process id; proc(5)). Measured on the development machine: two gloo
ranks blocked in an all-reduce, each with a heartbeat thread writing every 0.5 s, used 0 main
thread ticks and 5-6 process ticks in 10 s (0.3% of a core); a rank that computes, even on a
machine oversubscribed three-fold, uses a third of a core.

The CPU of a GPU rank that waits on its device in a spin shows as computing: such a block is
caught by the cap, as before this check existed.
"""

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from runwright.control.watchdog import Verdict

CONFIRM_SECONDS = 2.0
"""How long no rank may compute before the group counts as blocked: 200 scheduler ticks, so a
rank that merely waits for a core shows CPU time within it (control/liveness.py)."""
BUSY_SHARE = 0.05
"""Share of one core over the window from which a process computes, whichever thread it is:
over ten times what the heartbeat and gloo's idle threads use."""
PROC = Path("/proc")
CLOCK_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class RankSample:
    """One look at a rank's process: its main thread's state and CPU, and the whole process's."""

    main_state: str
    main_ticks: int
    process_ticks: int


def _stat_fields(path: Path) -> list[str] | None:
    try:
        stat = path.read_text()
    except OSError:
        return None
    # After the command name (which may hold spaces): state at index 0, utime/stime at 11-12.
    return stat.rsplit(")", 1)[1].split()


def sample_rank(pid: int) -> RankSample | None:
    """The rank's process as RankSample; None once it is gone or a zombie."""
    whole = _stat_fields(PROC / str(pid) / "stat")
    main = _stat_fields(PROC / str(pid) / "task" / str(pid) / "stat")
    if whole is None or main is None or whole[0] in ("Z", "X"):
        return None
    return RankSample(
        main_state=main[0],
        main_ticks=int(main[11]) + int(main[12]),
        process_ticks=int(whole[11]) + int(whole[12]),
    )


@dataclass
class StallCheck:
    """Confirms or clears the watchdog's suspected NO_PROGRESS for one worker group."""

    confirm_seconds: float = CONFIRM_SECONDS
    busy_share: float = BUSY_SHARE
    since: float | None = None
    """Start of the current window; None while nothing is suspected."""
    first: dict[int, RankSample] = field(default_factory=dict)

    def confirm(
        self, verdict: Verdict, pids: Iterable[int], world_size: int, now: float | None = None
    ) -> Verdict | None:
        """The verdict once no rank computed for the window; None while one does, while the
        window runs, or while some rank's process cannot be seen from here."""
        pids = sorted(set(pids))
        if len(pids) < world_size:
            return None  # a rank elsewhere (or not started): only the cap can decide
        now = time.monotonic() if now is None else now
        seen = {pid: s for pid in pids if (s := sample_rank(pid)) is not None}
        if not seen:
            return None  # every rank is gone: the group's exit status is the evidence
        if self.since is None:
            self.since, self.first = now, seen
            return None
        waited = now - self.since
        # Over the whole window, however early in it this look is: 0.05 x 2 s x 100 Hz = 10
        # ticks, where the heartbeat thread alone used about one.
        busy_ticks = self.busy_share * self.confirm_seconds * CLOCK_TICKS_PER_SECOND
        for pid, sample in seen.items():
            before = self.first.get(pid)
            if before is None:
                continue
            if (
                sample.main_state == "D"
                or sample.main_ticks > before.main_ticks
                or sample.process_ticks - before.process_ticks >= busy_ticks
            ):
                self.since, self.first = now, seen  # computing: slow, not blocked
                return None
        if waited < self.confirm_seconds:
            return None
        cpu = sum(s.process_ticks - self.first[p].process_ticks for p, s in seen.items())
        return Verdict(
            verdict.failure_class,
            verdict.rank,
            f"{verdict.detail}; no rank computed in {waited:.1f} s (main threads asleep, "
            f"{cpu} CPU ticks in all: heartbeats only)",
        )

    def clear(self) -> None:
        """The steps advance again (or the stall reached the cap): nothing is suspected."""
        self.since = None
        self.first = {}
