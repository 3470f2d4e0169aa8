"""The four signal layers of seed 004 as charts over one time axis: loss (loss, gradient norm),
throughput (device and loss tokens/s), system (step time per rank, straggler score) and data
(input-wait share, tokens by kind). Each point is one step at the time its last rank reported.
"""

import statistics
from collections.abc import Callable, Sequence

from runwright.govern.svg import PALETTE, Chart, Series
from runwright.observe.timeline import StepPoint, Timeline

# Per-rank lines are drawn up to this many ranks; beyond it, the slowest rank only.
MAX_RANK_LINES = 8


def _series(
    name: str,
    steps: Sequence[StepPoint],
    value: Callable[[StepPoint], float | None],
    t0: float,
    colour: str,
    dashed: bool = False,
) -> Series:
    # A new generation starts a new line segment: the gap is the failure and the recovery.
    points: list[tuple[float, float | None]] = []
    generation = None
    for p in steps:
        if generation is not None and p.generation != generation:
            points.append((p.end_unix_s - t0, None))
        generation = p.generation
        points.append((p.end_unix_s - t0, value(p)))
    return Series(name, points, colour, dashed)


def _rate(tokens: int, p: StepPoint) -> float | None:
    return tokens / p.step_seconds if p.step_seconds else None


def _max_straggler(p: StepPoint) -> float | None:
    if len(p.rank_step_seconds) < 2:
        return None
    median = statistics.median(p.rank_step_seconds.values())
    return max(p.rank_step_seconds.values()) / median if median > 0 else None


def charts(timeline: Timeline, t0: float) -> list[tuple[str, list[Chart]]]:
    """The four signal layers of seed 004, each a list of charts sharing the x axis."""
    s, evals = timeline.steps, timeline.evaluations
    rank_lines: list[Series] = []
    if len(timeline.ranks) <= MAX_RANK_LINES:
        for i, rank in enumerate(timeline.ranks):
            rank_lines.append(
                _series(
                    f"rank {rank}",
                    s,
                    lambda p, r=rank: p.rank_step_seconds.get(r),
                    t0,
                    PALETTE[i % len(PALETTE)],
                )
            )
    else:
        rank_lines.append(_series("slowest rank", s, lambda p: p.step_seconds, t0, PALETTE[4]))
    return [
        (
            "Loss layer",
            [
                Chart(
                    "Training loss" + (" and eval loss" if evals else ""),
                    "loss",
                    [
                        _series("loss", s, lambda p: p.loss, t0, PALETTE[0]),
                        *(
                            [
                                Series(
                                    "eval loss",
                                    [(e.time_unix_s - t0, e.eval_loss) for e in evals],
                                    PALETTE[1],
                                    dashed=True,
                                )
                            ]
                            if evals
                            else []
                        ),
                    ],
                    y_min_zero=False,
                    empty_hint="report it with ctx.step_healthy(step, loss=...)",
                ),
                Chart(
                    "Gradient norm",
                    "grad norm",
                    [_series("grad norm", s, lambda p: p.grad_norm, t0, PALETTE[3])],
                    empty_hint="report it with ctx.step_healthy(step, grad_norm=...)",
                ),
            ],
        ),
        (
            "Throughput layer",
            [
                Chart(
                    "Tokens per second (per step, all ranks)",
                    "tokens/s",
                    [
                        _series("device", s, lambda p: _rate(p.device_tokens, p), t0, PALETTE[0]),
                        _series("loss", s, lambda p: _rate(p.loss_tokens, p), t0, PALETTE[2]),
                    ],
                    y_format="{:.3g}",
                    empty_hint="report device_tokens and loss_tokens per step "
                    "(runwright.data.DataLoader does) and step_seconds (the step loop does)",
                )
            ],
        ),
        (
            "System layer",
            [
                Chart(
                    "Step time per rank",
                    "seconds",
                    rank_lines,
                    y_format="{:.3g}",
                    empty_hint="report step_seconds (ctx.step_loop does)",
                ),
                Chart(
                    "Straggler score (slowest rank / median rank)",
                    "score",
                    [_series("max score", s, _max_straggler, t0, PALETTE[4])],
                    y_min_zero=False,
                    empty_hint="needs step_seconds from two ranks or more",
                ),
            ],
        ),
        (
            "Data layer",
            [
                Chart(
                    "Input-wait share (data wait / step time)",
                    "share",
                    [_series("input wait", s, _wait_share, t0, PALETTE[1])],
                    y_format="{:.0%}",
                    empty_hint="report data_wait_seconds and step_seconds "
                    "(runwright.data.DataLoader and ctx.step_loop do)",
                ),
                Chart(
                    "Tokens per step by kind (all ranks)",
                    "tokens",
                    [
                        _series("device", s, lambda p: p.device_tokens, t0, PALETTE[0]),
                        _series("loss", s, lambda p: p.loss_tokens, t0, PALETTE[2]),
                        _series("padded", s, lambda p: p.padded_tokens, t0, PALETTE[7], True),
                    ],
                    empty_hint="runwright.data.DataLoader reports the tokens of each step",
                ),
            ],
        ),
    ]


def _wait_share(p: StepPoint) -> float | None:
    return p.data_wait_seconds / p.rank_seconds if p.rank_seconds > 0 else None
