"""`runwright data ...`: build, import/export (Megatron), inspect and verify datasets; the
commands that govern a dataset's use (grant, policy, withdraw, delete) are in data_policy.py and
join this group."""

from pathlib import Path

import typer
from rich.table import Table

from runwright.cli import data_policy
from runwright.cli.backend import open_backend
from runwright.cli.options import RootOption, StoreOption
from runwright.cli.render import console, guarded, print_json
from runwright.layout import resolve_root

app = typer.Typer(help="Build, inspect and verify datasets.", no_args_is_help=True)
app.add_typer(data_policy.app)  # no name: its commands are this group's own
DATASET_HELP = (
    "Dataset folder or fsspec URL, or a dataset id (under <root>/datasets/; through --server, "
    "a dataset of your project)."
)


def _variables(pairs: list[str]) -> dict[str, str]:
    from runwright.data.errors import RecipeError

    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise RecipeError(f"--set expects NAME=VALUE, got {pair!r}")
        out[key] = value
    return out


@app.command()
@guarded
def build(
    recipe: Path = typer.Argument(..., help="Recipe file (YAML or JSON)."),
    root: Path | None = RootOption,
    set_: list[str] = typer.Option(
        [], "--set", help="Recipe variable NAME=VALUE, replacing ${NAME} (repeatable)."
    ),
    allow_code: bool = typer.Option(
        False,
        "--allow-code",
        help="Let the recipe name module:function filters and extractors: code that runs as "
        "you. Without it only registered functions run (docs/trust.md).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Build the dataset a recipe describes into <root>/datasets/<dataset_id>/.

    Re-running redoes only unfinished partitions; bad records go to quarantine/ with reasons.
    A recipe is data: it runs no code of its own unless --allow-code says so.
    """
    from runwright.data.builder.pipeline import build_dataset

    result = build_dataset(
        recipe,
        resolve_root(root),
        variables=_variables(set_),
        allow_code=allow_code,
        show_progress=not as_json,
        console=None if as_json else console,
    )
    summary = {
        "dataset_id": result.dataset_id,
        "folder": str(result.folder),
        "partitions_run": result.partitions_run,
        "partitions_reused": result.partitions_reused,
        "quarantined": result.quarantined,
        "seconds": round(result.seconds, 3),
    }
    if as_json:
        print_json(summary)
        return
    console.print(f"dataset [bold]{result.dataset_id}[/]")
    console.print(f"  folder      {result.folder}")
    console.print(
        f"  partitions  {result.partitions_run} run, {result.partitions_reused} reused; "
        f"{result.quarantined} records quarantined; {result.seconds:.1f} s"
    )


@app.command("import-megatron")
@guarded
def import_megatron_command(
    shards: list[str] = typer.Argument(
        ...,
        help="Megatron shard prefixes (`corpus_text_document` for its .bin/.idx), each optionally "
        "as SOURCE=PREFIX; plain prefixes go to --source.",
    ),
    vocab_size: int = typer.Option(..., "--vocab-size", help="Vocabulary size of the ids."),
    eod_token_id: int = typer.Option(..., "--eod-token-id", help="End-of-document token id."),
    source: str = typer.Option("megatron", "--source", help="Source name of plain prefixes."),
    tokenizer: Path | None = typer.Option(
        None, "--tokenizer", help="HF tokenizer.json of the ids (else a placeholder vocabulary)."
    ),
    strip_eod: bool = typer.Option(
        False,
        "--strip-eod",
        help="Remove a trailing EOD from each document (data made with --append-eod); "
        "runwright's packers add one themselves.",
    ),
    name: str = typer.Option("megatron-import", "--name", help="Dataset name."),
    root: Path | None = RootOption,
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Import Megatron-LM indexed datasets (.bin/.idx) as a content-addressed dataset."""
    from runwright.data.builder.megatron import import_megatron

    sources: dict[str, list[str]] = {}
    for item in shards:
        label, sep, prefix = item.partition("=")
        sources.setdefault(label if sep else source, []).append(prefix if sep else item)
    result = import_megatron(
        sources,
        resolve_root(root),
        vocab_size=vocab_size,
        eod_token_id=eod_token_id,
        tokenizer_file=tokenizer,
        strip_eod=strip_eod,
        name=name,
        show_progress=not as_json,
        console=None if as_json else console,
    )
    summary = {
        "dataset_id": result.dataset_id,
        "folder": str(result.folder),
        "documents": result.documents,
        "tokens": result.tokens,
        "eod_stripped": result.eod_stripped,
        "reused": result.reused,
    }
    if as_json:
        print_json(summary)
        return
    console.print(f"dataset [bold]{result.dataset_id}[/]" + (" (already there)" * result.reused))
    console.print(f"  folder     {result.folder}")
    console.print(
        f"  documents  {result.documents:,}; tokens {result.tokens:,}; "
        f"trailing EOD removed from {result.eod_stripped:,}"
    )


@app.command("export-megatron")
@guarded
def export_megatron_command(
    path: str = typer.Argument(..., help="Dataset folder or fsspec URL."),
    output_prefix: Path = typer.Argument(
        ..., help="Output prefix; writes <prefix>_<source>_document.bin/.idx per source."
    ),
    split: str = typer.Option("train", "--split", help="Split to export (train or eval)."),
    append_eod: bool = typer.Option(
        True,
        "--append-eod/--no-append-eod",
        help="End every document with the EOD id, as Megatron's --append-eod does.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Export a dataset as Megatron-LM indexed datasets, one .bin/.idx pair per source."""
    from runwright.data.builder.megatron import export_megatron

    result = export_megatron(
        path,
        output_prefix,
        split=split,
        append_eod=append_eod,
        show_progress=not as_json,
        console=None if as_json else console,
    )
    summary = {
        "prefixes": {src: str(p) for src, p in result.prefixes.items()},
        "documents": result.documents,
        "tokens": result.tokens,
    }
    if as_json:
        print_json(summary)
        return
    for src, prefix in result.prefixes.items():
        console.print(f"{src:12s} {prefix}.bin / .idx")
    console.print(f"{result.documents:,} documents, {result.tokens:,} tokens")


@app.command()
@guarded
def inspect(
    path: str = typer.Argument(..., help=DATASET_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the statistics as JSON."),
) -> None:
    """Show a dataset's identity and statistics."""
    info = open_backend(None, None).dataset_inspect(path)
    if as_json:
        print_json(info)
        return
    console.print(f"dataset [bold]{info['dataset_id']}[/] ({info['name']})")
    tok = info["tokenizer"]
    console.print(
        f"tokenizer {tok['sha256'][:16]}  vocab {tok['vocab_size']}  "
        f"eod {tok['eod_token']!r}={tok['eod_token_id']}"
    )
    table = Table("split", "source", "documents", "tokens", "chars/token", "shards", "bytes")
    for row in info["sources"]:
        table.add_row(
            row["split"],
            row["source"],
            f"{row['documents']:,}",
            f"{row['tokens']:,}",
            f"{row['chars_per_token']:.2f}",
            str(row["shards"]),
            f"{row['bytes']:,}",
        )
    console.print(table)
    drops = Table("source", "read", "filtered", "exact dup", "near dup", "quarantined")
    for source, read in info["records_read"].items():
        drops.add_row(
            source,
            f"{read:,}",
            ", ".join(f"{k}={v}" for k, v in info["filtered"].get(source, {}).items()) or "0",
            str(info["exact_duplicates"].get(source, 0)),
            str(info["near_duplicates"].get(source, 0)),
            str(info["quarantined"].get(source, 0)),
        )
    console.print(drops)
    split = info["split"]
    console.print(
        f"eval {split['eval_documents']} documents (fraction {split['eval_fraction']}); "
        f"{split['train_removed_as_eval_duplicates']} train documents removed as near "
        f"duplicates of eval; duplicate rate {info['duplicate_rate']:.2%}"
    )
    if info.get("profile"):
        _print_profile(info["profile"])


def _print_profile(profile: dict) -> None:
    """The build profile: languages per source, then rates and tokenizer anomalies."""
    langs = Table(
        "source", "language", "share", "documents", "tokens", "tokens/char", "filtered", "dup"
    )
    for source, p in profile["sources"].items():
        for lang, lp in p["languages"].items():
            langs.add_row(
                source,
                lang,
                f"{lp['share']:.1%}",
                f"{lp['documents']:,}",
                f"{lp['tokens']:,}",
                f"{lp['tokens_per_char']:.3f}",
                str(lp["filtered"] + lp["pii_dropped"] + lp["language_dropped"]),
                str(lp["exact_duplicates"] + lp["near_duplicates"]),
            )
    console.print(langs)
    anomalies = Table(
        "source", "filtered", "dup", "errors", "unk", "control", "binary", "empty/0-tok"
    )
    for source, p in profile["sources"].items():
        a = p["anomalies"]
        anomalies.add_row(
            source,
            f"{p['filter_rate']:.1%}",
            f"{p['duplicate_rate']:.1%}",
            f"{p['error_rate']:.1%}",
            f"{a['unknown_token_rate']:.1%}",
            f"{a['control_chars']:,}/{a['documents_with_control']:,}d",
            str(a["binary_documents"]),
            f"{a['empty_documents']}/{a['zero_token_documents']}",
        )
    console.print(anomalies)
    for source, p in profile["sources"].items():
        if p["pii"]:
            kinds = ", ".join(f"{k}={v}" for k, v in p["pii"].items())
            console.print(f"pii {source}: {kinds} in {p['pii_documents']} documents")
    if profile["language_identified"]:
        shares = ", ".join(f"{k} {v:.1%}" for k, v in profile["languages"].items())
        console.print(f"languages: {shares}")


@app.command()
@guarded
def verify(
    path: str = typer.Argument(..., help=DATASET_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the verdicts as JSON."),
) -> None:
    """Re-hash every shard against the manifest; exit status 1 names any that do not match."""
    from runwright.data.format.report import VerifyReport

    answer = open_backend(None, None).dataset_verify(path)
    report = VerifyReport.model_validate(answer)
    if as_json:
        print_json(answer)
    else:
        for shard in report.shards:
            mark = "[green]ok[/]" if shard.ok else "[red]CORRUPT[/]"
            console.print(f"{mark}  {shard.name}  {'; '.join(shard.problems)}")
        for problem in report.problems:
            console.print(f"[red]PROBLEM[/]  {problem}")
        console.print(
            f"tokenizer {'[green]ok[/]' if report.tokenizer_ok else '[red]MISMATCH[/]'}; "
            f"dataset {report.dataset_id[:16]}: "
            + (
                "[green]verified[/]"
                if report.ok
                else f"[red]{len(report.corrupt)} corrupt shards, {len(report.problems)} "
                "dataset problems[/]"
            )
        )
    if not report.ok:
        raise typer.Exit(code=1)


@app.command("list")
@guarded
def list_datasets(
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    as_json: bool = typer.Option(False, "--json", help="Print the list as JSON."),
) -> None:
    """List datasets: those under the root, or through --server those your project may read."""
    rows = open_backend(root, store).datasets()
    if as_json:
        print_json(rows)
        return
    for row in rows:
        present = "" if row["present"] else "  (its folder is missing)"
        console.print(f"{row['dataset_id']}  {row['name'] or '-'}{present}", highlight=False)
