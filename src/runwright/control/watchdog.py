"""The watchdog: a run is alive only if every rank beats and the run makes progress.

Watching only for process exit lets a hung collective sit for hours; a SIGSTOPped rank, a
deadlock or a stuck storage call all leave the processes alive. Per generation the watchdog keeps
each rank's newest heartbeat and the time the step last advanced, and returns a verdict:
- HANG: a rank has been silent longer than recovery.heartbeat_timeout_seconds (before its first
  beat, the start-up allowance is progress_timeout_seconds: imports and rendezvous take time);
  A rank that reported the plan's last step has finished its work: it exits and stops beating
  while its peers save and the launcher collects them, which on a busy machine can take longer
  than a heartbeat timeout, so its silence is only judged against the progress timeout;
- NO_PROGRESS: beats arrive but no step advanced for progress_timeout_seconds. During the first
  recovery.warmup_steps steps (compilation, first reads) the allowance is three times that. While
  a save is in flight the clock starts no earlier than checkpoint.save_timeout_seconds after the
  group's last save event: a save that hangs is the worker's to report (a `storage` failure with
  ETIMEDOUT, ckpt/deadline.py), and it does so at that timeout, before this verdict could come.
"""

import time
from dataclasses import dataclass, field

from runwright.spec import FailureClass, RecoverySpec

WARMUP_ALLOWANCE_FACTOR = 3.0


@dataclass
class Verdict:
    failure_class: FailureClass
    rank: int | None
    detail: str


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
    """Ranks that reported `total_steps`."""
    saving_since: float | None = None
    """Monotonic time of the last save event (staged, committed, failed) while a save is in
    flight; None when none is."""

    def saves_changed(self, in_flight: bool, now: float | None = None) -> None:
        """A save was staged or ended; `in_flight`: whether one of the group's is in flight now."""
        self.saving_since = (time.monotonic() if now is None else now) if in_flight else None

    def beat(self, rank: int) -> None:
        self.beats[rank] = time.monotonic()

    def step(self, rank: int, step: int) -> None:
        self.beat(rank)
        if self.total_steps is not None and step >= self.total_steps:
            self.finished.add(rank)
        if self.last_step is None or step > self.last_step:
            self.last_step = step
            self.last_advance = time.monotonic()

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
        steps_done = (self.last_step or self.start_step) - self.start_step
        allowance = rec.progress_timeout_seconds * (
            WARMUP_ALLOWANCE_FACTOR if steps_done < rec.warmup_steps else 1.0
        )
        since = self.last_advance
        if self.saving_since is not None and self.save_timeout_seconds is not None:
            since = max(since, self.saving_since + self.save_timeout_seconds)
        if len(self.beats) == self.world_size and now - since > allowance:
            return Verdict(
                FailureClass.NO_PROGRESS,
                None,
                f"no step past {self.last_step} for {now - self.last_advance:.0f} s "
                f"(allowance {allowance:g} s)",
            )
        return None
