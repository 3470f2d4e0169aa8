"""drill.html: the fault matrix as one table, then one timeline per fault.

The table has a row per fault: where it was injected, how long until the platform noticed, the
class and the action, RPO (lost steps and seconds), RTO, the final state, bitwise equality with
the reference, the replay check, and whether it ended as expected. Each fault's timeline plots
rank 0's healthy steps by generation against seconds since the run was submitted, with the run's
states as bands and the injection, detection, restore and first step past it as lines
(drill/static/drill.js); its events are also listed as a table, so the page reads without
script. One self-contained file like report.html: plotly.js and the script are inlined
(govern/charts.py), nothing is fetched.
"""

from datetime import UTC, datetime
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

from runwright.drill.outcome import FaultResult
from runwright.govern.charts import inline_script, json_script, plotly_js
from runwright.govern.page import CSS, fmt, table

if TYPE_CHECKING:
    from runwright.drill.runner import DrillReport

DRILL_JS = Path(__file__).parent / "static" / "drill.js"

EXTRA_CSS = """
.ok { color: #2b8a3e; font-weight: 600; } .bad { color: #c92a2a; font-weight: 600; }
.fault { background: #fff; border: 1px solid #dee2e6; border-radius: 6px; padding: 8px 14px;
         margin: 14px 0; } .fault h3 { margin: 4px 0 6px; font-size: 16px; }
.timeline { height: 320px; }
"""


def _clock(unix_s: float | None) -> str:
    if unix_s is None:
        return "-"
    return datetime.fromtimestamp(unix_s, tz=UTC).strftime("%H:%M:%S UTC")


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _verdict(result: FaultResult) -> str:
    return "as expected" if result.ok else "NOT as expected"


def _expected(result: FaultResult) -> str:
    e = result.expected
    state = e.state + (f" ({e.terminal_reason})" if e.terminal_reason else "")
    bitwise = "bitwise" if e.bitwise else "not bitwise"
    fallback = ", a restore fallback" if e.fallback else ""
    return f"{state}, {e.failure_class or 'no failure'}, {e.action}, {bitwise}{fallback}"


def _summary_rows(results: list[FaultResult]) -> list[tuple[object, ...]]:
    return [
        (
            r.fault,
            (f"step {r.injected_step}" if r.injected_step is not None else "launch")
            + f" at {_clock(r.injected_unix_s)}",
            _seconds(r.detected_seconds),
            r.failure_class or "-",
            r.action or "-",
            fmt(r.restored_step),
            fmt(r.lost_steps),
            _seconds(r.lost_seconds),
            "-" if r.tokens_lost is None else f"{r.tokens_lost:,}",
            _seconds(r.rto_seconds),
            r.final_state + (f" ({r.terminal_reason})" if r.terminal_reason else ""),
            r.bitwise,
            r.replay_check or "-",
            _expected(r),
            _verdict(r),
        )
        for r in results
    ]


def _replay(result: FaultResult) -> str:
    return f"{result.replay_check}: {result.replay_detail}" if result.replay_check else "-"


def _bitwise(result: FaultResult) -> str:
    difference = result.first_difference
    return result.bitwise + (f" (first difference: {difference})" if difference else "")


def _fault_section(index: int, result: FaultResult) -> str:
    cls = "ok" if result.ok else "bad"
    facts = [
        ("run", result.run_id),
        ("mechanism", result.mechanism),
        ("spec change", result.spec_change or "none: the drill's spec"),
        ("injection", result.injection or "-"),
        ("classified", result.failure_message or "-"),
        ("restore fallback", result.fallback or "-"),
        ("data lost", result.data_lost or "-"),
        ("replay check", _replay(result)),
        ("bitwise", _bitwise(result)),
        ("afterwards", result.cleanup or "-"),
        ("wall seconds", _seconds(result.wall_seconds)),
        ("differences from expected", "; ".join(result.mismatches) or "none"),
    ]
    marks = table(
        ["s since submit", "kind", "what"],
        [(round(m.seconds, 2), m.kind, m.label) for m in result.marks],
    )
    return (
        f'<div class="fault"><h3>{escape(result.fault)}: <span class="{cls}">'
        f"{escape(_verdict(result))}</span></h3>"
        f"{table(['what', 'value'], facts)}"
        f'<div class="chart timeline" id="timeline-{index}"></div>'
        f"<details><summary>events ({len(result.marks)})</summary>{marks}</details></div>"
    )


def render_page(report: "DrillReport") -> str:
    passed = sum(r.ok for r in report.faults)
    verdict = (
        '<span class="ok">every fault ended as expected</span>'
        if report.ok
        else f'<span class="bad">{len(report.faults) - passed} fault(s) did NOT end as '
        "expected</span>"
    )
    headers = [
        "fault",
        "injected",
        "detected s",
        "class",
        "action",
        "restored step",
        "lost steps",
        "lost s",
        "data lost tokens",
        "RTO s",
        "final state",
        "bitwise",
        "replay check",
        "expected",
        "verdict",
    ]
    data = {
        "faults": [
            {
                "name": r.fault,
                "ok": r.ok,
                "marks": [m.model_dump() for m in r.marks],
                "steps": [s.model_dump() for s in r.steps],
            }
            for r in report.faults
        ]
    }
    sections = [
        f"<h1>Fault drill <code>{escape(report.drill_id)}</code></h1>",
        f'<div class="sub">spec {escape(report.spec_name)} <code>{report.spec_hash[:16]}</code>; '
        f"reference run <code>{escape(report.reference_run_id)}</code> "
        f"({report.reference_wall_seconds:.0f} s); {len(report.faults)} fault(s) in "
        f"{report.wall_seconds:.0f} s: {verdict}</div>",
        "<h2>Faults</h2>",
        table(headers, _summary_rows(report.faults)),
        '<p class="sub">detected: the injection to the first event that shows the platform '
        "noticed; lost steps and lost s: the recovery point (steps trained after the restored "
        "checkpoint, and their training time); data lost tokens: the tokens of the documents a "
        "quarantined shard made the run skip (data.on_corrupt_shard: skip); RTO: the "
        "injection to the first healthy step "
        "past the restored one; bitwise: the run's final parameters, sample ledger and losses "
        "against the reference's.</p>",
        "<h2>Timelines</h2>",
        '<p class="sub">rank 0\'s healthy steps by generation against seconds since the run was '
        "submitted; bands are the run's states; lines mark the injection, the detection, the "
        "restore and the first step past it (hover for every event).</p>",
        *(_fault_section(i, r) for i, r in enumerate(report.faults)),
    ]
    scripts = (
        json_script("drill-data", data)
        + f"<script>{inline_script(plotly_js())}</script>"
        + f"<script>{inline_script(DRILL_JS)}</script>"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>runwright drill {escape(report.drill_id)}</title>"
        f"<style>{CSS}{EXTRA_CSS}</style></head>"
        f"<body>{''.join(sections)}{scripts}</body></html>\n"
    )
