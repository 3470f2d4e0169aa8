"""`runwright plan fleet`: a discrete-event simulation of one run on N devices under failures by
class, with its save policy and spare nodes: ETTR, goodput, interruptions, lost work and
checkpoint traffic over several seeds (runwright.plan.fleet_sim)."""

from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.table import Table

from runwright.cli.plan.inputs import JsonOpt, format_bytes, format_seconds
from runwright.cli.render import console, guarded, print_json, print_unclipped
from runwright.plan import PlanError
from runwright.plan.fleet_model import (
    SECONDS_PER_HOUR,
    FleetInputs,
    FleetReport,
    SavePolicy,
    Spread,
)
from runwright.plan.fleet_presets import PRESETS, Preset, preset
from runwright.plan.fleet_sim import simulate_fleet
from runwright.plan.fleet_sweep import IntervalSweep, policy_candidates, sweep

FLAGS = {
    "devices": "--devices",
    "devices_per_node": "--devices-per-node",
    "days": "--days",
    "classes": "--class",
    "save.stall_seconds": "--stall-seconds",
    "save.persist_seconds": "--persist-seconds",
    "save.bytes": "--checkpoint-gib",
    "save.restore_seconds": "--restore-seconds",
    "save.interval_seconds": "--interval-seconds",
    "save.prior_mtbf_seconds": "--prior-mtbf-hours",
    "save": "--policy",
    "spares.nodes": "--spare-nodes",
    "spares.repair_seconds": "--repair-hours",
    "step_seconds": "--step-seconds",
}
"""The flag that sets each input field, to name it in an error."""

CLASS_FORMAT = "NAME:RATE_PER_DEVICE_HOUR[:DETECT_S[:RESTART_S[:node|planned]]]"


def _flag(loc: tuple[Any, ...]) -> str:
    path = [str(p) for p in loc if not isinstance(p, int)]
    for n in range(len(path), 0, -1):
        if ".".join(path[:n]) in FLAGS:
            return FLAGS[".".join(path[:n])]
    return ".".join(path) or "input"


def build_inputs(**fields: Any) -> FleetInputs:
    """FleetInputs, with pydantic's complaints turned into one message naming each flag."""
    try:
        return FleetInputs(**fields)
    except ValidationError as exc:
        problems = "; ".join(
            f"{_flag(err['loc'])}: {str(err['msg']).removeprefix('Value error, ')}"
            for err in exc.errors()
        )
        raise PlanError(f"invalid fleet: {problems}") from None


def parse_class(text: str, detect: float | None, restart: float | None) -> dict[str, Any]:
    """`--class gpu:1.26e-5:120:300:node` -> the fields of a FailureClass."""
    parts = text.split(":")
    kind = parts[4] if len(parts) == 5 else ""
    try:
        if not 2 <= len(parts) <= 5 or kind not in ("", "node", "planned"):
            raise ValueError
        numbers = [float(p) for p in parts[1:4]]
    except ValueError:
        raise PlanError(
            f"--class {text!r} is not {CLASS_FORMAT}, e.g. --class gpu:1.26e-5:120:300:node "
            "(rate per device per hour; detect and restart in seconds)"
        ) from None
    return {
        "name": parts[0],
        "rate_per_device_hour": numbers[0],
        "detect_seconds": numbers[1] if len(numbers) > 1 else (detect or 0.0),
        "restart_seconds": numbers[2] if len(numbers) > 2 else (restart or 0.0),
        "needs_spare": kind == "node",
        "planned": kind == "planned",
    }


def _classes(
    base: Preset | None,
    specs: list[str],
    device_mtbf_hours: float | None,
    detect: float | None,
    restart: float | None,
) -> list[Any]:
    """--class entries, else one class from --device-mtbf-hours, else the preset's classes;
    --detect-seconds and --restart-seconds replace what an entry does not give itself."""
    if specs and device_mtbf_hours is not None:
        raise PlanError(
            "give the failure rates one way: --class (repeatable) or --device-mtbf-hours"
        )
    if specs:
        return [parse_class(s, detect, restart) for s in specs]
    if device_mtbf_hours is not None:
        if not device_mtbf_hours > 0:
            raise PlanError(f"--device-mtbf-hours={device_mtbf_hours:g} must be positive")
        return [
            {
                "name": "any",
                "rate_per_device_hour": 1.0 / device_mtbf_hours,
                "detect_seconds": detect or 0.0,
                "restart_seconds": restart or 0.0,
            }
        ]
    if base is None:
        raise PlanError(
            f"give the failure rates: --preset ({', '.join(sorted(PRESETS))}), --class "
            f"{CLASS_FORMAT} (repeatable) or --device-mtbf-hours H"
        )
    override = {
        k: v for k, v in (("detect_seconds", detect), ("restart_seconds", restart)) if v is not None
    }
    return [c.model_copy(update=override) for c in base.classes]


@guarded
def fleet(
    preset_name: Annotated[
        str | None,
        typer.Option(
            "--preset",
            help=f"A published fleet ({', '.join(sorted(PRESETS))}): its size, window, rates "
            "and assumed costs; flags override them.",
        ),
    ] = None,
    devices: Annotated[int | None, typer.Option("--devices", help="Devices in the run.")] = None,
    devices_per_node: Annotated[
        int | None, typer.Option("--devices-per-node", help="Devices per node (8).")
    ] = None,
    days: Annotated[
        float | None, typer.Option("--days", help="Simulated wall window (30).")
    ] = None,
    classes: Annotated[
        list[str] | None,
        typer.Option(
            "--class",
            help=f"A failure class {CLASS_FORMAT}; `node`: needs a spare node; repeatable.",
        ),
    ] = None,
    device_mtbf_hours: Annotated[
        float | None,
        typer.Option("--device-mtbf-hours", help="Or one class: each device's MTBF (h)."),
    ] = None,
    detect_seconds: Annotated[
        float | None, typer.Option("--detect-seconds", help="Detection time of every class (s).")
    ] = None,
    restart_seconds: Annotated[
        float | None, typer.Option("--restart-seconds", help="Requeue and start time (s).")
    ] = None,
    stall_seconds: Annotated[
        float | None, typer.Option("--stall-seconds", help="Blocking (staging) part of a save (s).")
    ] = None,
    persist_seconds: Annotated[
        float, typer.Option("--persist-seconds", help="Write until durable after the stall (s).")
    ] = 0.0,
    async_save: Annotated[
        bool,
        typer.Option("--async/--sync", help="Async: only the stall blocks; sync: stall + persist."),
    ] = False,
    checkpoint_gib: Annotated[
        float, typer.Option("--checkpoint-gib", help="Size of one save, for storage traffic.")
    ] = 0.0,
    restore_seconds: Annotated[
        float | None, typer.Option("--restore-seconds", help="Load and verify after a restart.")
    ] = None,
    policy: Annotated[
        SavePolicy, typer.Option("--policy", help="How the save interval is chosen.")
    ] = SavePolicy.DALY,
    interval_seconds: Annotated[
        float | None, typer.Option("--interval-seconds", help="Policy fixed: seconds per save.")
    ] = None,
    prior_mtbf_hours: Annotated[
        float | None,
        typer.Option("--prior-mtbf-hours", help="Policy adaptive: MTBF assumed at the start."),
    ] = None,
    spare_nodes: Annotated[
        int | None, typer.Option("--spare-nodes", help="Spare nodes; default: never short.")
    ] = None,
    repair_hours: Annotated[
        float, typer.Option("--repair-hours", help="Mean repair time of a lost node (h).")
    ] = 72.0,
    step_seconds: Annotated[
        float | None, typer.Option("--step-seconds", help="Step time, to count lost steps.")
    ] = None,
    seeds: Annotated[int, typer.Option("--seeds", min=1, max=1000, help="Runs simulated.")] = 8,
    seed: Annotated[int, typer.Option("--seed", min=0, help="First seed.")] = 0,
    compare: Annotated[
        bool, typer.Option("--compare", help="Also simulate every interval policy, same seeds.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Simulate one run on N devices under failures by class: ETTR, goodput, interruptions, lost
    work and checkpoint traffic, with mean and spread over seeds."""
    base = preset(preset_name) if preset_name is not None else None
    stall = stall_seconds if stall_seconds is not None else base.stall_seconds if base else None
    if stall is None:
        raise PlanError("give --stall-seconds (the blocking part of one save), or a --preset")
    if devices is None and base is None:
        raise PlanError("give --devices, or a --preset")
    if policy == SavePolicy.FIXED and interval_seconds is None:
        raise PlanError("--policy fixed needs --interval-seconds (training seconds per save)")
    hours = SECONDS_PER_HOUR
    inputs = build_inputs(
        devices=devices if devices is not None else base.devices if base else 0,
        devices_per_node=devices_per_node or (base.devices_per_node if base else 8),
        days=days if days is not None else base.days if base else 30.0,
        classes=_classes(base, classes or [], device_mtbf_hours, detect_seconds, restart_seconds),
        save={
            "stall_seconds": stall,
            "persist_seconds": persist_seconds,
            "mode": "async" if async_save else "sync",
            "bytes": checkpoint_gib * 2**30,
            "restore_seconds": restore_seconds
            if restore_seconds is not None
            else base.restore_seconds
            if base
            else 0.0,
            "policy": policy,
            "interval_seconds": interval_seconds,
            "prior_mtbf_seconds": None if prior_mtbf_hours is None else prior_mtbf_hours * hours,
        },
        spares={"nodes": spare_nodes, "repair_seconds": repair_hours * hours},
        step_seconds=step_seconds,
    )
    result = simulate_fleet(inputs, seeds, seed)
    compared = sweep(inputs, policy_candidates(inputs), seeds, seed) if compare else None
    if as_json:
        data = result.model_dump()
        if compared is not None:
            data["compare"] = compared.model_dump()
        print_json(data)
        return
    render(result, base)
    if compared is not None:
        render_sweep(compared)


def _bytes(value: float) -> str:
    """Bytes in TiB or PiB when large (a run writes petabytes), else as the other plans do."""
    for unit, scale in (("PiB", 2**50), ("TiB", 2**40)):
        if value >= scale:
            return f"{value / scale:,.2f} {unit}"
    return format_bytes(value)


def _row(name: str, s: Spread, fmt: str = "{:,.1f}", scale: float = 1.0) -> list[str]:
    return [name, *(fmt.format(v * scale) for v in (s.mean, s.std, s.min, s.max))]


def render(result: FleetReport, base: Preset | None) -> None:
    i = result.inputs
    where = f" (preset {base.name})" if base else ""
    table = Table(
        title=f"fleet simulation: {i.devices:,} devices, {i.days:g} days, "
        f"{len(result.seeds)} seeds{where}"
    )
    for column in ("per run", "mean", "std", "min", "max"):
        table.add_column(column, justify="left" if column == "per run" else "right")
    hours = 1 / SECONDS_PER_HOUR
    rows = [
        _row("ETTR %", result.ettr, "{:.2f}", 100),
        _row("goodput %", result.goodput_fraction, "{:.2f}", 100),
        _row("interruptions", result.interruptions),
        _row("  unplanned", result.unplanned_interruptions),
        _row("MTTF h", result.mttf_hours, "{:.2f}"),
        _row("interval s", result.interval_seconds, "{:,.0f}"),
        _row("lost h", result.lost_seconds, "{:,.2f}", hours),
        *([_row("lost steps", result.lost_steps, "{:,.0f}")] if result.lost_steps else []),
        _row("saves", result.checkpoints, "{:,.0f}"),
        _row("saves cut short", result.abandoned_saves, "{:,.1f}"),
        _row("spare wait h", result.spare_wait_seconds, "{:,.2f}", hours),
    ]
    for row in rows:
        table.add_row(*row)
    if i.save.bytes:
        b = result.bytes_written
        table.add_row("written", *(_bytes(v) for v in (b.mean, b.std, b.min, b.max)))
    print_unclipped(table)
    console.print(
        "[dim]ETTR: productive / wall time; goodput: productive device-hours / device-hours "
        "held, spares included; MTTF: window / unplanned interruptions[/]"
    )
    lost = result.lost_per_failure
    console.print(
        f"lost per failure ({lost.count:,} over all seeds): mean "
        f"{format_seconds(lost.mean_seconds)}, p50 {format_seconds(lost.p50_seconds)}, "
        f"p90 {format_seconds(lost.p90_seconds)}, p99 {format_seconds(lost.p99_seconds)}, "
        f"max {format_seconds(lost.max_seconds)}"
    )
    wall = Table(title="where the wall time went (mean per run)")
    for column in ("use", "hours", "share"):
        wall.add_column(column, justify="left" if column == "use" else "right")
    for use, seconds in result.wall_breakdown_seconds.items():
        wall.add_row(use, f"{seconds / 3600:,.1f}", f"{100 * seconds / i.wall_seconds:.2f} %")
    print_unclipped(wall)
    by_class = Table(title="failure classes")
    for column in ("class", "per device-hour", "detect s", "restart s", "kind", "per run"):
        by_class.add_column(column, justify="left" if column in ("class", "kind") else "right")
    for c in i.classes:
        kind = "planned" if c.planned else "node loss" if c.needs_spare else "restart"
        by_class.add_row(
            c.name,
            f"{c.rate_per_device_hour:.3g}",
            f"{c.detect_seconds:g}",
            f"{c.restart_seconds:g}",
            kind,
            f"{result.interruptions_by_class[c.name]:,.1f}",
        )
    print_unclipped(by_class)
    a = result.analytic
    if a is not None:
        console.print(
            f"first-order model: job MTBF {a.job_mtbf_seconds / 3600:.2f} h, "
            f"{a.expected_interruptions:,.1f} interruptions expected; Young "
            f"{a.young_seconds:,.0f} s, Daly {a.daly_seconds:,.0f} s; ETTR 1 - W(T) = "
            f"{100 * a.first_order_ettr:.2f} % against {100 * result.ettr.mean:.2f} % simulated"
        )
    if base is not None:
        console.print(f"[dim]rates: {base.source}; assumed: {base.assumed}[/]")
    console.print(f"[dim]assumes {result.assumptions}[/]")


def render_sweep(result: IntervalSweep, title: str = "interval policies, same seeds") -> None:
    n = len(result.seeds)
    table = Table(title=title)
    for column in ("candidate", "interval s", "ETTR %", "std", f"vs {result.reference}, pts"):
        table.add_column(column, justify="left" if column == "candidate" else "right")
    for r in result.rows:
        gain = r.gain_vs_reference
        table.add_row(
            r.label,
            f"{r.interval_seconds:,.0f}",
            f"{100 * r.ettr.mean:.3f}",
            f"{100 * r.ettr.std:.3f}",
            f"{100 * gain.mean:+.3f} ± {100 * gain.std / n**0.5:.3f}",
            style="bold" if r.label == result.best.label else None,
        )
    print_unclipped(table)
    console.print(best_line(result))


def best_line(result: IntervalSweep) -> str:
    """The candidate with the highest simulated ETTR, and whether it beats the reference."""
    n = len(result.seeds)
    best = result.best
    se = best.gain_vs_reference.std / n**0.5
    if best.label == result.reference:
        verdict = "no candidate beat it"
    elif abs(best.gain_vs_reference.mean) <= 2 * se:
        verdict = "within noise of it"
    else:
        verdict = "beyond twice the standard error"
    return (
        f"highest simulated ETTR: {best.label} ({best.interval_seconds:,.0f} s), "
        f"{100 * best.ettr.mean:.3f} %, {100 * best.gain_vs_reference.mean:+.3f} ± "
        f"{100 * se:.3f} points against {result.reference}: {verdict} "
        f"({n} seeds of {result.days:,.0f} days; ± is the standard error)"
    )
