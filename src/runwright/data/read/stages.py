"""Mixture stages (`staged-quota-v1`): the recipe's weights change at given global steps.

`mixture.sources` is stage 0, from step 0; each entry of `mixture.stages` starts at a global step
(or a token count, rounded up to a whole step: 8 samples * 128 tokens = 1,024 tokens per step, so
`start_tokens: 5000` starts after step 5) with its own sources and weights, e.g. an annealing
stage on the cleanest sources at the end.

Where a stage starts in the document stream: a stage starting after step S owns every document
that starts at or after stream position S * B * stride (the first row of step S + 1); a
document that began before it and runs across it (concat packing) was drawn in the earlier
stage and finishes there. The planner (step_plan.py) cuts the stream at that point, the stream
(stream.py) continues with the new weights and with the mixture's counters counted from the
stage's start, so quota-v1's bound |c_i - w_i * k| < 1 holds within each stage against its own
weights. Every source's draw count carries on across stages (a source in two stages continues its
permutation, never restarts it), and the stage with its starting units is part of the cursor, so
a resume inside a stage or across a boundary continues the same global sequence.
"""

import math
from dataclasses import dataclass, replace

from runwright.data.errors import DataError
from runwright.data.read.stream import SourceTable
from runwright.spec import DataSpec


@dataclass(frozen=True)
class Stage:
    """One stage as the planner applies it."""

    name: str
    """Stage name (the spec's; `base` for mixture.sources)."""
    start_step: int
    """Global steps consumed before it begins."""
    weights: dict[str, float]
    """Source -> weight; a source of the union not named here is not drawn in this stage."""
    exhaustion: dict[str, str]
    """Source -> exhaustion policy within this stage."""

    def tables(self, union: list[SourceTable]) -> list[SourceTable]:
        """The union's tables with this stage's weights (0 and `renormalise` for a source the
        stage leaves out, so it neither draws nor ends the epoch)."""
        return [
            replace(
                t,
                weight=self.weights.get(t.name, 0.0),
                exhaustion=self.exhaustion.get(t.name, "renormalise"),
            )
            for t in union
        ]


FIRST_STAGE = "base"
"""Name of stage 0 (mixture.sources)."""


def union_sources(spec: DataSpec) -> list[tuple[str, float, str]]:
    """(name, stage-0 weight, stage-0 exhaustion) of every source any stage draws: stage 0's in
    order, then each later stage's new ones at weight 0."""
    mix = spec.mixture
    wanted = [(s.name, float(s.weight), s.exhaustion) for s in mix.sources]
    seen = {name for name, _, _ in wanted}
    for stage in mix.stages:
        for s in stage.sources:
            if s.name not in seen:
                seen.add(s.name)
                wanted.append((s.name, 0.0, "renormalise"))
    return wanted


def resolve_stages(spec: DataSpec, global_batch_samples: int) -> list[Stage] | None:
    """The stages with their starts in global steps, or None for an unstaged mixture."""
    mix = spec.mixture
    if not mix.stages:
        return None
    tokens_per_step = global_batch_samples * spec.sequence_length
    stages = [
        Stage(
            FIRST_STAGE,
            0,
            {s.name: float(s.weight) for s in mix.sources},
            {s.name: s.exhaustion for s in mix.sources},
        )
    ]
    for declared in mix.stages:
        if declared.start_step is not None:
            start = declared.start_step
        else:
            # A stage begins on a step boundary: the first step whose start has consumed at
            # least start_tokens (ceil(start_tokens / tokens_per_step) steps).
            start = math.ceil(int(declared.start_tokens or 0) / tokens_per_step)
        if start <= stages[-1].start_step:
            raise DataError(
                f"mixture stage {declared.name!r} starts after step {start}, not after stage "
                f"{stages[-1].name!r} (step {stages[-1].start_step}) at {tokens_per_step} tokens "
                "per step; give the stages increasing start_step or start_tokens"
            )
        stages.append(
            Stage(
                declared.name,
                start,
                {s.name: float(s.weight) for s in declared.sources},
                {s.name: s.exhaustion for s in declared.sources},
            )
        )
    return stages


def stages_identity(stages: list[Stage] | None) -> list[list[object]] | None:
    """What the cursor's mixture hash records of the stages (None: unstaged, hash unchanged)."""
    if stages is None:
        return None
    return [
        [s.name, s.start_step, sorted([n, w, s.exhaustion[n]] for n, w in s.weights.items())]
        for s in stages[1:]
    ]
