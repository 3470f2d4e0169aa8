"""The dashboard's HTML: every value from a run, a spec or the token's principal goes through
`html.escape`, so a run name or an event's text can never become markup. The run page and the
compare view are shells whose script (static/dashboard.js) fetches their data and draws it with
DOM text nodes and plotly.js (the run charts by govern/static/charts.js, which report.html draws
too); the lists are rendered here."""

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from html import escape
from typing import Any
from urllib.parse import quote, urlencode

from runwright.access.roles import Actor
from runwright.store import RunRecord

STATES = ("QUEUED", "ALLOCATING", "STARTING", "RUNNING", "CHECKPOINTING", "RECOVERING", "PAUSED",
          "SUCCEEDED", "FAILED", "CANCELLED")  # fmt: skip
"""The states offered by the runs page's filter (ARCHITECTURE.md, run state machine)."""


def _clock(unix_s: float | None) -> str:
    if unix_s is None:
        return "-"
    return datetime.fromtimestamp(unix_s, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def _cell(value: Any) -> str:
    return escape("-" if value is None or value == "" else str(value))


def _table(headers: Sequence[str], rows: Iterable[Sequence[str]], cls: str = "") -> str:
    """`rows` are cells already escaped (some hold links)."""
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    if not body:
        return '<p class="muted">none</p>'
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _run_link(run_id: str, text: str | None = None) -> str:
    return f'<a href="/ui/runs/{quote(run_id)}">{escape(text or run_id)}</a>'


def layout(title: str, body: str, actor: Actor | None = None, scripts: bool = False) -> str:
    who = ""
    if actor is not None:
        role = actor.role.label if actor.role else "no role"
        who = (
            f'<span class="who">{escape(actor.name)} &middot; project '
            f"{escape(actor.project or 'all')} &middot; {escape(role)}</span>"
            '<form method="post" action="/ui/logout" class="inline">'
            '<button type="submit">log out</button></form>'
        )
    nav = (
        '<nav><a class="brand" href="/ui/runs">runwright</a><a href="/ui/runs">runs</a>'
        f'<a href="/ui/queue">queue</a>{who}</nav>'
    )
    js = (
        '<script src="/ui/static/plotly.min.js"></script>'
        '<script src="/ui/static/charts.js"></script>'
        '<script src="/ui/static/dashboard.js"></script>'
        if scripts
        else ""
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)} - runwright</title>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="stylesheet" href="/ui/static/dashboard.css">'
        f'</head><body>{nav}<main><p id="problem" class="error"></p>{body}</main>{js}'
        "</body></html>"
    )


def login(next_path: str, error: str | None = None) -> str:
    problem = f'<p class="error">{escape(error)}</p>' if error else ""
    body = (
        "<h1>Log in</h1>"
        "<p>Paste an API token (<code>runwright token create</code>). The dashboard shows what "
        "the token's role may see of its project.</p>"
        f'{problem}<form method="post" action="/ui/login" class="login">'
        f'<input type="hidden" name="next" value="{escape(next_path)}">'
        '<input type="password" name="token" id="token" autocomplete="off" '
        'placeholder="rwt_..." required autofocus>'
        '<button type="submit" id="login">log in</button></form>'
    )
    return layout("log in", body)


def problem(message: str) -> str:
    return layout("not shown", f'<h1>Not shown</h1><p class="error">{escape(message)}</p>')


def runs(actor: Actor, rows: list[dict[str, Any]], filters: dict[str, str | None]) -> str:
    options = "".join(
        f'<option value="{s}"{" selected" if filters.get("state") == s else ""}>{s}</option>'
        for s in STATES
    )

    def field(name: str, hint: str) -> str:
        value = escape(filters.get(name) or "")
        return f'<input name="{name}" placeholder="{hint}" value="{value}">'

    form = (
        '<form method="get" action="/ui/runs" class="filters">'
        f'<select name="state"><option value="">any state</option>{options}</select>'
        f"{field('owner', 'owner or submitter')}{field('tag', 'tag or key=value')}"
        f"{field('name', 'name or id contains')}"
        '<button type="submit">filter</button></form>'
    )
    table_rows = [
        [
            f'<input type="checkbox" name="run" value="{escape(r["run_id"])}">',
            _run_link(r["run_id"], r["run_id"][:24]),
            _cell(r["name"]),
            f'<span class="state s-{escape(r["state"])}">{escape(r["state"])}</span>',
            _cell(f"{r['last_step'] if r['last_step'] is not None else '-'} / {r['steps']}"),
            _cell(r["owner"]),
            _cell(r["submitted_by"]),
            _cell(", ".join(f"{k}={v}" for k, v in sorted(r["tags"].items()))),
            _cell(_clock(r["created_unix_s"])),
            _cell(r["terminal_reason"] or r["state_detail"]),
        ]
        for r in rows
    ]
    headers = ["", "run", "name", "state", "step", "owner", "submitted by", "tags",
               "created (UTC)", "detail"]  # fmt: skip
    listing = _table(headers, table_rows, "runs")
    body = (
        f"<h1>Runs</h1>{form}"
        '<form method="get" action="/ui/compare" id="compare-form">'
        f"{listing}"
        '<button type="submit" id="compare">compare selected</button></form>'
    )
    return layout("runs", body, actor)


def queue(actor: Actor, rows: list[dict[str, Any]]) -> str:
    table_rows = [
        [
            _run_link(r["run_id"], r["run_id"][:24]),
            _cell(r["name"]),
            _cell(r["state"]),
            _cell(r["pool"]),
            _cell(r["priority"]),
            _cell(f"{r['nodes']} x {r['devices_per_node']}"),
            _cell(r["submitted_by"]),
            _cell(_clock(r["created_unix_s"])),
            _cell(r["waiting_for"]),
        ]
        for r in rows
    ]
    headers = ["run", "name", "state", "pool", "priority", "shape", "submitted by",
               "queued (UTC)", "waiting for"]  # fmt: skip
    body = "<h1>Queue</h1><p>Unfinished runs, oldest first.</p>" + _table(headers, table_rows)
    return layout("queue", body, actor)


def run(actor: Actor, record: RunRecord) -> str:
    """The run page's shell; dashboard.js fills it from /ui/api/runs/{id} while the run
    trains."""
    compare = "/ui/compare?" + urlencode({"run": record.run_id})
    body = (
        f'<div id="run-page" data-run="{escape(record.run_id)}">'
        f"<h1>{escape(record.name)} <small>{escape(record.run_id)}</small></h1>"
        '<p class="sub"><span id="state" class="state"></span> <span id="summary"></span> '
        '<span id="updated" class="muted"></span> '
        f'<a href="{escape(compare)}">compare with...</a></p>'
        '<div id="cards" class="cards"></div>'
        '<section><h2>Open alerts</h2><div id="alerts"></div></section>'
        '<section id="run-charts" class="charts"></section>'
        '<section><h2>Checkpoints</h2><div id="checkpoints"></div></section>'
        "<section><h2>Nodes <small>(newest system sample)</small></h2>"
        '<div id="system"></div></section>'
        '<section><h2>Incidents</h2><div id="incidents"></div></section>'
        "<details><summary>Events <small>(the newest 200, newest last)</small></summary>"
        '<div id="events"></div></details>'
        "</div>"
    )
    return layout(record.name, body, actor, scripts=True)


def compare(actor: Actor, run_ids: list[str]) -> str:
    """The compare view's shell; with fewer than two runs, a form asking for them."""
    picked = "".join(
        f'<input type="hidden" name="run" value="{escape(r)}"><code>{escape(r)}</code> '
        for r in run_ids
    )
    add = (
        f'<form method="get" action="/ui/compare" class="filters">{picked}'
        '<input name="run" placeholder="another run id" required>'
        '<button type="submit">add run</button></form>'
    )
    if len(run_ids) < 2:
        return layout("compare", f"<h1>Compare runs</h1>{add}", actor)
    data = escape(",".join(run_ids))
    body = (
        f'<div id="compare-page" data-runs="{data}"><h1>Compare runs</h1>{add}'
        '<p>x axis: <label><input type="radio" name="axis" value="step" checked> step</label> '
        '<label><input type="radio" name="axis" value="tokens"> tokens</label></p>'
        '<div id="compare-cards"></div>'
        '<div id="chart-compare-loss" class="chart"></div>'
        '<div id="chart-compare-tokens" class="chart"></div>'
        '<section><h2>Spec differences</h2><div id="spec-diff"></div></section></div>'
    )
    return layout("compare", body, actor, scripts=True)
