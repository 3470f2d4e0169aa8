"""ladder.html: the ladder as one page. A table of the rungs (shape, runs, E(N), largest loss
difference, verdict), each rung's gates with their evidence, and the rungs' loss curves drawn on
one chart as inline SVG, so the page needs no script and fetches nothing."""

from html import escape
from typing import TYPE_CHECKING

from runwright.govern.page import CSS, fmt, table
from runwright.ladder.gates import RungResult

if TYPE_CHECKING:
    from runwright.ladder.runner import LadderReport

EXTRA_CSS = """
.ok { color: #2b8a3e; font-weight: 600; } .bad { color: #c92a2a; font-weight: 600; }
.rung { background: #fff; border: 1px solid #dee2e6; border-radius: 6px; padding: 8px 14px;
        margin: 14px 0; } .rung h3 { margin: 4px 0 6px; font-size: 16px; }
svg.curves { background: #fff; border: 1px solid #dee2e6; }
"""
COLOURS = ("#1c7ed6", "#e8590c", "#2b8a3e", "#ae3ec9", "#f08c00", "#0b7285")
WIDTH, HEIGHT, PAD = 720, 300, 40
HEADERS = ("rung", "name", "nodes x ranks", "world size", "run", "reshard run", "tokens/s",
           "E(N)", "max loss diff", "verdict")  # fmt: skip


def _curves(results: list[RungResult]) -> str:
    """One polyline per rung: loss against step, on shared axes."""
    points = [(s, v) for r in results for s, v in r.measure.losses.items()]
    if not points:
        return '<p class="sub">no losses reported</p>'
    s0, s1 = min(p[0] for p in points), max(p[0] for p in points)
    v0, v1 = min(p[1] for p in points), max(p[1] for p in points)

    def x(step: int) -> float:
        return PAD + (step - s0) / max(s1 - s0, 1) * (WIDTH - 2 * PAD)

    def y(value: float) -> float:
        return HEIGHT - PAD - (value - v0) / max(v1 - v0, 1e-12) * (HEIGHT - 2 * PAD)

    parts = [
        f'<svg class="curves" width="{WIDTH}" height="{HEIGHT}" role="img" '
        'aria-label="loss by step, one line per rung">',
        f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" '
        'stroke="#495057"/>',
        f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{HEIGHT - PAD}" stroke="#495057"/>',
        f'<text x="{PAD}" y="{HEIGHT - 12}" font-size="11">step {s0}</text>',
        f'<text x="{WIDTH - PAD - 50}" y="{HEIGHT - 12}" font-size="11">step {s1}</text>',
        f'<text x="4" y="{PAD - 8}" font-size="11">loss {v1:.4f}</text>',
        f'<text x="4" y="{HEIGHT - PAD + 14}" font-size="11">{v0:.4f}</text>',
    ]
    for i, r in enumerate(results):
        colour = COLOURS[i % len(COLOURS)]
        xy = " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in sorted(r.measure.losses.items()))
        parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="{4 - min(i, 2)}" '
            f'points="{xy}"/>'
        )
        parts.append(
            f'<text x="{WIDTH - PAD - 150}" y="{PAD + 14 * i}" font-size="12" fill="{colour}">'
            f"rung {r.rung.index}: {escape(r.rung.name)}</text>"
        )
    return "".join(parts) + "</svg>"


def _rung_section(r: RungResult) -> str:
    cls = "ok" if r.passed else "bad"
    rows = [(g.name, "passed" if g.passed else "FAILED", g.evidence) for g in r.gates]
    return (
        f'<div class="rung"><h3>rung {r.rung.index}: {escape(r.rung.name)} '
        f'<span class="{cls}">{"passed" if r.passed else "FAILED"}</span></h3>'
        f"{table(['gate', 'verdict', 'evidence'], rows)}</div>"
    )


def render_page(report: "LadderReport") -> str:
    climbed = {r.rung.index: r for r in report.results}
    rows = []
    for rung in report.rungs:
        r = climbed.get(rung.index)
        m = r.measure if r else None
        rows.append(
            (
                rung.index,
                rung.name,
                f"{rung.nodes} x {rung.devices_per_node}",
                rung.world_size,
                m.run_id if m else "not run",
                (m.carry_run_id or "-") if m else "-",
                fmt(m.tokens_per_second, 1) if m else "-",
                fmt(r.efficiency, 3) if r else "-",
                fmt(r.max_loss_difference, 3) if r else "-",
                ("passed" if r.passed else "FAILED") if r else "not climbed",
            )
        )
    verdict = (
        '<span class="ok">every rung passed</span>'
        if report.ok
        else f'<span class="bad">stopped: {escape(report.stopped or "")}</span>'
    )
    s = report.settings
    sections = [
        f"<h1>Scale-up ladder <code>{escape(report.ladder_id)}</code></h1>",
        f'<div class="sub">spec {escape(report.spec_name)} <code>{report.spec_hash[:16]}</code>; '
        f"{len(report.results)} of {len(report.rungs)} rung(s) in {report.wall_seconds:.0f} s: "
        f"{verdict}</div>",
        '<p class="sub">'
        f"loss tolerance {s.loss_tolerance:g} (relative, per step); minimum E(N) "
        f"{s.min_efficiency:g}; the reshard run trains {s.carry_steps} step(s) past the "
        "restored checkpoint. E(N) = (throughput(N) / N) / (throughput(1) / 1).</p>",
        "<h2>Rungs</h2>",
        table(HEADERS, rows),
        "<h2>Loss by step</h2>",
        _curves(report.results),
        "<h2>Gates</h2>",
        *(_rung_section(r) for r in report.results),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>runwright ladder {escape(report.ladder_id)}</title>"
        f"<style>{CSS}{EXTRA_CSS}</style></head>"
        f"<body>{''.join(sections)}</body></html>\n"
    )
