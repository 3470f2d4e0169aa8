"""`runwright baseline record|check`: regression baselines of a fixed workload (govern/baseline.py,
docs/governance.md "Baselines")."""

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from runwright.cli.options import RootOption, SetOption, StoreOption, open_store
from runwright.cli.render import console, err_console, guarded
from runwright.errors import RunwrightError

if TYPE_CHECKING:
    from runwright.govern.baseline import Tolerances

app = typer.Typer(
    help="Record a fixed workload's baseline and check a later run of it against it.",
    no_args_is_help=True,
)

ToleranceOption = typer.Option(
    [],
    "--tolerance",
    metavar="FIGURE=RATIO",
    help="A figure's allowed change in its worse direction, e.g. --tolerance "
    "loss_tokens_per_second=0.3 (30 %% drop); repeatable. Figures: those of `baseline check`'s "
    "table, `peak_memory`, `loss_relative`, `floor_seconds`.",
)
ImageOption = typer.Option(
    None, "--image-digest", help="The container image's digest, kept with the labels."
)


def _tolerances(given: list[str], base: "Tolerances | None" = None) -> "Tolerances":
    from runwright.govern.baseline import Tolerances

    values = base.model_dump() if base is not None else {}
    for item in given:
        name, sep, raw = item.partition("=")
        if not sep or name not in Tolerances.model_fields:
            raise RunwrightError(
                f"--tolerance {item}: give FIGURE=RATIO with FIGURE one of "
                f"{', '.join(Tolerances.model_fields)}"
            )
        try:
            values[name] = float(raw)
        except ValueError:
            raise RunwrightError(f"--tolerance {item}: {raw!r} is not a number") from None
    try:
        return Tolerances.model_validate(values)
    except ValueError as exc:
        raise RunwrightError(f"--tolerance: {exc}") from None


@app.command()
@guarded
def record(
    spec_file: Path = typer.Argument(..., help="Job spec of the fixed workload."),
    name: str = typer.Option(..., "--name", help="The baseline's name (a folder name)."),
    overrides: list[str] = SetOption,
    tolerances: list[str] = ToleranceOption,
    fault: str = typer.Option(
        "sigkill_rank",
        "--fault",
        help="The drill fault every run of the workload recovers from; `none` for no recovery.",
    ),
    image_digest: str | None = ImageOption,
    replace: bool = typer.Option(False, "--replace", help="Record over an existing baseline."),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = typer.Option(False, "--json", help="Print baseline.json."),
) -> None:
    """Run the spec once (with one drill fault) and keep its figures: tokens/s and step-time
    percentiles, data wait, communication, peak memory, the loss curve, anomaly counts,
    checkpoint save and restore times, the recovery, and the environment labels."""
    from runwright.govern.baseline import record_baseline
    from runwright.spec import load_spec

    if not name or "/" in name or name.startswith("."):
        raise RunwrightError(f"--name {name!r}: give a plain name (no '/', not starting with '.')")
    resolved, st = open_store(root, store)
    spec = load_spec(spec_file, overrides)
    baseline = record_baseline(
        resolved, st, spec, name,
        workdir=spec_file.resolve().parent, tolerances=_tolerances(tolerances),
        fault=None if fault == "none" else fault, image_digest=image_digest, replace=replace,
        console=err_console if json_out else console,
    )  # fmt: skip
    if json_out:
        print(json.dumps(baseline.model_dump(mode="json"), indent=2, sort_keys=True))
        return
    f = baseline.figures
    console.print(
        f"baseline {name} recorded from run {f.run_id}: "
        f"{f.performance.loss_tokens_per_second or 0:,.0f} loss tokens/s over steps "
        f"{f.performance.window.first_step}-{f.performance.window.last_step}, "
        f"{len(f.loss_curve)} losses, recovery "
        f"{'-' if f.recovery_seconds is None else f'{f.recovery_seconds:.1f} s'}; labels "
        f"{f.labels.as_node_labels()}",
        highlight=False,
    )


@app.command()
@guarded
def check(
    name: str = typer.Argument(..., help="The baseline to check against."),
    overrides: list[str] = SetOption,
    tolerances: list[str] = ToleranceOption,
    image_digest: str | None = ImageOption,
    pin: bool = typer.Option(
        False,
        "--pin",
        help="Place the run only on nodes whose driver, CUDA and NCCL labels match the "
        "baseline's (resources.node_labels; needs an inventory that labels them).",
    ),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = typer.Option(False, "--json", help="Print the check as JSON."),
) -> None:
    """Run the baseline's spec again (with --set changes: another pool, a declared slower data
    path) and give a verdict per figure against the tolerances; exits 1 if any figure fails."""
    from runwright.govern.baseline import check_baseline, load_baseline

    resolved, st = open_store(root, store)
    base = load_baseline(resolved, name).tolerances
    result = check_baseline(
        resolved, st, name,
        overrides=overrides, tolerances=_tolerances(tolerances, base),
        image_digest=image_digest, pin=pin, console=err_console if json_out else console,
    )  # fmt: skip
    if json_out:
        print(json.dumps(result.model_dump(mode="json"), indent=2, sort_keys=True))
    else:
        table = Table(title=f"runwright baseline check {name} (run {result.figures.run_id})")
        for column in ("figure", "baseline", "now", "change", "tolerance", "verdict"):
            table.add_column(column)
        style = {"pass": "green", "fail": "bold red", "flagged": "yellow", "missing": "dim"}
        for v in result.verdicts:
            table.add_row(
                v.figure,
                "-" if v.baseline is None else f"{v.baseline:.4g}",
                "-" if v.now is None else f"{v.now:.4g}",
                "-" if v.change is None else f"{100 * v.change:+.1f} %",
                v.tolerance,
                f"[{style[v.verdict]}]{v.verdict}[/]: {v.reason}",
            )
        console.print(table)
        console.print(f"check: {result.json_path}")
    if not result.ok:
        raise typer.Exit(code=1)
