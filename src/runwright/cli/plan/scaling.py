"""`runwright plan scaling`: scaling efficiency E(N) = throughput(N) / (N x throughput(1)) from
given numbers (`--point`, `--measurements`) or from measured runs in the store (`--run`)."""

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from runwright.cli.options import RootOption, StoreOption, open_store
from runwright.cli.plan.inputs import JsonOpt
from runwright.cli.render import console, guarded, print_json
from runwright.govern.throughput import run_throughput
from runwright.plan import PlanError, ScalingReport, scaling_efficiency


def read_measurements(path: Path) -> list[tuple[int, float]]:
    """A JSON list of {"world_size": N, "tokens_per_second": X} objects or [N, X] pairs."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PlanError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PlanError(f"{path}: cannot read measurements as JSON: {exc}") from None
    pairs: list[tuple[int, float]] = []
    for i, item in enumerate(data if isinstance(data, list) else [None]):
        if isinstance(item, dict) and {"world_size", "tokens_per_second"} <= item.keys():
            pairs.append((item["world_size"], item["tokens_per_second"]))
        elif isinstance(item, list) and len(item) == 2:
            pairs.append((item[0], item[1]))
        else:
            raise PlanError(
                f'{path}: entry {i} is not {{"world_size": N, "tokens_per_second": X}} '
                "or [N, X]; the file must be a JSON list of those"
            )
    for world, tps in pairs:
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (world, tps)):
            raise PlanError(
                f"{path}: world_size and tokens_per_second must be numbers, got "
                f"{world!r} and {tps!r}"
            )
    return pairs


def parse_point(text: str) -> tuple[int, float]:
    """`--point 8:61000` -> (8, 61000.0)."""
    world, sep, tps = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return int(world), float(tps)
    except ValueError:
        raise PlanError(
            f"--point {text!r} is not WORLD_SIZE:TOKENS_PER_SECOND, e.g. --point 8:61000"
        ) from None


def measured_runs(
    run_ids: list[str], root: Path | None, store: str | None
) -> list[tuple[int, float]]:
    """(world size, loss tokens per productive second) of each run, read from the store.
    The store is opened only when runs are named, so numbers alone never touch a root."""
    if not run_ids:
        return []
    _, st = open_store(root, store)
    try:
        return [run_throughput(st, run_id) for run_id in run_ids]
    finally:
        st.close()


def render_scaling(report: ScalingReport) -> None:
    table = Table(title=f"scaling efficiency against world size {report.baseline_world_size}")
    for column in (
        "world size",
        "tokens/s",
        "tokens/s per device",
        "speedup",
        "efficiency",
        "runs",
    ):
        table.add_column(column, justify="right")
    for p in report.points:
        table.add_row(
            str(p.world_size),
            f"{p.tokens_per_second:,.0f}",
            f"{p.tokens_per_second_per_device:,.0f}",
            f"{p.speedup:.2f}x",
            f"{100 * p.efficiency:.1f}%",
            str(p.measurements),
        )
    console.print(table)
    if report.baseline_world_size != 1:
        console.print(
            f"[dim]no single-device run: E(N) is relative to world size "
            f"{report.baseline_world_size}[/][dim], (tps(N)/N)/(tps(N0)/N0)[/]"
        )


@guarded
def scaling(
    points: Annotated[
        list[str] | None,
        typer.Option("--point", help="WORLD_SIZE:TOKENS_PER_SECOND; repeat for each run."),
    ] = None,
    measurements: Annotated[
        Path | None,
        typer.Option(
            "--measurements",
            help='JSON list of {"world_size": N, "tokens_per_second": X} (or [N, X]) measurements.',
        ),
    ] = None,
    runs: Annotated[
        list[str] | None,
        typer.Option(
            "--run",
            help="Measured run id (or unique prefix) in the store; its world size and loss "
            "tokens per productive second. Repeat for each run.",
        ),
    ] = None,
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    as_json: JsonOpt = False,
) -> None:
    """Scaling efficiency E(N) = throughput(N) / (N x throughput(1)) from given numbers or
    measured runs."""
    pairs = [parse_point(p) for p in points or []]
    if measurements is not None:
        pairs += read_measurements(measurements)
    pairs += measured_runs(runs or [], root, store)
    report = scaling_efficiency(pairs)
    if as_json:
        print_json(report.model_dump())
        return
    render_scaling(report)
