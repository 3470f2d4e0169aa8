"""Recovery proven after every recovery, without a second run (issue 16; seed 004, "proving
recovery equivalence").

A run at `reproducibility.level: bitwise` is deterministic: the steps a restarted generation
executes again after its restore (the replay: from the restored step to the highest step an
earlier generation reported) must reproduce, bit for bit, what the earlier generation reported
for them. Each rank's STEP_HEALTHY carries its loss and the sample range of its batch; the
controller keeps an 8-byte fingerprint of (the loss's bits, samples) per rank and step as it
ingests them, compares every report of a step with the reports of the same rank and step by
other generations, and records one verdict per restarted generation:

- RECOVERY_VERIFIED: every replayed (rank, step) matched; `replayed_steps` says how many steps
  that was (0: the failed generation had not passed the restored step - nothing was replayed,
  and the event says so), `complete: false` when the generation ended before it had replayed
  them all (what it did replay matched).
- RECOVERY_DIVERGED: the first (lowest) step where a rank's report differs, with both losses:
  the restore did not reproduce the run (a non-deterministic op, a restore that lost state). The
  default `recovery_diverged` alert rule fires on it.
- RECOVERY_UNVERIFIED: nothing could be compared, and why: the world size changed (a reshard
  changes what each rank computes), the replay was skipped on purpose (an alert's rollback) or
  reads other data (an operator's skipped shard, control/operator.py), the
  earlier generation ran on a state a corruption check found corrupted (SDC_DETECTED: its
  reports are no reference; control/sdc.py), or
  no report of the replayed steps was kept (see below).

Order does not matter: a controller that starts (or takes the run over) re-reads the channel
from the start, files in turns, so a replay may be read before the reports it repeats. Each
report is compared when the second of a pair arrives, and a verdict is given only once the
channel is read to its end. Memory stays bounded: a step's fingerprints are kept until a second,
newer checkpoint commits (a restore goes to the newest one that verifies, so the steps before the
one before it are never replayed); a restore further back finds no reports to compare, which the
verdict counts as `unchecked`.
"""

import struct
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from runwright.control.journal import Journal
from runwright.events import EventType
from runwright.protocol import ChannelMessage
from runwright.store import RunRecord

MISSING = 0
"""A fingerprint slot no report has filled (a real fingerprint is never 0)."""
_DOUBLE = struct.Struct("<d")
_BITS = struct.Struct("<q")


def fingerprint(loss: Any, samples: Any) -> int:
    """A nonzero 64-bit fingerprint of the loss's exact IEEE bits (not a printed form: -0.0 and
    0.0 differ, every NaN payload is itself) and the sample range. Python's tuple hash of ints:
    fingerprints are only ever compared inside one controller process (a restarted one re-reads
    the channel and fingerprints again), and it costs a fraction of a cryptographic digest at
    one report per rank per step."""
    bits = _BITS.unpack(_DOUBLE.pack(float(loss)))[0] if isinstance(loss, (int, float)) else -1
    if isinstance(samples, list):
        samples = tuple(samples)
    try:
        value = hash((bits, samples))
    except TypeError:  # a script's own unhashable value: its printed form
        value = hash((bits, repr(samples)))
    return value or 1


@dataclass
class StepReports:
    """One generation's reports of one step: a fingerprint and the loss per rank."""

    prints: array
    losses: array
    matched: array
    """1 where the rank's report matched another generation's."""
    count: int = 0


@dataclass
class Divergence:
    step: int
    rank: int
    generation: int
    earlier_generation: int
    loss: float | None
    earlier_loss: float | None


VerdictListener = Callable[[RunRecord, "Divergence | None", bool], None]
"""(run, the live divergence or None once a later generation verified, whether the run ended)."""


@dataclass
class GenerationReports:
    """What one generation reported, and the verdict on it as a replay of the ones before."""

    generation: int
    world_size: int
    steps: dict[int, StepReports] = field(default_factory=dict)
    first_step: int | None = None
    last_step: int = 0
    complete_steps: set[int] = field(default_factory=set)
    """Steps every rank reported (kept past pruning: the verdict counts them)."""
    compared: int = 0
    """(rank, step) reports of this generation that matched an earlier generation's."""
    skipped_on_purpose: bool = False
    divergence: Divergence | None = None
    verdict: str | None = None

    def reports(self, step: int) -> StepReports:
        found = self.steps.get(step)
        if found is None:
            n = self.world_size
            found = self.steps[step] = StepReports(
                array("q", [MISSING]) * n, array("d", [float("nan")]) * n, array("b", [0]) * n
            )
        return found


class RunReplays:
    """One run's reports by generation, checked against each other."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        """The spec's, for a message that does not say its group's."""
        self.generations: dict[int, GenerationReports] = {}
        self.commits: list[int] = []
        self.corrupted: dict[int, int] = {}
        """generation -> the known-good step its SDC_DETECTED named."""
        """Committed checkpoint steps seen, ascending (the newest two bound what is kept)."""
        self.operator_skips: dict[int, str] = {}
        """generation -> a shard an operator had it skip from its first step (control/
        operator.py): its data differs from the earlier generations', so it replays nothing."""

    def observe(self, message: ChannelMessage) -> None:
        if (
            message.type == EventType.DATA_SHARD_QUARANTINED
            and message.attributes.get("reason") == "operator"
        ):
            self.operator_skips[message.generation] = str(message.attributes.get("shard"))
            return
        if message.type == EventType.SDC_DETECTED:
            known_good = message.attributes.get("known_good_step")
            self.corrupted[message.generation] = int(known_good or 0)
            return
        if message.type == EventType.CHECKPOINT_COMMITTED and message.step is not None:
            if message.step not in self.commits:
                self.commits = sorted([*self.commits, message.step])[-2:]
                self._prune()
            return
        if message.type != EventType.STEP_HEALTHY or message.step is None:
            return
        world = message.world_size or self.world_size
        if not 0 <= message.rank < world:
            return
        gen = self.generations.get(message.generation)
        if gen is None:
            gen = self.generations[message.generation] = GenerationReports(
                message.generation, world
            )
        if world != gen.world_size:
            return
        step, rank, attrs = message.step, message.rank, message.attributes
        gen.first_step = step if gen.first_step is None else min(gen.first_step, step)
        gen.last_step = max(gen.last_step, step)
        if attrs.get("skipped"):
            gen.skipped_on_purpose = True  # an alert's rollback: this step was not executed
        kept = gen.reports(step)
        if kept.prints[rank] != MISSING:
            return  # the same report read again (a restarted controller re-reads the channel)
        loss = attrs.get("loss")
        kept.prints[rank] = fingerprint(loss, attrs.get("samples"))
        kept.losses[rank] = float(loss) if isinstance(loss, (int, float)) else float("nan")
        kept.count += 1
        if kept.count == gen.world_size:
            gen.complete_steps.add(step)
        self._compare(gen, step, rank)

    def _compare(self, gen: GenerationReports, step: int, rank: int) -> None:
        mine = gen.steps[step]
        for other in self.generations.values():
            if other is gen or other.world_size != gen.world_size or step not in other.steps:
                continue
            low, high = sorted((gen.generation, other.generation))
            if any(low < g <= high for g in self.operator_skips):
                continue  # an operator's skipped shard between them: other data, no reference
            theirs = other.steps[step]
            if theirs.prints[rank] == MISSING:
                continue
            later, earlier = (gen, other) if gen.generation > other.generation else (other, gen)
            if theirs.prints[rank] == mine.prints[rank]:
                matched = later.steps[step].matched
                if not matched[rank]:
                    matched[rank] = 1
                    later.compared += 1
                continue
            first = later.divergence
            here = (step, rank, earlier.generation)
            if first is None or here < (first.step, first.rank, first.earlier_generation):
                later.divergence = Divergence(
                    step,
                    rank,
                    later.generation,
                    earlier.generation,
                    _loss(later.steps[step].losses[rank]),
                    _loss(earlier.steps[step].losses[rank]),
                )

    def _prune(self) -> None:
        if len(self.commits) < 2:
            return
        floor = self.commits[0]
        for gen in self.generations.values():
            for step in [s for s in gen.steps if s <= floor]:
                del gen.steps[step]

    def verdicts(self, ended: bool) -> list[tuple[GenerationReports, str, dict[str, Any]]]:
        """(generation, event type, attributes) for every restarted generation whose verdict
        is due: it diverged, it replayed every step, or it is over (a newer generation exists,
        or `ended`: the run is)."""
        due = []
        ordered = sorted(self.generations)
        if ordered:
            self.generations[ordered[0]].complete_steps.clear()  # no verdict on the first
        for index, number in enumerate(ordered):
            gen = self.generations[number]
            earlier = [self.generations[g] for g in ordered[:index]]
            if gen.verdict is not None or not earlier or gen.first_step is None:
                continue
            over = ended or index < len(ordered) - 1
            found = self._verdict(gen, earlier, over)
            if found is not None:
                gen.verdict = found[0]
                gen.complete_steps.clear()
                due.append((gen, *found))
        return due

    def _verdict(
        self, gen: GenerationReports, earlier: list[GenerationReports], over: bool
    ) -> tuple[str, dict[str, Any]] | None:
        assert gen.first_step is not None
        restored = gen.first_step - 1
        target = max(e.last_step for e in earlier)
        span = max(0, target - restored)
        base = {
            "verified_generation": gen.generation,
            "restored_step": restored,
            "replay_through_step": target if span else None,
            "replayed_steps": span,
        }
        if gen.skipped_on_purpose:
            why = "the steps after the restored checkpoint were skipped on purpose (rollback)"
            return EventType.RECOVERY_UNVERIFIED, {**base, "reason": why}
        if gen.generation in self.operator_skips:
            why = (
                f"an operator had shard {self.operator_skips[gen.generation]} skipped from the "
                "restored step on: the replayed steps read other data than before"
            )
            return EventType.RECOVERY_UNVERIFIED, {**base, "reason": why}
        if any(e.world_size != gen.world_size for e in earlier if e.last_step > restored):
            why = (
                f"the world size changed ({sorted({e.world_size for e in earlier})} -> "
                f"{gen.world_size}): each rank computes a different share after a reshard"
            )
            return EventType.RECOVERY_UNVERIFIED, {**base, "reason": why}
        tainted = [e for e in earlier if e.generation in self.corrupted and e.last_step > restored]
        if tainted:
            why = (
                f"generation {tainted[0].generation} trained past step "
                f"{self.corrupted[tainted[0].generation]} on a state a corruption check found "
                "corrupted (sdc): its reports are no reference"
            )
            return EventType.RECOVERY_UNVERIFIED, {**base, "reason": why}
        if gen.divergence is not None:
            d = gen.divergence
            return EventType.RECOVERY_DIVERGED, {
                **base,
                "step": d.step,
                "rank": d.rank,
                "loss": d.loss,
                "earlier_loss": d.earlier_loss,
                "earlier_generation": d.earlier_generation,
                "compared": gen.compared,
            }
        if span == 0:
            return EventType.RECOVERY_VERIFIED, {
                **base,
                "nothing_replayed": True,
                "compared": 0,
                "complete": True,
            }
        through = restored
        while through + 1 in gen.complete_steps and through < target:
            through += 1
        if through < target and not over:
            return None  # still replaying
        reported = sum(1 for s in range(restored + 1, through + 1) if s in gen.complete_steps)
        unchecked = reported * gen.world_size - gen.compared
        if gen.compared == 0:
            why = (
                "no earlier report of the replayed steps was kept (a restore behind the "
                "checkpoint before the newest one) or the script reports no loss or samples"
            )
            return EventType.RECOVERY_UNVERIFIED, {**base, "reason": why}
        return EventType.RECOVERY_VERIFIED, {
            **base,
            "compared": gen.compared,
            "unchecked": max(0, unchecked),
            "complete": through >= target,
        }


def _loss(value: float) -> float | None:
    return None if value != value else value  # NaN marks a report without a loss


class ReplayVerifier:
    """The controller's replay checks for its runs at `reproducibility.level: bitwise`."""

    def __init__(self, journal: Journal, on_verdict: VerdictListener | None = None) -> None:
        self.journal = journal
        self.on_verdict = on_verdict
        """Told of every RECOVERY_DIVERGED and RECOVERY_VERIFIED as it is recorded, live or on
        the run's final pass (the alert engine's `recovery_diverged` rule)."""
        self._runs: dict[str, RunReplays] = {}
        self.diverged: dict[str, Divergence | None] = {}
        """run id -> the live divergence (None once a later generation verified): the alert
        engine's `recovery_diverged` signal."""

    def observe(self, run: RunRecord, world_size: int, message: ChannelMessage) -> None:
        replays = self._runs.get(run.run_id)
        if replays is None:
            replays = self._runs[run.run_id] = RunReplays(world_size)
        replays.observe(message)

    def pending(self, run: RunRecord) -> bool:
        """Whether a restarted generation still awaits its verdict."""
        replays = self._runs.get(run.run_id)
        return replays is not None and any(
            g.verdict is None
            for n, g in replays.generations.items()
            if n > min(replays.generations)
        )

    def check(self, run: RunRecord, *, ended: bool = False) -> None:
        """Record the verdicts that are due; call with the channel read to its end."""
        replays = self._runs.get(run.run_id)
        if replays is None:
            return
        for gen, type_, attributes in replays.verdicts(ended):
            # The verdict is the verified generation's event, whichever controller gives it, so
            # a controller that re-reads the channel later records the same event id.
            about = run.model_copy(update={"generation": gen.generation})
            self.journal.record(
                about, type_, op=f"replay:g{gen.generation}", per_step=False, **attributes
            )
            if type_ == EventType.RECOVERY_DIVERGED:
                self.diverged[run.run_id] = gen.divergence
            elif type_ == EventType.RECOVERY_VERIFIED and run.run_id in self.diverged:
                self.diverged[run.run_id] = None
            else:
                continue
            if self.on_verdict is not None:
                self.on_verdict(run, self.diverged[run.run_id], ended)

    def close(self, run: RunRecord) -> None:
        """The run ended: verdicts for what is left, then forget it."""
        self.check(run, ended=True)
        self.forget(run.run_id)

    def forget(self, run_id: str) -> None:
        """Drop a run this controller no longer drives (another one re-reads its channel)."""
        self._runs.pop(run_id, None)
        self.diverged.pop(run_id, None)
