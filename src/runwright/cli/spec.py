"""`runwright spec validate|hash|explain|schema`."""

import json
from pathlib import Path

import typer
from rich.table import Table

from runwright.cli.options import SetOption
from runwright.cli.render import console, guarded, print_json
from runwright.errors import RunwrightError
from runwright.spec import JobSpec, load_spec
from runwright.spec.elastic import elastic_layouts

app = typer.Typer(help="Validate, hash and explain job specs.", no_args_is_help=True)

SpecFile = typer.Argument(..., help="Job spec file (.yaml, .yml, .toml or .json).")


@app.command()
@guarded
def validate(
    file: Path = SpecFile,
    pools: Path | None = typer.Option(
        None,
        "--pools",
        help="Also check that the spec's pool in this pools file can place it (exit 2 with the "
        "reason if it never can).",
        show_default=False,
    ),
    overrides: list[str] = SetOption,
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Check a spec; exit 2 with one line per problem if it is invalid.

    Also checks it against the dataset it names (model vocabulary against the tokenizer, dataset
    and tokenizer hashes, mixture sources), as `submit` does; with --pools, that its pool can
    place it."""
    from runwright.govern.preflight import require_preflight

    spec = load_spec(file, overrides)
    preflight = require_preflight(spec, file)
    if pools is not None:
        from runwright.control.pools import check_placement

        check_placement(spec, pools)
    notes = [*spec.plan.notes, *preflight.not_checked]
    if json_out:
        print_json(
            {
                "valid": True,
                "name": spec.name,
                "spec_hash": spec.spec_hash,
                "notes": notes,
            }
        )
        return
    console.print(f"[green]valid[/] {file} (name {spec.name}, hash {spec.spec_hash[:16]})")
    for note in notes:
        console.print(f"[yellow]note:[/] {note}")


@app.command("hash")
@guarded
def hash_(file: Path = SpecFile, overrides: list[str] = SetOption) -> None:
    """Print the spec hash (sha256 of the canonical JSON) alone on the last line."""
    print(load_spec(file, overrides).spec_hash)


@app.command()
@guarded
def explain(
    file: Path = SpecFile,
    overrides: list[str] = SetOption,
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Show the resolved plan: every derived value and why it has that value."""
    spec = load_spec(file, overrides)
    plan = spec.plan
    layouts = elastic_layouts(spec)
    if json_out:
        print_json(
            {
                "spec_hash": spec.spec_hash,
                "plan": plan.model_dump(mode="json"),
                "spec": spec.model_dump(mode="json"),
                "elastic_layouts": [x.model_dump() for x in layouts],
            }
        )
        return
    table = Table(title=f"Resolved plan for {spec.name}")
    table.add_column("value")
    table.add_column("derived", justify="right")
    table.add_column("reason")
    for name, value in plan.values().items():
        table.add_row(name, "-" if value is None else f"{value:,}", getattr(plan, name).reason)
    console.print(table)
    if layouts:
        sizes = Table(title="Elastic layouts: the global batch at every size of the range")
        for column in ("nodes", "world size", "dp", "micro-batch", "accumulation", "global batch"):
            sizes.add_column(column, justify="right")
        for x in layouts:
            sizes.add_row(*(str(v) for v in x.model_dump().values()))
        console.print(sizes)
    for note in plan.notes:
        console.print(f"[yellow]note:[/] {note}")
    console.print(f"spec hash {spec.spec_hash}")


@app.command()
@guarded
def schema(
    out: Path | None = typer.Argument(None, help="Write the schema here instead of stdout."),
) -> None:
    """Export the JSON Schema of the job spec (for editors and other tools)."""
    text = json.dumps(JobSpec.model_json_schema(), indent=2, sort_keys=True) + "\n"
    if out is None:
        print(text, end="")
        return
    try:
        out.write_text(text)
    except OSError as exc:
        raise RunwrightError(f"cannot write the schema to {out}: {exc}") from None
    console.print(f"wrote {out}")
