"""`runwright plan interval`: Young's and Daly's checkpoint interval and the expected waste
W(T) across intervals."""

from typing import Annotated

import typer
from rich.table import Table

from runwright.cli.plan.fleet import best_line
from runwright.cli.plan.inputs import JsonOpt, SpecOpt, format_seconds, optional_spec, pick
from runwright.cli.render import console, guarded, print_json, print_unclipped
from runwright.plan import PlanError, plan_interval
from runwright.plan.fleet_sim import DEFAULT_SEEDS
from runwright.plan.fleet_sweep import SweepRow, simulate_interval_plan


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
    simulate: Annotated[
        bool,
        typer.Option(
            "--simulate",
            help="Also simulate each interval and a grid around Young's (plan fleet's engine, "
            "same failures for every candidate) and report the highest simulated ETTR.",
        ),
    ] = False,
    seeds: Annotated[
        int, typer.Option("--seeds", min=1, max=1000, help="Runs simulated per candidate.")
    ] = DEFAULT_SEEDS,
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
    simulated = simulate_interval_plan(result, seeds) if simulate else None
    if as_json:
        data = result.model_dump()
        if simulated is not None:
            data["simulation"] = simulated.model_dump()
        print_json(data)
        return
    console.print(
        f"Young: T = sqrt(2 x {checkpoint_seconds:g} s x {mtbf:g} s) = "
        f"{format_seconds(result.young_seconds)};  Daly: {format_seconds(result.daly_seconds)}"
    )
    table = Table(title="expected waste W(T) = C/T + T/(2M) + (R+D)/M")
    columns = ["interval", "T s", "T min", "steps", "W(T)", "pause C/(T+C)", "Daly waste"]
    if simulated is not None:
        columns += ["simulated waste", "vs young, pts"]
        by_label = {r.label: r for r in simulated.rows}
    for column in columns:
        table.add_column(column, justify="left" if column == "interval" else "right")
    for r in result.rows:
        cells = [
            r.label,
            f"{r.interval_seconds:,.0f}",
            f"{r.interval_seconds / 60:,.1f}",
            "-" if r.interval_steps is None else f"{r.interval_steps:,}",
            f"{100 * r.expected_waste_fraction:.2f}%",
            f"{100 * r.pause_share:.2f}%",
            f"{100 * r.daly_waste_fraction:.2f}%",
        ]
        if simulated is not None:
            cells += _simulated(by_label.pop(r.label), seeds)
        table.add_row(*cells, style="bold" if r.label == "young" else None)
    if simulated is not None:
        for sim in by_label.values():  # policies without a fixed interval: adaptive
            cells = [sim.label, f"{sim.interval_seconds:,.0f}", *["-"] * 5]
            table.add_row(*cells, *_simulated(sim, seeds))
    print_unclipped(table)
    if simulated is not None:
        console.print(best_line(simulated))
    console.print(f"[dim]assumes {result.assumptions}[/]")


def _simulated(row: SweepRow, seeds: int) -> list[str]:
    """Simulated waste (1 - ETTR) and the paired gain over Young with its standard error."""
    gain = row.gain_vs_reference
    return [
        f"{100 * (1 - row.ettr.mean):.2f}%",
        f"{100 * gain.mean:+.3f} ± {100 * gain.std / seeds**0.5:.3f}",
    ]
