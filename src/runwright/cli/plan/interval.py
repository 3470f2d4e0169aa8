"""`runwright plan interval`: Young's and Daly's checkpoint interval and the expected waste
W(T) across intervals."""

from typing import Annotated

import typer
from rich.table import Table

from runwright.cli.plan.inputs import JsonOpt, SpecOpt, format_seconds, optional_spec, pick
from runwright.cli.render import console, guarded, print_json
from runwright.plan import PlanError, plan_interval


@guarded
def interval(
    checkpoint_seconds: Annotated[
        float, typer.Option("--checkpoint-seconds", help="C: blocking cost of one checkpoint (s).")
    ],
    mtbf_seconds: Annotated[
        float | None,
        typer.Option(
            "--mtbf-seconds",
            help="M: job-level mean time between interruptions (s); "
            "default: the spec's checkpoint.interval.mtbf_seconds.",
        ),
    ] = None,
    restart_seconds: Annotated[
        float, typer.Option("--restart-seconds", help="R: restore and verify time (s).")
    ] = 0.0,
    detect_seconds: Annotated[
        float, typer.Option("--detect-seconds", help="D: detect and requeue delay (s).")
    ] = 0.0,
    step_seconds: Annotated[
        float | None, typer.Option("--step-seconds", help="Step time (s), to show steps.")
    ] = None,
    intervals: Annotated[
        list[float] | None,
        typer.Option("--interval", help="Interval to tabulate (s); repeat for several."),
    ] = None,
    spec_file: SpecOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Young's and Daly's checkpoint interval and the expected waste W(T) across intervals."""
    spec = optional_spec(spec_file)
    mtbf = pick(mtbf_seconds, spec.checkpoint.interval.mtbf_seconds if spec else None)
    if mtbf is None:
        raise PlanError(
            "give the mean time between interruptions: --mtbf-seconds M, or a spec with "
            "checkpoint.interval.mtbf_seconds"
        )
    result = plan_interval(
        checkpoint_seconds, mtbf, restart_seconds, detect_seconds, step_seconds, intervals
    )
    if as_json:
        print_json(result.model_dump())
        return
    console.print(
        f"Young: T = sqrt(2 x {checkpoint_seconds:g} s x {mtbf:g} s) = "
        f"{format_seconds(result.young_seconds)};  Daly: {format_seconds(result.daly_seconds)}"
    )
    table = Table(title="expected waste W(T) = C/T + T/(2M) + (R+D)/M")
    for column in ("interval", "T s", "T min", "steps", "W(T)", "pause C/(T+C)", "Daly waste"):
        table.add_column(column, justify="left" if column == "interval" else "right")
    for r in result.rows:
        table.add_row(
            r.label,
            f"{r.interval_seconds:,.0f}",
            f"{r.interval_seconds / 60:,.1f}",
            "-" if r.interval_steps is None else f"{r.interval_steps:,}",
            f"{100 * r.expected_waste_fraction:.2f}%",
            f"{100 * r.pause_share:.2f}%",
            f"{100 * r.daly_waste_fraction:.2f}%",
            style="bold" if r.label == "young" else None,
        )
    console.print(table)
    console.print(f"[dim]assumes {result.assumptions}[/]")
