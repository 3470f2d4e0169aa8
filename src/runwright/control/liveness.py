"""Telling a slow rank from a stopped one before a silent rank is declared hung.

A heartbeat can be late without a hang. On an oversubscribed machine the rank's heartbeat thread,
and the controller that reads it, wait for a core; a rank that already exited stops beating while
its group's exit status is still on its way. Recovering either as a hang restarts a healthy run
(or, with its retries spent, fails it). So the watchdog's HANG verdict is a suspicion, which the
silent rank's own process confirms or clears before the run is recovered:

- gone (exited, killed, a zombie): not a hang. The group's exit status is the evidence and the
  exit path classifies it; it is awaited for one more heartbeat timeout, after which the group
  counts as hung (its launcher did not notice the rank's death).
- stopped or traced (state T or t, e.g. SIGSTOP): hung, at once.
- alive and its CPU time advanced since the suspicion began: slow, not stopped; keep watching,
  up to the progress timeout of silence (a rank that spins without ever beating is hung too).
- alive with no CPU time for `confirm_seconds` since the suspicion began: hung (blocked in a
  deadlock, a collective whose peer never comes, a stuck storage call).

A rank that never beat has no pid yet: start-up (imports, rendezvous) outlasted its allowance.
Where the executor can list the generation's processes (the local one, by launch tag), those
processes stand in for the rank and the same rules apply to their summed CPU time: on a busy
machine importing torch may take minutes, and a generation that still computes is slow, not
hung. Elsewhere (a Slurm job's processes are on other hosts) the verdict stands as it is.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from runwright.control.processes import ProcessSample, sample, sample_all
from runwright.control.watchdog import Verdict

CONFIRM_SECONDS = 2.0
"""How long a silent, live rank must use no CPU before it counts as blocked: many scheduler
ticks (10 ms each), so a process that merely waits for a core shows CPU time within it."""


@dataclass
class _Suspicion:
    began: float
    """When the rank was first suspected (silence measured from here)."""
    since: float
    """Start of the current CPU window."""
    first: ProcessSample | None


@dataclass
class Liveness:
    """Confirms or clears the watchdog's HANG verdicts for one worker group."""

    grace_seconds: float
    """How long a rank that is gone may wait for its group's exit status (heartbeat timeout)."""
    max_silent_seconds: float
    """Silence after which even a rank that uses CPU counts as hung (the progress timeout)."""
    confirm_seconds: float = CONFIRM_SECONDS
    suspected: dict[int, _Suspicion] = field(default_factory=dict)

    def confirm(
        self,
        verdict: Verdict,
        pid: int | None,
        now: float | None = None,
        members: Callable[[], list[int]] | None = None,
    ) -> Verdict | None:
        """The verdict once the rank's process confirms it; None while it is only slow, or gone
        with its group's exit status still to come. `members` lists the generation's processes,
        which stand in for a rank that never reported its pid."""
        if verdict.rank is None or (pid is None and members is None):
            return verdict  # no rank named, or nothing to look at
        now = time.monotonic() if now is None else now
        seen = sample(pid) if pid is not None else sample_all(members() if members else [])
        suspicion = self.suspected.setdefault(verdict.rank, _Suspicion(now, now, seen))
        waited = now - suspicion.since
        if seen is None:
            if waited < self.grace_seconds:
                return None
            return Verdict(
                verdict.failure_class,
                verdict.rank,
                f"{verdict.detail}; the rank's process is gone but its group has not exited "
                f"{waited:.1f} s later",
            )
        if seen.state in ("T", "t"):
            return Verdict(
                verdict.failure_class, verdict.rank, f"{verdict.detail}; its process is stopped"
            )
        silent = now - suspicion.began
        if silent > self.max_silent_seconds:
            return Verdict(
                verdict.failure_class,
                verdict.rank,
                f"{verdict.detail}; its process runs but sent nothing for {silent:.0f} s "
                f"(progress timeout {self.max_silent_seconds:g} s)",
            )
        first = suspicion.first
        if first is not None and seen.cpu_ticks > first.cpu_ticks:
            # Running, only late: a new window from here, so a later stall is still measured.
            self.suspected[verdict.rank] = _Suspicion(suspicion.began, now, seen)
            return None
        if waited < self.confirm_seconds:
            return None
        return Verdict(
            verdict.failure_class,
            verdict.rank,
            f"{verdict.detail}; its process (state {seen.state}) used no CPU in {waited:.1f} s",
        )

    def clear(self) -> None:
        """Every rank beats again: no suspicion is left."""
        self.suspected.clear()
