"""`runwright token|project|audit`: API tokens, projects and roles, and the audit log.

Each works on the store itself (as `local:<os user>`, which may do anything there: that is how a
fresh deployment gets its first admin) or, with --server, through the API as the token's
principal."""

import time
from pathlib import Path

import typer
from rich.table import Table

from runwright.cli.backend import open_backend, server_url
from runwright.cli.options import JsonOption, RootOption, StoreOption
from runwright.cli.render import console, guarded, print_json, print_unclipped
from runwright.errors import RunwrightError

app = typer.Typer()
token_app = typer.Typer(help="Make, list, save and revoke API tokens.", no_args_is_help=True)
project_app = typer.Typer(
    help="Create projects and grant or remove roles in them.", no_args_is_help=True
)
app.add_typer(token_app, name="token")
app.add_typer(project_app, name="project")

ROLE_HELP = "viewer, submitter, operator or admin (each may do what the ones before it may)."


def _when(unix_s: float | None) -> str:
    return "" if unix_s is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(unix_s))


# -- tokens ------------------------------------------------------------------------------------


@token_app.command("create")
@guarded
def token_create(
    principal: str | None = typer.Option(
        None, "--principal", help="Whose token (default: your own)."
    ),
    project: str | None = typer.Option(
        None, "--project", help="The one project it acts in (default: your token's)."
    ),
    days: float = typer.Option(90.0, "--days", help="Days until it expires (at most 366)."),
    role: str | None = typer.Option(None, "--role", help="At most this role. " + ROLE_HELP),
    label: str | None = typer.Option(None, "--label", help="Free text to tell tokens apart."),
    admin: bool = typer.Option(
        False,
        "--admin",
        help="Bootstrap: make PRINCIPAL a site admin and admin of PROJECT (both made if new) "
        "and give it a token. Only on the store itself (no --server).",
    ),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Make an API token. It is printed once: the store keeps only its hash."""
    be = open_backend(root, store)
    if admin:
        if principal is None:
            raise RunwrightError("--admin needs --principal NAME: the first admin's name")
        made = be.bootstrap_admin(principal, project or "default", days, label)
    else:
        made = be.create_token(principal, project, days=days, role_cap=role, label=label)
    if json_out:
        print_json(made)
        return
    console.print(f"token {made['token_id']} for {made['principal']} in project {made['project']}"
                  f", expires {_when(made['expires_unix_s'])}")  # fmt: skip
    console.print("keep it now, it is not shown again:", highlight=False)
    console.print(made["token"], highlight=False, soft_wrap=True)


@token_app.command("list")
@guarded
def token_list(
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """List tokens (yours; a project admin's: the project's; a site admin's: all). Never a
    secret: the store does not have them."""
    tokens = open_backend(root, store).list_tokens()
    if json_out:
        print_json(tokens)
        return
    table = Table(title="API tokens")
    for col in ("id", "principal", "project", "role cap", "label", "expires", "state"):
        table.add_column(col, no_wrap=True)
    for t in tokens:
        state = "revoked" if t["revoked_unix_s"] else ("usable" if t["usable"] else "expired")
        table.add_row(
            t["token_id"],
            t["principal"],
            t["project"],
            t["role_cap"] or "",
            t["label"] or "",
            _when(t["expires_unix_s"]),
            state,
        )
    print_unclipped(table)


@token_app.command("revoke")
@guarded
def token_revoke(
    token_id: str = typer.Argument(..., help="The token's id (`token list`), not the token."),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Revoke a token: it stops working at once."""
    revoked = open_backend(root, store).revoke_token(token_id)
    if json_out:
        print_json(revoked)
        return
    console.print(f"token {revoked['token_id']} of {revoked['principal']} revoked")


@token_app.command("save")
@guarded
def token_save(
    token: str = typer.Argument(..., help="The token `token create` printed."),
) -> None:
    """Save a token for --server's URL in ~/.config/runwright/credentials (mode 0600), so the
    remote commands find it without $RUNWRIGHT_TOKEN."""
    from runwright.cli.api_token import save_token
    from runwright.cli.remote import RemoteBackend

    url = server_url()
    if url is None:
        raise RunwrightError("token save needs --server URL (or $RUNWRIGHT_SERVER): whose token")
    who = RemoteBackend(url, token).whoami()  # refuse a token the server does not take
    path = save_token(url, token)
    console.print(f"saved the token of {who['name']} ({who['project']}) for {url} in {path}")


# -- projects and roles ------------------------------------------------------------------------


@project_app.command("create")
@guarded
def project_create(
    name: str = typer.Argument(..., help="Project name (lower-case letters, digits, . _ -)."),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Create a project (site admins)."""
    made = open_backend(root, store).create_project(name)
    print_json(made) if json_out else console.print(f"project {name} created")


@project_app.command("list")
@guarded
def project_list(
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """List projects (a site admin: all; anyone else: their token's)."""
    names = open_backend(root, store).projects()
    print_json(names) if json_out else console.print("\n".join(names), highlight=False)


@project_app.command("grant")
@guarded
def project_grant(
    project: str = typer.Argument(..., help="Project."),
    principal: str = typer.Argument(..., help="User or service account (made if new)."),
    role: str = typer.Argument(..., help=ROLE_HELP),
    service: bool = typer.Option(
        False, "--service-account", help="A new principal is a service account, not a user."
    ),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Grant a role in a project (project admins; audited). Takes effect at once, also for
    tokens already made."""
    kind = "service" if service else "user"
    done = open_backend(root, store).set_role(project, principal, role, kind)
    if json_out:
        print_json(done)
        return
    console.print(f"{principal} is {done['role']} in {project}")


@project_app.command("revoke")
@guarded
def project_revoke(
    project: str = typer.Argument(..., help="Project."),
    principal: str = typer.Argument(..., help="User or service account."),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Remove a principal from a project (project admins; audited): its tokens there stop
    working at once."""
    done = open_backend(root, store).set_role(project, principal, None)
    print_json(done) if json_out else console.print(f"{principal} removed from {project}")


@project_app.command("members")
@guarded
def project_members(
    project: str = typer.Argument(..., help="Project."),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """List a project's members and their roles."""
    rows = open_backend(root, store).members(project)
    if json_out:
        print_json(rows)
        return
    for m in rows:
        console.print(
            f"{m['principal']:24s} {m['role']:10s} granted by {m['granted_by']} "
            f"{_when(m['granted_unix_s'])}",
            highlight=False,
        )


# -- audit ---------------------------------------------------------------------------------------


@app.command()
@guarded
def audit(
    project: str | None = typer.Option(None, "--project", help="Only this project."),
    actor: str | None = typer.Option(None, "--actor", help="Only this actor."),
    action: str | None = typer.Option(
        None, "--action", help="Only this action (run.submit, run.cancel, token.create, ...)."
    ),
    target: str | None = typer.Option(None, "--target", help="Only this target (a run id, ...)."),
    since_hours: float | None = typer.Option(
        None, "--since-hours", min=0.0, help="Only the last this many hours."
    ),
    limit: int = typer.Option(1000, "--limit", min=1, max=10_000, help="At most this many."),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Show the audit log: who did what, through the API or a CLI, and how it went.

    Site admins see all of it; a project's operators and admins the project's."""
    since = time.time() - since_hours * 3600 if since_hours is not None else None
    rows = open_backend(root, store).audit_entries(
        project=project,
        actor=actor,
        action=action,
        target=target,
        since_unix_s=since,
        limit=limit,
    )
    if json_out:
        print_json(rows)
        return
    table = Table(title="audit log")
    for col in ("time", "actor", "via", "project", "action", "target", "outcome", "detail"):
        table.add_column(col, no_wrap=col != "detail")
    for r in rows:
        table.add_row(
            _when(r["time_unix_s"]),
            r["actor"],
            r["via"],
            r["project"] or "",
            r["action"],
            r["target"] or "",
            r["outcome"],
            r["detail"] or "",
        )
    print_unclipped(table)
