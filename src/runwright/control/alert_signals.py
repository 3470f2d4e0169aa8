"""What the alert rules read of a live run, folded from the workers' channel messages as the
controller ingests them (control/alerts.py evaluates the rules on it).

Per step (once every rank reported it or went past it; see `RunSignals.settle` for a rank that
never does): each rank's step time, input
wait and tokens, rank 0's loss, the loss by mixture source summed over ranks. Per rank: when it
last wrote anything (a heartbeat counts) and
its host. Per run: the newest staged and committed checkpoint steps, the non-finite reports, the
productive step time. Bounded: only the last STEPS_KEPT steps are kept.
"""

import math
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field

from runwright.events import EventType
from runwright.protocol import HEARTBEAT, ChannelMessage

STEPS_KEPT = 256
BASELINE_SKIP_STEPS = 2
"""Warm-up steps left out of the throughput baseline (allocation, compilation, caches)."""
BASELINE_STEPS = 10
"""Steps after the warm-up whose median tokens/s is the run's own throughput baseline."""
INCOMPLETE_AFTER_STEPS = 8
"""A step some rank has not reported is evaluated with what is in once this many newer steps
are, and the controller has read every rank's file to its end (`RunSignals.settle`)."""
LOSS_MEAN_STEPS = 20
"""Steps before a step whose mean loss a spike is measured against (at least 5 needed)."""


@dataclass
class StepRow:
    """One step as the ranks reported it."""

    step: int
    generation: int = 0
    """The group that reported it: rules judge only the live group's steps."""
    seconds: dict[int, float] = field(default_factory=dict)
    sync: dict[int, float] = field(default_factory=dict)
    """Time in the gradient collectives (`grad_sync`): where a fast rank waits for a slow one."""
    wait: dict[int, float] = field(default_factory=dict)
    tokens: dict[int, float] = field(default_factory=dict)
    loss: float | None = None
    """Rank 0's."""
    sources: dict[str, list[float]] = field(default_factory=dict)
    """Mixture source -> [summed per-token loss, loss tokens] over the ranks that reported it
    (`source_loss`, runtime/source_loss.py)."""
    source_ratios: dict[str, float] | None = None
    """Each source's loss / the mean of its own losses before this step; None until judged."""

    def input_wait_share(self) -> float | None:
        shares = [self.wait[r] / s for r, s in self.seconds.items() if s > 0 and r in self.wait]
        return sum(shares) / len(shares) if shares else None

    def slowness(self) -> dict[int, float]:
        """rank -> its busy time / the median across ranks (needs two ranks or more). Busy is
        the step time less the time in gradient collectives: in synchronous training every
        rank's step takes as long as the slowest's, and the fast ones spend the difference
        waiting there."""
        if len(self.seconds) < 2:
            return {}
        busy = {r: max(s - self.sync.get(r, 0.0), 0.0) for r, s in self.seconds.items()}
        median = statistics.median(busy.values())
        return {r: b / median for r, b in busy.items()} if median > 0 else {}

    def tokens_per_second(self) -> float | None:
        slowest = max(self.seconds.values(), default=0.0)
        return sum(self.tokens.values()) / slowest if slowest > 0 and self.tokens else None


@dataclass
class RunSignals:
    """A live run's signals (module docstring); one per run the controller supervises."""

    world_size: int
    total_steps: int | None = None
    """The plan's last step: a rank past it (or stopping on request) is winding down, and its
    silence is no heartbeat gap."""
    started_monotonic: float = field(default_factory=time.monotonic)
    rows: dict[int, StepRow] = field(default_factory=dict)
    done: list[StepRow] = field(default_factory=list)
    """Complete steps not yet evaluated, oldest first (the engine takes them)."""
    last_seen: dict[int, float] = field(default_factory=dict)
    """rank -> monotonic time of its newest message of the current generation."""
    hosts: dict[int, str] = field(default_factory=dict)
    winding_down: set[int] = field(default_factory=set)
    """Ranks of the current generation past their last step or stopping."""
    generation: int = 0
    staged_step: int | None = None
    committed_step: int | None = None
    drift_windows: list[tuple[float | None, tuple[int, int] | None]] = field(default_factory=list)
    """(max_deviation, (first step, last step)) of each MIXTURE_WINDOW not yet judged, oldest
    first: every window is judged, not only the newest at a pass (a busy controller reads
    several windows in one pass)."""
    non_finite: tuple[int, int] | None = None
    """(rank, step) of the newest non-finite report not yet followed by a healthy step."""
    replay_diverged: dict[str, int] | None = None
    """The newest replay check's divergence (step, rank, generation); None when it verified."""
    replay_judged: bool = False
    """Whether any replay check has given a verdict (control/replay_check.py)."""
    productive_seconds: float = 0.0
    """Sum over distinct steps of the slowest rank's step time (ETTR's numerator)."""
    losses: list[float] = field(default_factory=list)
    """Rank 0's losses of the last LOSS_MEAN_STEPS evaluated steps."""
    source_losses: dict[str, list[float]] = field(default_factory=dict)
    """Each source's mean losses of its last LOSS_MEAN_STEPS evaluated steps."""
    baseline: list[float] = field(default_factory=list)
    """Tokens/s of the baseline steps (BASELINE_SKIP_STEPS < step <= ... + BASELINE_STEPS)."""
    rank_steps: dict[int, int] = field(default_factory=dict)
    """rank -> the newest step it reported in the current generation."""
    _newest_counts: Counter[int] = field(default_factory=Counter)
    """newest step -> how many of the world's ranks have it as their newest (0: none yet)."""
    _slowest: int = 0
    """The smallest newest step of any rank of the world: every step up to it is complete."""
    _finished: int = 0
    _newest: int = 0

    def observe(self, message: ChannelMessage) -> None:
        if message.generation < self.generation:
            return
        if message.generation > self.generation:
            self.generation = message.generation
            self.last_seen.clear()  # a new group: its ranks start afresh
            self.winding_down.clear()
            self.rows.clear()  # steps of a group that is gone are not judged any more
            self.done.clear()
            self.rank_steps.clear()
            self._newest_counts.clear()
            self._slowest = 0
        attrs = message.attributes
        kind = message.type
        ending = kind == EventType.STOP_ACKNOWLEDGED or (
            kind == EventType.STEP_HEALTHY
            and self.total_steps is not None
            and (message.step or 0) >= self.total_steps
        )
        if ending:
            self.winding_down.add(message.rank)
        if message.rank not in self.winding_down:
            self.last_seen[message.rank] = time.monotonic()
        else:
            self.last_seen.pop(message.rank, None)
        if kind == HEARTBEAT:
            return
        if kind == EventType.WORKER_STARTED and isinstance(attrs.get("host"), str):
            self.hosts[message.rank] = attrs["host"]
        elif kind == EventType.CHECKPOINT_STAGED and message.step is not None:
            self.staged_step = max(self.staged_step or 0, message.step)
        elif kind == EventType.CHECKPOINT_COMMITTED and message.step is not None:
            self.committed_step = max(self.committed_step or 0, message.step)
        elif kind == EventType.MIXTURE_WINDOW:
            first, last = attrs.get("first_step"), attrs.get("last_step")
            window = (first, last) if isinstance(first, int) and isinstance(last, int) else None
            self.drift_windows.append((_number(attrs.get("max_deviation")), window))
        elif kind == EventType.NAN_DETECTED:
            self.non_finite = (message.rank, int(message.step or 0))
        elif kind == EventType.STEP_HEALTHY and message.step is not None:
            self._step(message)

    def _step(self, message: ChannelMessage) -> None:
        step, attrs = message.step, message.attributes
        assert step is not None
        if step <= self._finished:
            return  # a replay after a restore, or a straggling report of an evaluated step
        if self.non_finite is not None and step > self.non_finite[1]:
            self.non_finite = None
        row = self.rows.setdefault(step, StepRow(step, message.generation))
        self._advance(message.rank, step)
        seconds = _number(attrs.get("step_seconds"))
        if seconds is not None:
            row.seconds[message.rank] = seconds
        sync = _number(attrs.get("grad_sync_seconds"))
        if sync is not None:
            row.sync[message.rank] = sync
        wait = _number(attrs.get("data_wait_seconds", attrs.get("input_wait_seconds")))
        if wait is not None:
            row.wait[message.rank] = wait
        tokens = _number(attrs.get("device_tokens", attrs.get("tokens")))
        if tokens is not None:
            row.tokens[message.rank] = tokens
        if message.rank == 0:
            row.loss = _number(attrs.get("loss"))
        _add_sources(row.sources, attrs.get("source_loss"))
        self._newest = max(self._newest, step)
        self._drain(self._newest - STEPS_KEPT)

    def _advance(self, rank: int, step: int) -> None:
        """`rank`'s newest step is `step` or later; keep the world's slowest newest step
        (amortised O(1) a report: the minimum is looked for again only when the last rank at
        it moves on, once a step)."""
        old = self.rank_steps.get(rank, 0)
        if step <= old:
            return
        self.rank_steps[rank] = step
        if not 0 <= rank < self.world_size:
            return  # a rank outside the planned world (an elastic resize) decides nothing
        counts = self._newest_counts
        if not counts:
            counts[0] = self.world_size
        counts[old] -= 1
        counts[step] += 1
        if counts[old] <= 0:
            del counts[old]
            if old == self._slowest:
                self._slowest = min(counts)

    def _drain(self, incomplete_up_to: int) -> None:
        """Finish the held steps in order while each is complete: every rank reported it, or
        went past it without (a rank's reports are read in the order it wrote them, so that
        one will never come). A step up to `incomplete_up_to` is finished as it is.

        Ranks' files are read one after the other, in turns: a controller reading a backlog
        reads many steps of one rank before the first of the next. Finishing a step because
        newer steps of one rank are in judged the backlog without rank 0's loss (a loss spike
        was missed, and a later step was measured against a mean of a few): completeness is
        judged per rank instead, and a rank that reports no more only once the reader has
        caught up (`settle`)."""
        # A step is complete when every rank's newest step is at least it: a rank whose newest
        # is the step reported it, and one past it never will (its reports come in order).
        while self.rows:
            s = min(self.rows)
            if s > self._slowest and s > incomplete_up_to:
                return  # later steps wait, so that steps are judged in order
            self._finish(self.rows.pop(s))

    def settle(self) -> None:
        """The controller has read every rank's file to its end: a step some rank has still not
        reported INCOMPLETE_AFTER_STEPS steps later never will be (the rank died, its report was
        lost, or it reports no steps at all), and is judged with what is in."""
        self._drain(self._newest - INCOMPLETE_AFTER_STEPS)

    def overdue(self) -> bool:
        """Whether a held step waits for a rank INCOMPLETE_AFTER_STEPS steps on (`settle`)."""
        return bool(self.rows) and min(self.rows) <= self._newest - INCOMPLETE_AFTER_STEPS

    def _finish(self, row: StepRow) -> None:
        self._finished = max(self._finished, row.step)
        if row.seconds:
            self.productive_seconds += max(row.seconds.values())
        rate = row.tokens_per_second()
        first = BASELINE_SKIP_STEPS
        if rate is not None and first < row.step <= first + BASELINE_STEPS:
            self.baseline.append(rate)
        self.done.append(row)
        del self.done[:-STEPS_KEPT]

    def take(self) -> list[StepRow]:
        """The steps completed since the last call, oldest first."""
        taken, self.done = self.done, []
        return taken

    def note_loss(self, row: StepRow) -> float | None:
        """Row's loss / the mean of the losses before it (None until 5 are known); then keeps
        row's loss for the next."""
        ratio = None
        if row.loss is not None and len(self.losses) >= 5:
            mean = sum(self.losses) / len(self.losses)
            ratio = row.loss / mean if mean > 0 else None
        if row.loss is not None:
            self.losses = [*self.losses[-(LOSS_MEAN_STEPS - 1) :], row.loss]
        return ratio

    def source_ratio(self, row: StepRow) -> dict[str, float]:
        """Each source's loss at `row` / the mean of its losses before (a source needs 5 known
        first); computed once per row, however many rules read it, and then kept."""
        if row.source_ratios is not None:
            return row.source_ratios
        ratios = {}
        for name, (loss_sum, tokens) in sorted(row.sources.items()):
            loss = loss_sum / tokens
            history = self.source_losses.setdefault(name, [])
            if len(history) >= 5:
                mean = sum(history) / len(history)
                if mean > 0:
                    ratios[name] = loss / mean
            self.source_losses[name] = [*history[-(LOSS_MEAN_STEPS - 1) :], loss]
        row.source_ratios = ratios
        return ratios

    def throughput_ratio(self, row: StepRow) -> float | None:
        """Row's tokens/s / the baseline's median (None until the baseline is complete)."""
        rate = row.tokens_per_second()
        if rate is None or len(self.baseline) < BASELINE_STEPS:
            return None
        median = statistics.median(self.baseline)
        return rate / median if median > 0 else None

    def ettr(self) -> float | None:
        wall = time.monotonic() - self.started_monotonic
        return self.productive_seconds / wall if wall > 0 else None


def _add_sources(totals: dict[str, list[float]], reported: object) -> None:
    """Add one rank's `{source: [loss sum, tokens]}` to `totals`; malformed entries are skipped
    (a script's own attribute of that name is no reason to fail the controller)."""
    if not isinstance(reported, dict):
        return
    for name, pair in reported.items():
        if not (isinstance(pair, list | tuple) and len(pair) == 2):
            continue
        loss_sum, tokens = _number(pair[0]), _number(pair[1])
        if loss_sum is not None and tokens is not None and tokens > 0:
            entry = totals.setdefault(str(name), [0.0, 0.0])
            entry[0] += loss_sum
            entry[1] += tokens


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None
