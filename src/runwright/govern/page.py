"""report.html: the run charts of the dashboard's run page (the four signal layers of seed 004
and the state timeline on one time axis, with incidents, restores, checkpoints and interventions
marked), then the evidence chain as tables.

One self-contained file: plotly.js (from the installed `plotly` package, about 4.8 MB) and the
charts' script (govern/static/charts.js) are inlined, and the charts' data is a JSON block
built by the dashboard's own `chart_data`, so the report and the run page show the same numbers.
Nothing is fetched: the file reads the same from a laptop, an artifact store or an air-gapped
cluster. The tables are plain HTML and read without script.
"""

import json
import math
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from html import escape
from typing import TYPE_CHECKING, Any

from runwright.govern.charts import CHARTS_JS, inline_script, json_script, plotly_js
from runwright.govern.dashboard import chart_data
from runwright.govern.incidents import Incident
from runwright.govern.performance import performance_html
from runwright.observe.accounting import CATEGORIES
from runwright.observe.timeline import Timeline

if TYPE_CHECKING:
    from runwright.govern.report import RunReport

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #212529;
       margin: 24px 40px; background: #f8f9fa; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 26px 0 8px; }
.sub { color: #495057; margin-bottom: 14px; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 12px 0 18px; }
.card { background: #fff; border: 1px solid #dee2e6; border-radius: 6px; padding: 8px 12px;
        min-width: 120px; } .card b { display: block; font-size: 18px; }
.card span { color: #495057; font-size: 12px; }
.layer h3 { font-size: 15px; margin: 16px 0 4px; color: #343a40; }
.chart { background: #fff; border: 1px solid #dee2e6; border-radius: 6px; margin: 8px 0; }
.pair { display: grid; grid-template-columns: 1fr 1fr; gap: 8px; }
.marker-key span { margin-right: 16px; } .marker-key span::before { content: "";
  display: inline-block; width: 18px; border-top: 2px dotted currentColor;
  vertical-align: middle; margin-right: 5px; }
table { border-collapse: collapse; background: #fff; margin: 6px 0 10px; font-size: 13px; }
th, td { border: 1px solid #dee2e6; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f1f3f5; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
code, pre { font: 12px ui-monospace, SFMono-Regular, Menlo, monospace; }
pre { background: #fff; border: 1px solid #dee2e6; padding: 8px; overflow-x: auto; }
"""


def fmt(value: Any, digits: int = 4) -> str:
    """A value for a table cell: floats to `digits` significant figures, None as a dash."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if math.isfinite(value) else str(value)
    return str(value)


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def clock(unix_s: float | None) -> str:
    if unix_s is None:
        return "-"
    return datetime.fromtimestamp(unix_s, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    body = []
    for row in rows:
        cells = []
        for value in row:
            numeric = isinstance(value, int | float) and not isinstance(value, bool)
            cls = ' class="num"' if numeric else ""
            cells.append(f"<td{cls}>{escape(fmt(value))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    if not body:
        return '<p class="sub">none recorded</p>'
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def render_page(
    report: "RunReport", timeline: Timeline, events: Sequence[dict[str, Any]] = ()
) -> str:
    """The whole report.html; `events` are the run's log as the reader may see it (the charts
    read the loader's drift windows from it)."""
    run, fm, split = report.run, report.final_metrics, report.cost_split
    data = chart_data(
        report.model_dump(mode="json"), timeline, list(events), report.generated_unix_s
    )
    cards = [
        (
            "state",
            f"{run['state']}" + (f" ({run['terminal_reason']})" if run["terminal_reason"] else ""),
        ),
        ("ETTR", pct(fm.ettr)),
        ("loss tokens/s", fmt(fm.loss_tokens_per_second)),
        ("device tokens/s", fmt(fm.device_tokens_per_second)),
        ("input-wait share", pct(fm.input_wait_share)),
        ("checkpoint exposure", pct(fm.checkpoint_exposure)),
        ("MFU", pct(fm.mfu) if fm.mfu is not None else "-"),
        ("last loss", fmt(fm.last_loss)),
        ("steps", fmt(fm.last_step)),
        ("incidents", str(len(report.incidents))),
        ("cost", f"{fm.total_cost:.4g}"),
    ]
    card_html = "".join(
        f"<div class='card'><b>{escape(v)}</b><span>{escape(k)}</span></div>" for k, v in cards
    )
    verified = (
        "matches the stored spec" if report.spec_hash_verified else "does NOT match the stored spec"
    )
    sections = [
        f"<h1>Run report: {escape(run['name'])} <code>{escape(run['run_id'])}</code></h1>",
        f'<div class="sub">generated {escape(clock(report.generated_unix_s))}; run created '
        f"{escape(clock(run['created_unix_s']))}; charts on one time axis in UTC (drag to zoom "
        "every time chart, double-click to reset, hover for step, generation and value)</div>",
        f'<div class="cards">{card_html}</div>',
        '<section id="run-charts"><noscript><p class="sub">The charts need JavaScript (plotly.js '
        "is inside this file; nothing is fetched). The tables below read without it.</p>"
        "</noscript></section>",
        *_governance(report),
        "<h2>Cost split</h2>",
        table(
            ["category", "wall seconds", "device-seconds", "cost", "share of device time"],
            [
                (
                    c,
                    getattr(split.wall_seconds, c),
                    getattr(split.device_seconds, c),
                    getattr(split.cost, c),
                    pct(getattr(split.device_seconds, c) / split.device_seconds.total)
                    if split.device_seconds.total
                    else "-",
                )
                for c in CATEGORIES
            ]
            + [
                (
                    "total",
                    split.wall_seconds.total,
                    split.device_seconds.total,
                    split.cost.total,
                    "100%",
                )
            ],
        ),
        f'<p class="sub">device-hour price {split.device_hour_price:g}</p>',
        "<h2>Final metrics</h2>",
        table(["figure", "value"], _metric_rows(fm, report.data_quarantine)),
        *performance_html(report.performance),
        "<h2>Incidents</h2>",
        table(
            [
                "detected",
                "gen",
                "class",
                "rank",
                "last healthy step",
                "detection s",
                "restored step",
                "checkpoint",
                "lost steps",
                "replayed tokens",
                "recovery s",
                "to healthy s",
                "replay check",
                "message",
            ],
            [
                (
                    clock(i.detected_unix_s),
                    i.generation,
                    i.failure_class,
                    i.rank,
                    i.last_healthy_step,
                    i.detection_seconds,
                    i.restored_step,
                    i.restored_checkpoint_id,
                    i.lost_steps,
                    i.replayed_tokens,
                    i.recovery_seconds,
                    i.time_to_healthy_seconds,
                    f"{i.replay_check}: {i.replay_detail}" if i.replay_check else "",
                    " | ".join([i.message or "", *i.error_lines[-3:], *_diagnosis(i)]).strip(" |"),
                )
                for i in report.incidents
            ],
        ),
        "<h2>Membership changes (elastic)</h2>",
        table(
            ["time", "change", "generations", "step", "old layout", "new layout", "why"],
            [
                (
                    clock(m.time_unix_s),
                    m.change,
                    f"{m.from_generation} -> {m.to_generation}",
                    m.step,
                    m.layout_words("old"),
                    m.layout_words("new"),
                    m.reason,
                )
                for m in report.membership_changes
            ],
        ),
        "<h2>Interventions</h2>",
        table(
            ["time", "kind", "by", "gen", "step", "detail"],
            [
                (clock(i.time_unix_s), i.kind, i.actor or "", i.generation, i.step, i.detail)
                for i in report.interventions
            ],
        ),
        "<h2>Checkpoint lineage</h2>",
        table(
            [
                "checkpoint",
                "step",
                "gen",
                "status",
                "parent",
                "parent from",
                "stall s",
                "persist s",
                "bytes",
            ],
            [
                (
                    c.checkpoint_id,
                    c.step,
                    c.generation,
                    c.status,
                    c.parent,
                    c.parent_source,
                    c.stall_seconds,
                    c.persist_seconds,
                    c.bytes,
                )
                for c in report.checkpoint_lineage
            ],
        ),
        "<h2>Evidence chain</h2>",
        table(
            ["link", "value"],
            [
                ("code version", report.code.ref or f"unknown: {report.code.reason}"),
                ("code version from", report.code.source),
                ("entrypoint", report.code.entrypoint),
                ("spec hash", f"{report.spec_hash} ({verified})"),
                ("dataset id", report.dataset.dataset_id),
                ("dataset from", report.dataset.source),
                ("dataset name / path", f"{fmt(report.dataset.name)} / {fmt(report.dataset.path)}"),
                ("tokenizer hash", report.dataset.tokenizer_hash),
                *(("dataset standing", d.sentence()) for d in report.data_standing),
                ("python", report.environment.python_version),
                ("platform", report.environment.platform),
                (
                    "environment lock",
                    f"{fmt(report.environment.lock_file)} ({fmt(report.environment.lock_hash)})",
                ),
                ("versions captured from", report.environment.captured),
            ],
        ),
        table(["package", "version"], sorted(report.environment.packages.items())),
        "<h3>Mixture: targets vs actual</h3>",
        table(
            ["source", "target share", "actual count", "actual share", "deviation"],
            [
                (
                    m.source,
                    pct(m.target_share),
                    m.actual_count,
                    pct(m.actual_share),
                    pct(m.deviation),
                )
                for m in report.mixture
            ],
        ),
        "<h3>Loss by source and by document length (tokens)</h3>",
        table(
            ["by", "name", "steps", "loss tokens", "first loss", "last loss", "mean loss"],
            [
                (b.kind, b.name, b.steps, b.loss_tokens, b.first_loss, b.last_loss, b.mean_loss)
                for b in report.loss_breakdown
            ],
        ),
        "<h3>Data quarantine: shards left out as corrupt or missing</h3>",
        table(QUARANTINE_HEADERS, _quarantine_rows(report)),
        "<h3>Resolved plan</h3>",
        table(["value", "resolved", "reason"], _plan_rows(report.plan)),
        "<h3>Attempts</h3>",
        table(
            ["gen", "started", "ended", "world size", "exit code", "failure class"],
            [
                (
                    a["generation"],
                    clock(a["started_unix_s"]),
                    clock(a["ended_unix_s"]),
                    a["world_size"],
                    a["exit_code"],
                    a["failure_class"],
                )
                for a in report.attempts
            ],
        ),
        "<h3>State history</h3>",
        table(
            ["time", "gen", "from", "to", "reason"],
            [
                (
                    clock(h["time_unix_s"]),
                    h["generation"],
                    h["from_state"],
                    h["to_state"],
                    h["reason"],
                )
                for h in report.state_history
            ],
        ),
        "<details><summary>Spec as submitted</summary><pre>"
        + escape(json.dumps(report.spec, indent=2, sort_keys=True))
        + "</pre></details>",
    ]
    scripts = (
        json_script("run-charts-data", data)
        + f"<script>{inline_script(plotly_js())}</script>"
        + f"<script>{inline_script(CHARTS_JS)}</script>"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>runwright report {escape(run['run_id'])}</title><style>{CSS}</style></head>"
        f"<body>{''.join(sections)}{scripts}</body></html>\n"
    )


def _metric_rows(fm: Any, quarantine: Sequence[Any] = ()) -> list[tuple[str, Any]]:
    straggler = ", ".join(f"rank {r}: {s:.3f}" for r, s in fm.straggler_scores.items()) or "-"
    return [
        ("last loss", fm.last_loss),
        ("highest step", fm.last_step),
        ("distinct steps / executions", f"{fm.steps} / {fm.step_executions}"),
        (
            "accepted tokens device / loss / padded",
            f"{fm.device_tokens} / {fm.loss_tokens} / {fm.padded_tokens}",
        ),
        ("replayed device tokens", fm.replayed_tokens),
        ("tokens lost to quarantined shards", sum(q.tokens_lost for q in quarantine)),
        ("wall seconds", fm.wall_seconds),
        ("productive seconds", fm.productive_seconds),
        ("ETTR (productive / wall)", pct(fm.ettr)),
        ("loss tokens/s (end to end)", fm.loss_tokens_per_second),
        ("device tokens/s (end to end)", fm.device_tokens_per_second),
        ("input-wait share", pct(fm.input_wait_share)),
        ("checkpoint exposure (stall / productive)", pct(fm.checkpoint_exposure)),
        ("FLOPs per token (6N + 12LHQT)", fm.flops_per_token),
        ("MFU", pct(fm.mfu) if fm.mfu is not None else f"- ({fm.mfu_reason})"),
        ("straggler scores", straggler),
        ("total cost", fm.total_cost),
    ]


QUARANTINE_HEADERS = ("shard", "source", "reason", "from step", "gen", "documents lost",
                      "tokens lost", "what was wrong")  # fmt: skip


def _quarantine_rows(report: "RunReport") -> list[tuple[Any, ...]]:
    again = " (the last generation read it again)"
    return [
        (q.shard, q.source, q.reason, q.step, ", ".join(map(str, q.generations)),
         q.documents_lost, q.tokens_lost, "; ".join(q.problems) + ("" if q.in_final_lineage
         else again))
        for q in report.data_quarantine
    ]  # fmt: skip


def _plan_rows(plan: dict[str, Any]) -> list[tuple[str, Any, str]]:
    rows = []
    for name, derived in plan.items():
        if isinstance(derived, dict) and "reason" in derived:
            rows.append((name, derived.get("value"), str(derived["reason"])))
    rows.extend(("note", "", str(note)) for note in plan.get("notes", []))
    return rows


def _governance(report: "RunReport") -> list[str]:
    """Owner and hypothesis, the stop criteria with their outcome, the preflight checks, the
    releases."""
    g = report.governance
    if g is None:
        return []
    outcome = [
        (c.criterion, "evaluated" if c.evaluated else "words (not evaluated)",
         ("MET: " + (c.evidence or "")) if c.met else "not met")
        for c in g.stop_criteria
    ]  # fmt: skip
    verdict = {None: "not recorded", True: "passed", False: "FAILED"}[g.preflight_ok]
    return [
        "<h2>Governance</h2>",
        f'<p class="sub">owner {escape(g.owner)}; hypothesis: {escape(g.hypothesis or "-")}</p>',
        table(["stop criterion", "kind", "outcome"], outcome)
        if outcome
        else '<p class="sub">no stop criteria</p>',
        f'<p class="sub">preflight {verdict}</p>',
        table(
            ["check", "verdict", "evidence", "fix"],
            [
                (c.get("name"), c.get("verdict"), c.get("evidence"), c.get("fix"))
                for c in g.preflight
            ],
        ),
        table(
            ["release", "model", "checkpoint", "status", "failed gates", "decided by"],
            [
                (
                    r.release_id,
                    f"{r.name} v{r.version}",
                    f"{(r.checkpoint_id or '-')[:12]} @ {r.step}",
                    r.status,
                    ", ".join(r.failed) or "-",
                    r.decided_by or "-",
                )
                for r in g.releases
            ],
        )
        if g.releases
        else '<p class="sub">no releases (`runwright release create RUN`)</p>',
    ]


def _diagnosis(incident: Incident) -> list[str]:
    """An incident's escalation, skipped checkpoints and guard captures, in words."""
    words = [f"escalated: {incident.escalated}"] if incident.escalated else []
    words += [f"restore skipped {f}" for f in incident.restore_fallbacks]
    if incident.guard_captures:
        words.append(f"{len(incident.guard_captures)} guard capture(s) in diagnostics/")
    return words
