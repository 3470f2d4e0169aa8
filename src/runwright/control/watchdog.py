"""The watchdog: a run is alive only if every rank beats and the run makes progress.

Watching only for process exit lets a hung collective sit for hours; a SIGSTOPped rank, a
deadlock or a stuck storage call all leave the processes alive. Per generation the watchdog keeps
each rank's newest heartbeat and the time the step last advanced, and returns a verdict:
- HANG: a rank has been silent longer than recovery.heartbeat_timeout_seconds (before its first
  beat, the start-up allowance is progress_timeout_seconds: imports and rendezvous take time);
  A rank that reported the plan's last step, or acknowledged a stop (`finished`, filled by the
  controller), has finished its work: it exits and stops beating
  while its peers save and the launcher collects them, which on a busy machine can take longer
  than a heartbeat timeout, so its silence is only judged against the progress timeout;
- NO_PROGRESS: beats arrive but no step advanced. Start-up and steady state get separate limits:
  - start-up (imports, rendezvous, restore, the first recovery.warmup_steps steps: compilation,
    first reads): three times progress_timeout_seconds, and progress_timeout_seconds until
    MIN_STEP_SAMPLES step times of this generation are measured;
  - steady state: max(heartbeat_timeout_seconds, STEADY_FACTOR x the p95 of the generation's
    measured step times), capped at progress_timeout_seconds. A stall past this limit but under
    the cap is only a suspicion (`Verdict.suspect`): the ranks' processes must show it is no
    slow step (control/stall.py: none of them computed for a confirm window) before the run is
    recovered; at the cap the verdict stands, as before. So a collective that blocks for good is
    caught seconds after the steps stop, while a slow step on a busy machine, an evaluation or a
    long data read, which all use CPU, waits for the cap.
  While a save is in flight the clock starts no earlier than checkpoint.save_timeout_seconds after
  the group's last save event: a save that hangs is the worker's to report (a `storage` failure
  with ETIMEDOUT, ckpt/deadline.py), and it does so at that timeout, before this verdict could
  come.
"""

import math
import time
from collections import deque
from dataclasses import dataclass, field

from runwright.spec import FailureClass, RecoverySpec

WARMUP_ALLOWANCE_FACTOR = 3.0
STEADY_FACTOR = 10.0
"""Steady-state limit in p95 step times: when to look, not what decides. A stall ten times the
step time that 95% of the generation's steps beat is worth a look; the stall check
(control/stall.py) decides whether it is a block."""
MIN_STEP_SAMPLES = 3
"""Step times measured before the steady-state limit applies; until then, start-up rules. Few
(the p95 of three is their maximum): a fault a few steps past a restore must be caught too, and
the stall check (control/stall.py), not the limit, is what keeps a slow step from counting."""
STEP_SAMPLES = 64
"""Newest step times kept: the limit follows the machine's current load."""


@dataclass
class Verdict:
    failure_class: FailureClass
    rank: int | None
    detail: str
    suspect: bool = False
    """A NO_PROGRESS past the steady-state limit but under the cap: the ranks' processes must
    confirm it (control/stall.py) before it counts."""


@dataclass
class Watchdog:
    recovery: RecoverySpec
    world_size: int
    started_monotonic: float = field(default_factory=time.monotonic)
    start_step: int = 0
    beats: dict[int, float] = field(default_factory=dict)
    """rank -> monotonic time of its newest heartbeat or event."""
    last_step: int | None = None
    last_advance: float = field(default_factory=time.monotonic)
    paused: bool = False
    """Set while the group is stopping on request; a save may legitimately take a while."""
    save_timeout_seconds: float | None = None
    """checkpoint.save_timeout_seconds: how long a save in flight may stall the steps."""
    total_steps: int | None = None
    """The plan's last step: a rank that reported it is finishing, not hanging."""
    finished: set[int] = field(default_factory=set)
    """Ranks that reported `total_steps` or acknowledged a stop."""
    saving_since: float | None = None
    """Monotonic time of the last save event (staged, committed, failed) while a save is in
    flight; None when none is."""
    step_seconds: deque[float] = field(default_factory=lambda: deque(maxlen=STEP_SAMPLES))
    """Seconds per step between the generation's successive step advances, by the workers'
    clocks (the controller may read several steps in one pass)."""
    advanced_unix_s: float | None = None
    """The worker's time of the newest step advance."""
    saved_since_advance: bool = False
    """A save event came since the newest step advance: the next step time includes a save,
    whose stall the save timeout already allows for, so it is not a step time."""

    def saves_changed(self, in_flight: bool, now: float | None = None) -> None:
        """A save was staged or ended; `in_flight`: whether one of the group's is in flight now."""
        self.saving_since = (time.monotonic() if now is None else now) if in_flight else None
        self.saved_since_advance = True

    def beat(self, rank: int) -> None:
        self.beats[rank] = time.monotonic()

    def finishing(self, rank: int) -> None:
        """`rank` exits on purpose (it acknowledged a stop): its silence from here is judged by
        the progress timeout, as that of a rank past the plan's last step."""
        self.finished.add(rank)

    def step(self, rank: int, step: int, at_unix_s: float | None = None) -> None:
        """`rank` reported `step` healthy at `at_unix_s` (its own clock), if known."""
        self.beat(rank)
        if self.total_steps is not None and step >= self.total_steps:
            self.finished.add(rank)
        if self.last_step is None or step > self.last_step:
            if self.last_step is not None and at_unix_s and self.advanced_unix_s:
                per_step = (at_unix_s - self.advanced_unix_s) / (step - self.last_step)
                if per_step > 0 and not self.saved_since_advance:
                    self.step_seconds.append(per_step)
            self.saved_since_advance = False
            self.last_step = step
            self.last_advance = time.monotonic()
            self.advanced_unix_s = at_unix_s

    def steady_limit(self) -> tuple[float, str] | None:
        """The steady-state no-progress limit and how it was derived; None while too few step
        times are measured. p95 by the nearest-rank method (the ceil(0.95 n)-th smallest)."""
        if len(self.step_seconds) < MIN_STEP_SAMPLES:
            return None
        ordered = sorted(self.step_seconds)
        p95 = ordered[math.ceil(0.95 * len(ordered)) - 1]
        rec = self.recovery
        limit = min(
            rec.progress_timeout_seconds, max(rec.heartbeat_timeout_seconds, STEADY_FACTOR * p95)
        )
        why = (
            f"steady-state limit {limit:.1f} s: max(heartbeat timeout "
            f"{rec.heartbeat_timeout_seconds:g} s, {STEADY_FACTOR:g} x p95 step {p95:.2f} s), "
            f"cap {rec.progress_timeout_seconds:g} s"
        )
        return limit, why

    def check(self, now: float | None = None) -> Verdict | None:
        if self.paused:
            return None
        now = time.monotonic() if now is None else now
        rec = self.recovery
        for rank in range(self.world_size):
            seen = self.beats.get(rank)
            if seen is None:
                silent = now - self.started_monotonic
                if silent > rec.progress_timeout_seconds:
                    return Verdict(
                        FailureClass.HANG,
                        rank,
                        f"rank {rank} never sent a heartbeat in {silent:.0f} s after launch",
                    )
            elif now - seen > (
                rec.progress_timeout_seconds
                if rank in self.finished
                else rec.heartbeat_timeout_seconds
            ):
                return Verdict(
                    FailureClass.HANG,
                    rank,
                    f"rank {rank} silent for "
                    f"{now - seen:.1f} s ("
                    + (
                        f"after its last step; progress timeout {rec.progress_timeout_seconds:g} s)"
                        if rank in self.finished
                        else f"heartbeat timeout {rec.heartbeat_timeout_seconds:g} s)"
                    ),
                )
        return self._progress(now)

    def _progress(self, now: float) -> Verdict | None:
        """The NO_PROGRESS verdict, if the steps have stalled past their limit (module doc)."""
        if len(self.beats) < self.world_size:
            return None
        rec = self.recovery
        steps_done = (self.last_step or self.start_step) - self.start_step
        warming = steps_done < rec.warmup_steps
        allowance = rec.progress_timeout_seconds * (WARMUP_ALLOWANCE_FACTOR if warming else 1.0)
        since = self.last_advance
        if self.saving_since is not None and self.save_timeout_seconds is not None:
            since = max(since, self.saving_since + self.save_timeout_seconds)
        stalled = now - self.last_advance
        if now - since > allowance:
            return Verdict(
                FailureClass.NO_PROGRESS,
                None,
                f"no step past {self.last_step} for {stalled:.0f} s (allowance {allowance:g} s)",
            )
        steady = None if warming else self.steady_limit()
        if steady is not None and now - since > steady[0]:
            return Verdict(
                FailureClass.NO_PROGRESS,
                None,
                f"no step past {self.last_step} for {stalled:.1f} s ({steady[1]})",
                suspect=True,
            )
        return None
