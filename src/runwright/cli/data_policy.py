"""`runwright data grant|policy|withdraw|delete`: who may use a dataset, and for what; taking
it out of use. Each change is audited by the server or the store (docs/data.md). These commands
are part of the `data` group (cli/data.py adds this app without a name)."""

from pathlib import Path

import typer

from runwright.cli.backend import open_backend
from runwright.cli.options import RootOption, StoreOption
from runwright.cli.render import console, guarded, print_json

app = typer.Typer()


@app.command()
@guarded
def grant(
    dataset_id: str = typer.Argument(..., help="Dataset id (64 hex digits), under the root."),
    project: str = typer.Option(..., "--project", help="The project that may read it."),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Let a project read a dataset through the server and name it in its specs (site admins;
    audited)."""
    result = open_backend(root, store).grant_dataset(project, dataset_id)
    if as_json:
        print_json(result)
        return
    console.print(f"project {project} may read dataset {dataset_id}")


def _listed(text: str | None) -> list[str] | None:
    """A comma-separated option: `any` clears the list (no restriction)."""
    if text is None or text.strip().lower() == "any":
        return None
    return [part.strip() for part in text.split(",") if part.strip()]


@app.command()
@guarded
def policy(
    dataset: str = typer.Argument(..., help="Dataset id, a prefix of one, or a folder."),
    licence: str | None = typer.Option(None, "--licence", help="Licence, an SPDX id."),
    purposes: str | None = typer.Option(
        None, "--purposes", help="Allowed purposes, comma-separated (`any`: no restriction)."
    ),
    regions: str | None = typer.Option(
        None, "--regions", help="Allowed regions, comma-separated (`any`: no restriction)."
    ),
    projects: str | None = typer.Option(
        None, "--projects", help="Allowed projects, comma-separated (`any`: no restriction)."
    ),
    expires_on: str | None = typer.Option(
        None, "--expires-on", help="Last day of use, YYYY-MM-DD (`never`: no expiry)."
    ),
    data_class: str | None = typer.Option(
        None, "--data-class", help="public, internal, confidential or restricted."
    ),
    owner: str | None = typer.Option(None, "--owner", help="Principal who may change it."),
    reason: str | None = typer.Option(None, "--reason", help="Why it changes (audited)."),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    as_json: bool = typer.Option(False, "--json", help="Print the policy as JSON."),
) -> None:
    """Show a dataset's use policy, or change it with the options given: a new version, audited,
    by its owner or a site admin. The dataset id does not change (docs/data.md)."""
    backend = open_backend(root, store)
    changes: dict[str, object] = {}
    for field, given in (
        ("licence", licence),
        ("data_class", data_class),
        ("owner", owner),
    ):
        if given is not None:
            changes[field] = given
    for field, given in (("purposes", purposes), ("regions", regions), ("projects", projects)):
        if given is not None:
            changes[field] = _listed(given)
    if expires_on is not None:
        changes["expires_on"] = None if expires_on.strip().lower() == "never" else expires_on
    if changes:
        backend.dataset_policy_set(dataset, changes, reason)
    shown = backend.dataset_policy(dataset)
    if as_json:
        print_json(shown)
        return
    current = shown["current"]
    console.print(
        f"dataset [bold]{current['dataset_id']}[/]  policy v{current['version']}  "
        f"{current['standing']}" + (f": {current['reason']}" if current["reason"] else ""),
        highlight=False,
    )
    for field, value in current["policy"].items():
        console.print(f"  {field:11s} {'any' if value is None else value}", highlight=False)
    console.print(f"  changed by  {shown['who_can_change']}", highlight=False)


@app.command()
@guarded
def withdraw(
    dataset: str = typer.Argument(..., help="Dataset id, a prefix of one, or a folder."),
    reason: str = typer.Option(..., "--reason", help="Why it is withdrawn (audited)."),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Withdraw a dataset: new runs on it are refused, running ones alerted (and stopped with a
    save unless their spec says `usage.on_withdrawal: continue`), releases of checkpoints that
    consumed it refused. Lists every run, checkpoint and release it reaches."""
    result = open_backend(root, store).dataset_withdraw(dataset, reason)
    if as_json:
        print_json(result)
        return
    version = result["policy"]
    console.print(
        f"dataset {version['dataset_id']} {version['standing']} (policy v{version['version']}) "
        f"by {version['changed_by']}: {version['reason']}",
        highlight=False,
    )
    for run in result["lineage"]["runs"]:
        console.print(f"  run {run['run_id']} ({run['state']})", highlight=False)
        for ckpt in run["checkpoints"]:
            console.print(f"    checkpoint {ckpt['checkpoint_id']} step {ckpt['step']}")
        for rel in run["releases"]:
            console.print(f"    release {rel['name']} v{rel['version']} ({rel['status']})")
    if not result["lineage"]["runs"]:
        console.print("  no run has trained on it")


@app.command()
@guarded
def delete(
    dataset: str = typer.Argument(..., help="Dataset id, a prefix of one, or a folder."),
    reason: str = typer.Option(..., "--reason", help="Why it is deleted (kept in the tombstone)."),
    cache: list[Path] = typer.Option(
        [], "--cache", help="Another data cache folder whose copy to remove (repeatable)."
    ),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Delete a dataset: its folder and cached copies are removed, a tombstone (who, when, why)
    stays, and past runs' reports say the data was deleted."""
    result = open_backend(root, store).dataset_delete(dataset, reason, cache)
    if as_json:
        print_json(result)
        return
    stone = result["tombstone"]
    console.print(
        f"dataset {stone['dataset_id']} deleted by {stone['changed_by']}: {stone['reason']}",
        highlight=False,
    )
    for path in result["removed"]:
        console.print(f"  removed {path}", highlight=False)
