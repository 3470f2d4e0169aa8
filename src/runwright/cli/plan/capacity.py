"""`runwright plan capacity`: tokens -> steps -> device-hours, checkpoints and storage, expected
failures with a retry margin, and cost (runwright.plan.capacity)."""

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from runwright.cli.options import RootOption, StoreOption, open_store
from runwright.cli.plan.inputs import (
    JsonOpt,
    SpecOpt,
    format_bytes,
    format_seconds,
    optional_spec,
    pick,
)
from runwright.cli.render import console, guarded, print_json
from runwright.plan import PlanError
from runwright.plan.capacity import CapacityInputs, plan_capacity

HOUR = 3600.0


@guarded
def capacity(
    tokens: Annotated[
        float | None,
        typer.Option(
            "--tokens", help="Tokens to train (2e12); default: the spec's steps x tokens per step."
        ),
    ] = None,
    tokens_per_step: Annotated[
        float | None, typer.Option("--tokens-per-step", help="Default: the spec's plan.")
    ] = None,
    tokens_per_second: Annotated[
        float | None,
        typer.Option("--tokens-per-second", help="Declared throughput of the whole job."),
    ] = None,
    step_seconds: Annotated[
        float | None, typer.Option("--step-seconds", help="Or the time of one step (s).")
    ] = None,
    run: Annotated[
        str | None,
        typer.Option(
            "--run",
            help="Or a measured run's loss tokens per productive second "
            "(scaled to --devices when they differ).",
        ),
    ] = None,
    devices: Annotated[int | None, typer.Option("--devices", help="Default: world size.")] = None,
    checkpoint_every_steps: Annotated[
        int | None, typer.Option("--checkpoint-every-steps", help="Default: the spec's plan.")
    ] = None,
    checkpoint_seconds: Annotated[
        float, typer.Option("--checkpoint-seconds", help="Blocking cost of one save (s).")
    ] = 0.0,
    checkpoint_gib: Annotated[
        float | None,
        typer.Option(
            "--checkpoint-gib",
            help="Size of one checkpoint; default: the spec's model states (memory ledger).",
        ),
    ] = None,
    keep_last: Annotated[int | None, typer.Option("--keep-last", help="Retention.")] = None,
    mtbf_hours: Annotated[
        float | None,
        typer.Option(
            "--mtbf-hours",
            help="The job's mean time between interruptions; default: "
            "the spec's checkpoint.interval.mtbf_seconds.",
        ),
    ] = None,
    device_mtbf_hours: Annotated[
        float | None,
        typer.Option("--device-mtbf-hours", help="Or one device's: the job's is it / devices."),
    ] = None,
    restart_seconds: Annotated[float, typer.Option("--restart-seconds")] = 0.0,
    detect_seconds: Annotated[float, typer.Option("--detect-seconds")] = 0.0,
    price: Annotated[
        float | None,
        typer.Option("--device-hour-price", help="Default: resources.device_hour_price."),
    ] = None,
    spec_file: SpecOpt = None,
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    as_json: JsonOpt = False,
) -> None:
    """Tokens -> steps -> device-hours at a throughput, checkpoints and storage, expected
    failures with a retry margin, and cost."""
    spec = optional_spec(spec_file)
    plan = spec.plan if spec else None
    per_step = pick(tokens_per_step, plan.tokens_per_step.value if plan else None)
    if per_step is None:
        raise PlanError("give --tokens-per-step, or a spec (--spec) whose plan has it")
    total = pick(tokens, (plan.total_steps.value or 0) * per_step if plan else None)
    if total is None:
        raise PlanError("give --tokens to train, or a spec (--spec) with steps or a token budget")
    world = pick(devices, plan.world_size.value if plan else None)
    if world is None:
        raise PlanError("give --devices, or a spec (--spec)")
    rate = _throughput(tokens_per_second, step_seconds, run, per_step, int(world), root, store)
    job_mtbf = None
    if mtbf_hours is not None:
        job_mtbf = mtbf_hours * HOUR
    elif device_mtbf_hours is not None:
        job_mtbf = device_mtbf_hours * HOUR / int(world)
    elif spec is not None:
        job_mtbf = spec.checkpoint.interval.mtbf_seconds
    size = checkpoint_gib * 2**30 if checkpoint_gib is not None else None
    if size is None and spec is not None:
        from runwright.plan.spec_ledger import checkpoint_bytes

        size = checkpoint_bytes(spec)
    every = pick(checkpoint_every_steps, plan.checkpoint_every_steps.value if plan else None)
    enabled = spec is None or spec.checkpoint.enabled
    result = plan_capacity(
        CapacityInputs(
            tokens=total,
            tokens_per_step=per_step,
            tokens_per_second=rate,
            devices=int(world),
            checkpoint_every_steps=int(every) if every and enabled else None,
            checkpoint_seconds=checkpoint_seconds,
            checkpoint_bytes=size or 0.0,
            keep_last=pick(keep_last, spec.checkpoint.keep_last if spec else None, 3),
            mtbf_seconds=job_mtbf,
            restart_seconds=restart_seconds,
            detect_seconds=detect_seconds,
            device_hour_price=pick(price, spec.resources.device_hour_price if spec else None),
        )
    )
    if as_json:
        print_json(result.model_dump())
        return
    table = Table(title=f"capacity plan: {total:,.0f} tokens on {int(world)} devices")
    table.add_column("figure")
    table.add_column("expected", justify="right")
    table.add_column("with retry margin", justify="right")
    rows = [
        ("steps", f"{result.steps:,}", ""),
        ("step time", format_seconds(result.step_seconds), ""),
        ("useful compute", format_seconds(result.compute_seconds), ""),
        ("checkpoints", f"{result.checkpoints:,}", ""),
        ("checkpoint pauses", format_seconds(result.checkpoint_pause_seconds), ""),
        ("checkpoint bytes written", format_bytes(result.checkpoint_written_bytes), ""),
        ("checkpoint bytes kept", format_bytes(result.checkpoint_kept_bytes), ""),
        ("failures", f"{result.expected_failures:,.1f}", f"{result.margin_failures:,.1f}"),
        ("lost per failure", format_seconds(result.lost_seconds_per_failure), ""),
        ("wall time", format_seconds(result.wall_seconds),
         format_seconds(result.margin_wall_seconds)),
        ("device-hours", hours(result.device_hours), hours(result.margin_device_hours)),
        ("useful share", f"{100 * result.useful_share:.1f} %", ""),
        ("cost", money(result.cost), money(result.margin_cost)),
    ]  # fmt: skip
    for row in rows:
        table.add_row(*row)
    console.print(table)
    console.print(f"[dim]assumes {result.assumptions}[/]")


def hours(value: float) -> str:
    return f"{value:,.1f}" if value >= 10 else f"{value:.3g}"


def money(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def _throughput(
    declared: float | None,
    step_seconds: float | None,
    run: str | None,
    per_step: float,
    devices: int,
    root: Path | None,
    store: str | None,
) -> float:
    """Tokens per second of the whole job: declared, from a step time, or measured on a run
    (linearly scaled to `devices`: `runwright plan scaling` says how far that holds)."""
    given = [v is not None for v in (declared, step_seconds, run)]
    if sum(given) != 1:
        raise PlanError(
            "give the throughput one way: --tokens-per-second, --step-seconds or --run RUN"
        )
    if declared is not None:
        return declared
    if step_seconds is not None:
        if step_seconds <= 0:
            raise PlanError(f"--step-seconds={step_seconds} must be positive")
        return per_step / step_seconds
    from runwright.govern.throughput import run_throughput

    _, st = open_store(root, store)
    try:
        measured_world, measured = run_throughput(st, str(run))
    finally:
        st.close()
    return measured * devices / measured_world
