"""One simulated run: a discrete-event walk over the superposed failure process.

Failures. Each of the run's N devices fails in class k at rate r_k, independently, so the run
sees one Poisson process of rate Lambda = N sum r_k (superposition) whose arrivals are of class
k with probability r_k / sum r. The engine draws those arrivals directly - about Lambda x window
of them, 466 for Llama 3's 54 days on 16,384 GPUs - never a trial per device per tick, so its
cost does not grow with N. Devices stay allocated through a recovery, so arrivals keep coming
then: one during a recovery starts it again (Daly 2006 counts failures during restarts so too).

Training. Between two arrivals the run trains in periods, each in closed form (`run_segment`),
so the cost does not grow with the number of saves either:

    first period after a (re)start   T training, then S blocked
    each later period                T training, max(0, P - T) waiting for the previous async
                                     save to persist (a backlog of one that blocks), S blocked
    save k durable                   P after its blocking part ends (P = 0 for sync saves)

T is the interval, S the blocking part (stall + persist for sync, the stall for async), P the
async persist lag. A failure loses the training since the newest durable save.

Recovery. After an unplanned failure: detect, wait for a spare node (if the class lost one and
the pool is empty), restart, restore. A planned interruption first drains with a full save
(stall + persist, superseding a save in flight), then recovers without losing work.
"""

import bisect
import heapq
import itertools
import math
import random
from collections import Counter
from dataclasses import dataclass, field

from runwright.plan.errors import PlanError
from runwright.plan.fleet_model import FailureClass, FleetInputs, SavePolicy, SpareSpec
from runwright.plan.interval import daly_interval_seconds, young_interval_seconds

STREAM_VERSION = "fleet-v1"
"""Part of every random stream's name: a change to how draws are made must change it, so a seed
never silently means another run."""

ADAPTIVE_PRIOR_WEIGHT = 1.0
"""How many observed failures the adaptive policy's prior MTBF counts as."""

MAX_ARRIVALS = 2_000_000
"""Expected interruptions per simulated run above which the inputs are refused (memory, time)."""

WALL_USES = ("productive", "checkpoint", "lost", "detect", "spare_wait", "restart", "restore")
"""Where a run's wall seconds go; every second goes to exactly one."""


@dataclass(frozen=True)
class Segment:
    """`duration` seconds of running from a (re)start, in closed form (module docstring)."""

    work_seconds: float
    """Training done (kept or not: that depends on what becomes durable)."""
    blocked_seconds: float
    """Blocked on saves: their blocking part and waits on the async backlog."""
    durable_saves: int
    """Saves durable by the segment's end."""
    pending_fraction: float
    """The save in flight at the end, as a share of its whole time (blocking + lag); 0: none."""


def run_segment(duration: float, interval: float, blocking: float, lag: float) -> Segment:
    """Training, blocking and durable saves in `duration` seconds after a (re)start."""
    t, s, p = interval, blocking, lag
    first = t + s
    period = max(t, p) + s

    def ended(tau: float) -> int:
        """Saves whose blocking part has ended `tau` seconds into the segment."""
        return 0 if tau < first else 1 + math.floor((tau - first) / period)

    n = ended(duration)
    start = 0.0 if n == 0 else first + (n - 1) * period  # the current period's start
    work = n * t + min(duration - start, t)
    durable = ended(duration - p)
    whole = s + p
    if whole == 0:  # saves take no time: none is ever in flight
        pending = 0.0
    elif durable < n:  # save n-1 is persisting; its blocking part began s before `start`
        pending = (duration - (start - s)) / whole
    else:
        stall_start = start + t + (0.0 if n == 0 else max(0.0, p - t))
        pending = max(0.0, duration - stall_start) / whole
    return Segment(work, duration - work, durable, pending)


class SparePool:
    """Spare nodes: a node loss takes one, or owes one until a repair returns a node. Each lost
    node comes back after an exponential repair time; waiting for it is downtime."""

    def __init__(self, spec: SpareSpec, rng: random.Random) -> None:
        self._free = spec.nodes
        self._repair_rate = 1.0 / spec.repair_seconds
        self._rng = rng
        self._owed = 0
        self._repairs: list[float] = []  # heap of times lost nodes come back

    def node_lost(self, now: float) -> None:
        if self._free is None:
            return
        self._release(now)
        heapq.heappush(self._repairs, now + self._rng.expovariate(self._repair_rate))
        if self._free > 0:
            self._free -= 1
        else:
            self._owed += 1

    def ready_at(self, now: float) -> float:
        """When every replacement owed is at hand (`now` if none is owed)."""
        self._release(now)
        if not self._owed:
            return now
        return heapq.nsmallest(self._owed, self._repairs)[-1]

    def _release(self, now: float) -> None:
        while self._repairs and self._repairs[0] <= now:
            heapq.heappop(self._repairs)
            if self._free is not None and self._owed:
                self._owed -= 1
            elif self._free is not None:
                self._free += 1


@dataclass
class RunOutcome:
    """One seed's run: where its wall seconds went and what it counted."""

    wall: dict[str, float] = field(default_factory=lambda: dict.fromkeys(WALL_USES, 0.0))
    interruptions: Counter[str] = field(default_factory=Counter)
    unplanned: int = 0
    lost_per_failure: list[float] = field(default_factory=list)
    checkpoints: int = 0
    abandoned: int = 0
    bytes_written: float = 0.0
    interval_seconds: float = 0.0
    """Time-weighted mean interval over the running time."""


def arrivals(inputs: FleetInputs, rng: random.Random) -> list[tuple[float, int]]:
    """The superposed process over the window: (time, class index), time-ordered."""
    rate, horizon = inputs.rate_per_second, inputs.wall_seconds
    if rate * horizon > MAX_ARRIVALS:
        raise PlanError(
            f"--devices {inputs.devices} over --days {inputs.days:g} expects "
            f"{rate * horizon:,.0f} interruptions in one run (more than {MAX_ARRIVALS:,}): "
            "simulate a shorter window; the rates per hour do not change with it"
        )
    if rate == 0:
        return []
    cumulative = list(itertools.accumulate(c.rate_per_device_hour for c in inputs.classes))
    out = []
    t = rng.expovariate(rate)
    while t < horizon:
        out.append((t, bisect.bisect_right(cumulative, rng.random() * cumulative[-1])))
        t += rng.expovariate(rate)
    return out


def simulate_run(inputs: FleetInputs, seed: int) -> RunOutcome:
    """One run of the window with this seed: deterministic, independent of every other seed."""
    return _Run(inputs, seed).walk()


class _Run:
    def __init__(self, inputs: FleetInputs, seed: int) -> None:
        self.inputs = inputs
        self.save = inputs.save
        self.classes = inputs.classes
        self.arrivals = arrivals(inputs, random.Random(f"{STREAM_VERSION}:{seed}:failures"))
        self.pool = SparePool(inputs.spares, random.Random(f"{STREAM_VERSION}:{seed}:repairs"))
        self.out = RunOutcome()
        self.next = 0  # index of the next arrival
        self.horizon = inputs.wall_seconds

    def _interval(self, now: float) -> float:
        save, c = self.save, self.save.blocking_seconds
        if save.policy == SavePolicy.FIXED:
            return float(save.interval_seconds or 0.0)
        if save.policy == SavePolicy.YOUNG:
            return young_interval_seconds(c, self.inputs.job_mtbf_seconds)
        if save.policy == SavePolicy.DALY:
            return daly_interval_seconds(c, self.inputs.job_mtbf_seconds)
        prior = save.prior_mtbf_seconds or self.inputs.job_mtbf_seconds
        w = ADAPTIVE_PRIOR_WEIGHT
        return daly_interval_seconds(c, (now + w * prior) / (self.out.unplanned + w))

    def walk(self) -> RunOutcome:
        out, wall, size = self.out, self.out.wall, self.save.bytes
        blocking, lag = self.save.blocking_seconds, self.save.lag_seconds
        now, running, weighted = 0.0, 0.0, 0.0
        while True:
            interval = self._interval(now)
            stop = self.arrivals[self.next][0] if self.next < len(self.arrivals) else self.horizon
            seg = run_segment(stop - now, interval, blocking, lag)
            running += stop - now
            weighted += interval * (stop - now)
            wall["checkpoint"] += seg.blocked_seconds
            out.checkpoints += seg.durable_saves
            out.bytes_written += (seg.durable_saves + seg.pending_fraction) * size
            kept = seg.durable_saves * interval
            if stop >= self.horizon:
                wall["productive"] += seg.work_seconds  # the window closes; nothing is lost
                break
            wall["productive"] += kept
            out.abandoned += seg.pending_fraction > 0
            now = self._recover(stop, seg.work_seconds - kept)
            if now >= self.horizon:
                break
        out.interval_seconds = weighted / running if running else 0.0
        return out

    def _interrupt(self, now: float) -> FailureClass:
        """Count the next arrival (at `now`) and take a spare node if its class lost one."""
        cls = self.classes[self.arrivals[self.next][1]]
        self.next += 1
        self.out.interruptions[cls.name] += 1
        self.out.unplanned += not cls.planned
        if cls.needs_spare:
            self.pool.node_lost(now)
        return cls

    def _lose(self, seconds: float) -> None:
        self.out.wall["lost"] += seconds
        self.out.lost_per_failure.append(seconds)

    def _recover(self, now: float, at_risk: float) -> float:
        """From an arrival that stopped training with `at_risk` seconds of work not yet durable,
        to the time training resumes (or the window's end)."""
        out, wall = self.out, self.out.wall
        cls = self._interrupt(now)
        drain = cls.planned
        if not drain:
            self._lose(at_risk)
            # The common case in one step: no spare owed, and no arrival before training resumes.
            restore = self.save.restore_seconds
            back = now + cls.detect_seconds + cls.restart_seconds + restore
            arrival = self.arrivals[self.next][0] if self.next < len(self.arrivals) else math.inf
            if back < min(arrival, self.horizon) and self.pool.ready_at(now) == now:
                wall["detect"] += cls.detect_seconds
                wall["restart"] += cls.restart_seconds
                wall["restore"] += restore
                return back
        while True:
            steps = [
                ("checkpoint", self.save.stall_seconds + self.save.persist_seconds if drain else 0),
                ("detect", cls.detect_seconds),
                ("spare_wait", None),
                ("restart", cls.restart_seconds),
                ("restore", self.save.restore_seconds),
            ]
            for use, seconds in steps:
                length = self.pool.ready_at(now) - now if seconds is None else seconds
                arrival = (
                    self.arrivals[self.next][0] if self.next < len(self.arrivals) else math.inf
                )
                limit = min(arrival, self.horizon)
                if now + length <= limit:
                    wall[use] += length
                    now += length
                    if use == "checkpoint" and drain:  # the drain's save is durable
                        wall["productive"] += at_risk
                        out.checkpoints += 1
                        out.bytes_written += self.save.bytes
                        drain = False
                    continue
                wall[use] += limit - now
                if use == "checkpoint" and drain:
                    # Cut short: its part of the write counts, and the work it was saving is
                    # lost, unless it is the window that ended.
                    whole = self.save.stall_seconds + self.save.persist_seconds
                    out.bytes_written += self.save.bytes * (limit - now) / whole
                    out.abandoned += 1
                    if limit < self.horizon:
                        self._lose(at_risk)
                    else:
                        wall["productive"] += at_risk
                    drain = False
                now = limit
                if now >= self.horizon:
                    return now
                cls = self._interrupt(now)  # a failure during the recovery starts it again
                break
            else:
                return now
