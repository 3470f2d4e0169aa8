"""`runwright ckpt ...` commands: list, inspect, verify, gc and export a run's checkpoints."""

import math
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn
from rich.table import Table

from runwright.ckpt import inventory as inv
from runwright.ckpt.export import ExportFormat, read_model_config
from runwright.ckpt.manifest import CheckpointManifest
from runwright.cli.backend import open_backend
from runwright.cli.options import RootOption
from runwright.cli.render import console, guarded, print_json

app = typer.Typer(help="Inspect, verify, clean up and export checkpoints.", no_args_is_help=True)

Target = Annotated[
    str, typer.Argument(help="Run id (under --root) or a checkpoint folder path or URL.")
]
Json = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]


class Mode(StrEnum):
    """How `ckpt verify` checks checksums."""

    FULL = "full"
    SAMPLED = "sampled"


def _finite(value: float) -> float:
    """typer's `min=` lets `nan` and `inf` through (every comparison with nan is false)."""
    if not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number of seconds")
    return value


@app.command("list")
@guarded
def list_(target: Target, root: Path | None = RootOption, json_out: Json = False) -> None:
    """List committed checkpoints (newest first) and uncommitted residue with reasons."""
    answer = open_backend(root, None).ckpt_list(target)
    if json_out:
        print_json(answer)
        return
    found = inv.Inventory.model_validate(answer)
    table = Table(title=f"checkpoints in {found.root} (generation {found.generation})")
    for column in ("folder", "step", "gen", "MiB", "health", "latest"):
        table.add_column(column)
    for row in found.committed:
        table.add_row(
            row.folder,
            str(row.step),
            str(row.generation),
            f"{row.total_bytes / 2**20:.1f}",
            "suspect" if row.suspect else row.health.value,  # restore skips it
            "*" if row.latest else "",
        )
    console.print(table)
    for other in found.uncommitted:
        label = "damaged" if other.damaged else "not committed"
        console.print(f"{label}: {escape(other.folder)} ({escape(other.reason)})", highlight=False)


@app.command()
@guarded
def inspect(
    target: Target,
    checkpoint: Annotated[str, typer.Argument(help="Folder, id, step or `latest`.")] = "latest",
    root: Path | None = RootOption,
    json_out: Json = False,
) -> None:
    """Show a committed checkpoint's manifest (TARGET may be the checkpoint's own folder)."""
    answer = open_backend(root, None).ckpt_inspect(target, checkpoint)
    if json_out:
        print_json(answer)
        return
    manifest = CheckpointManifest.model_validate(answer["manifest"])
    console.print(_overview(answer["folder"], manifest))
    console.print(_state_groups(manifest))


def _words(mapping: dict) -> str:
    """`{"dp": 2, "tp": 1}` as `dp 2, tp 1`: what a reader scans, not a Python literal."""
    return ", ".join(f"{key} {value}" for key, value in mapping.items()) or "-"


def _overview(folder: str, manifest: CheckpointManifest) -> Table:
    import datetime

    created = datetime.datetime.fromtimestamp(manifest.created_unix_seconds, datetime.UTC)
    table = Table(
        title=f"checkpoint {folder}: step {manifest.step}, generation {manifest.generation}",
        show_header=False,
        title_justify="left",
    )
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    loss = "-" if manifest.loss_at_save is None else f"{manifest.loss_at_save:.6g}"
    largest = max((f.size_bytes for f in manifest.files), default=0)
    rows = [
        ("step", str(manifest.step)),
        ("generation", str(manifest.generation)),
        ("created", created.strftime("%Y-%m-%d %H:%M:%S UTC")),
        ("health", manifest.health.value),
        ("loss at save", loss),
        ("world size", f"{manifest.world_size} ranks ({_words(manifest.parallel_layout)})"),
        (
            "size",
            f"{manifest.total_bytes / 2**20:.1f} MiB in {len(manifest.files)} files "
            f"(largest {largest / 2**20:.1f} MiB, {manifest.checksum_algorithm} each)",
        ),
        ("parent", manifest.parent_checkpoint_id or "- (the run's first)"),
        ("spec hash", manifest.spec_hash or "-"),
        ("dataset", manifest.data_manifest_id or "-"),
        ("tokenizer hash", manifest.tokenizer_hash or "-"),
        ("counters", _words(manifest.counters)),
        ("data cursor", _words(manifest.data_cursor or {})),
        ("RNG streams", f"ranks {manifest.rng_ranks}" if manifest.rng_ranks else "-"),
        ("timings", ", ".join(f"{k} {v:.2f} s" for k, v in manifest.timings_seconds.items())),
        ("torch", manifest.torch_version),
    ]
    for field, value in rows:
        table.add_row(field, escape(value or "-"))
    return table


def _state_groups(manifest: CheckpointManifest) -> Table:
    """The stored state by its top-level name (model, optim, data...): keys, tensors, values."""
    groups: dict[str, list[int]] = {}
    for key, entry in manifest.logical_keys.items():
        counts = groups.setdefault(key.split(".", 1)[0], [0, 0, 0])
        counts[0] += 1
        if entry.kind == "tensor":
            counts[1] += 1
            counts[2] += math.prod(entry.shape or [])
    table = Table(title=f"{len(manifest.logical_keys)} stored keys", title_justify="left")
    for column in ("state", "keys", "tensors", "elements"):
        table.add_column(column, justify="left" if column == "state" else "right")
    for name, (keys, tensors, elements) in sorted(groups.items()):
        table.add_row(escape(name), str(keys), str(tensors), f"{elements:,}")
    return table


@app.command()
@guarded
def verify(
    target: Target,
    checkpoint: Annotated[
        str | None, typer.Argument(help="Folder, id, step or `latest`; default: all.")
    ] = None,
    mode: Annotated[
        Mode, typer.Option(help="full: every checksum; sampled: small files and a quarter.")
    ] = Mode.FULL,
    root: Path | None = RootOption,
    json_out: Json = False,
) -> None:
    """Check the root as restore opens it (pointer, generation, commit records), list residue,
    and check every checkpoint against its manifest and DCP's metadata; exit status 1 if
    anything is damaged, could not be inspected, or there was nothing to verify. TARGET may be
    one checkpoint's own folder: that checkpoint is verified in its root."""
    be = open_backend(root, None)
    if json_out:
        answer = be.ckpt_verify(target, checkpoint, mode.value)
        print_json(answer)
        report = inv.RootReport.model_validate({k: v for k, v in answer.items() if k != "ok"})
    else:
        columns = (BarColumn(), DownloadColumn(), TimeRemainingColumn())
        with Progress(*columns, console=console) as progress:
            task = progress.add_task("verify", total=None)
            answer = be.ckpt_verify(
                target,
                checkpoint,
                mode.value,
                lambda n: progress.advance(task, n),
                lambda total: progress.update(task, total=total),
            )
        report = inv.RootReport.model_validate({k: v for k, v in answer.items() if k != "ok"})
        for problem in report.problems:
            console.print(f"[bold red]problem:[/] {escape(problem)}", highlight=False)
        for item in report.residue:
            verdict = "gc removes it" if item.removable else f"gc keeps it: {item.kept_because}"
            console.print(
                f"residue: {escape(item.path)} ({item.kind}, {item.reason}); {verdict}",
                highlight=False,
            )
        for path, error in report.uninspectable.items():
            console.print(
                f"[bold red]skipped:[/] {escape(path)} cannot be inspected: {escape(error)}",
                highlight=False,
            )
        for checkpoint_report in report.checkpoints:
            console.print(checkpoint_report.summary(), highlight=False)
    if not report.ok:
        raise typer.Exit(code=1)


@app.command()
@guarded
def gc(
    target: Target,
    min_age_seconds: Annotated[
        float,
        typer.Option(
            min=0.0,
            callback=_finite,
            help="Leave residue younger than this (its writer may be alive).",
        ),
    ] = 3600.0,
    max_entries: Annotated[int, typer.Option(min=1, help="Remove at most this many entries.")] = 64,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Remove nothing; say what would be removed.")
    ] = False,
    root: Path | None = RootOption,
    json_out: Json = False,
) -> None:
    """Remove staging residue (never a committed checkpoint, never outside the run)."""
    report = open_backend(root, None).ckpt_gc(target, min_age_seconds, max_entries, dry_run)
    if json_out:
        print_json(report)
        return
    verb = "would remove" if dry_run else "removed"
    for path, reason in report["removed"].items():
        console.print(f"{verb} {escape(path)}: {escape(reason)}", highlight=False)
    for path, reason in report["kept"].items():
        console.print(f"kept {escape(path)}: {escape(reason)}", highlight=False)
    for path, error in report.get("failed", {}).items():
        console.print(f"[bold red]failed:[/] {escape(path)}: {escape(error)}", highlight=False)
    mib = report["bytes_freed"] / 2**20
    console.print(f"{mib:.1f} MiB would be freed (dry run)" if dry_run else f"{mib:.1f} MiB freed")


@app.command()
@guarded
def export(
    target: Target,
    out: Annotated[Path, typer.Option(help="Export folder: new or empty, outside the run.")],
    checkpoint: Annotated[str, typer.Argument(help="Folder, id, step or `latest`.")] = "latest",
    format: Annotated[
        ExportFormat,
        typer.Option(
            "--format",
            help="hf-gpt2: what transformers loads as GPT2LMHeadModel (refused for a model "
            "that does not map); runwright: runwright's tensor names, any model; auto: hf-gpt2 "
            "when the model maps, else runwright.",
        ),
    ] = ExportFormat.AUTO,
    spec: Annotated[
        Path | None,
        typer.Option(help="Job spec the checkpoint trained under (a folder TARGET, no run)."),
    ] = None,
    model_config: Annotated[
        Path | None,
        typer.Option(help="JSON model config (a folder TARGET with neither run nor spec)."),
    ] = None,
    tokenizer: Annotated[
        Path | None,
        typer.Option(help="Tokenizer file or folder (default: the run's dataset's)."),
    ] = None,
    root: Path | None = RootOption,
    json_out: Json = False,
) -> None:
    """Write the weights, config.json, the tokenizer the model trained with and release.json
    (hashes and provenance) for use elsewhere. A run's model config and tokenizer come from its
    spec and dataset. `--format hf-gpt2` is what `transformers.GPT2LMHeadModel.from_pretrained`
    and `PreTrainedTokenizerFast.from_pretrained` load."""
    config = read_model_config(model_config) if model_config else None
    be = open_backend(root, None)
    release = be.ckpt_export(
        target,
        # Through a server the export goes under its root: --out names the folder there.
        out.name if be.remote else str(out),
        checkpoint,
        config,
        str(tokenizer) if tokenizer else None,
        format=format.value,
        spec=str(spec) if spec else None,
    )
    where = release.pop("destination")
    if json_out:
        print_json(release if not be.remote else release | {"destination": where})
        return
    console.print(
        f"exported step {release['source_step']} ({release['parameters']:,} parameters) to "
        f"{where if be.remote else out} as {release['format']}",
        highlight=False,
    )
    for reason in release.get("not_mapped") or []:
        console.print(f"not hf-gpt2: {escape(reason)}", highlight=False)
    for note in release.get("notes") or []:
        console.print(f"note: {escape(note)}", highlight=False)
