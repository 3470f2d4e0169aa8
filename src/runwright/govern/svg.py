"""A small SVG line-chart writer for the run report: no plotting library, no scripts, no fonts
to fetch; the page opens from a file in any browser.

Charts of one report share an x range (seconds since the run's first allocation), so the four
signal layers line up and a marker drawn at time t sits at the same x on every chart.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

WIDTH = 1160
HEIGHT = 230
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 72, 170, 30, 34
# Colours of the marker kinds, shared by every chart and the legend under the charts.
MARKER_COLOURS = {
    "checkpoint": "#2b8a3e",
    "incident": "#c92a2a",
    "restore": "#e67700",
    "intervention": "#862e9c",
}
PALETTE = ("#1c7ed6", "#f08c00", "#2f9e44", "#ae3ec9", "#e03131", "#0c8599", "#5c940d", "#495057")


@dataclass(frozen=True)
class Series:
    """One line: (x seconds, y) points; None ys break the line."""

    name: str
    points: Sequence[tuple[float, float | None]]
    colour: str = PALETTE[0]
    dashed: bool = False


@dataclass(frozen=True)
class VLine:
    """A vertical marker at x seconds."""

    x: float
    kind: str
    label: str


@dataclass(frozen=True)
class Chart:
    """One chart of the stack."""

    title: str
    y_label: str
    series: Sequence[Series]
    y_format: str = "{:.3g}"
    y_min_zero: bool = True
    note: str = ""
    extra_legend: Sequence[tuple[str, str]] = field(default_factory=tuple)
    empty_hint: str = ""
    """What a run must report for this chart to have data, written in it when it has none."""

    @property
    def empty(self) -> bool:
        return not any(y is not None for s in self.series for _, y in s.points)


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi]: steps of 1, 2 or 5 x 10^k (Heckbert, "Nice numbers
    for graph labels", Graphics Gems 1990)."""
    if not math.isfinite(lo) or not math.isfinite(hi):
        return [0.0]
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(count, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    first = math.floor(lo / step) * step
    ticks = []
    value = first
    while value <= hi + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    return ticks


def _y_range(chart: Chart) -> tuple[float, float]:
    ys = [y for s in chart.series for _, y in s.points if y is not None and math.isfinite(y)]
    if not ys:
        return 0.0, 1.0
    lo, hi = min(ys), max(ys)
    if chart.y_min_zero and lo >= 0:
        lo = 0.0
    if hi == lo:
        hi = lo + (abs(lo) * 0.1 or 1.0)
    pad = (hi - lo) * 0.05
    return (lo if chart.y_min_zero and lo == 0 else lo - pad), hi + pad


def render_chart(
    chart: Chart,
    x_range: tuple[float, float],
    markers: Sequence[VLine] = (),
    width: int = WIDTH,
    height: int = HEIGHT,
    label_markers: bool = False,
) -> str:
    """One `<svg>` element: axes, grid, ticks, the series, the markers (with their labels
    written along the line when `label_markers`) and a legend."""
    x0, x1 = x_range
    if x1 <= x0:
        x1 = x0 + 1.0
    y0, y1 = _y_range(chart)
    plot_w = width - MARGIN_LEFT - MARGIN_RIGHT
    plot_h = height - MARGIN_TOP - MARGIN_BOTTOM

    def px(x: float) -> float:
        return MARGIN_LEFT + (x - x0) / (x1 - x0) * plot_w

    def py(y: float) -> float:
        return MARGIN_TOP + plot_h - (y - y0) / (y1 - y0) * plot_h

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(chart.title)}">',
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
        f'<text x="{MARGIN_LEFT}" y="18" class="title">{escape(chart.title)}</text>',
    ]
    if chart.note:
        out.append(
            f'<text x="{width - MARGIN_RIGHT}" y="18" text-anchor="end" class="note">'
            f"{escape(chart.note)}</text>"
        )
    for tick in nice_ticks(y0, y1, 4):
        if y0 <= tick <= y1:
            y = py(tick)
            out.append(
                f'<line x1="{MARGIN_LEFT}" y1="{y:.1f}" x2="{MARGIN_LEFT + plot_w}" '
                f'y2="{y:.1f}" class="grid"/>'
                f'<text x="{MARGIN_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" class="tick">'
                f"{escape(chart.y_format.format(tick))}</text>"
            )
    for tick in nice_ticks(x0, x1, 8):
        if x0 <= tick <= x1:
            x = px(tick)
            out.append(
                f'<line x1="{x:.1f}" y1="{MARGIN_TOP + plot_h}" x2="{x:.1f}" '
                f'y2="{MARGIN_TOP + plot_h + 4}" class="axis"/>'
                f'<text x="{x:.1f}" y="{MARGIN_TOP + plot_h + 16}" text-anchor="middle" '
                f'class="tick">{tick:g} s</text>'
            )
    out.append(
        f'<rect x="{MARGIN_LEFT}" y="{MARGIN_TOP}" width="{plot_w}" height="{plot_h}" '
        'class="frame"/>'
        f'<text transform="translate(14 {MARGIN_TOP + plot_h / 2:.1f}) rotate(-90)" '
        f'text-anchor="middle" class="tick">{escape(chart.y_label)}</text>'
    )
    for marker in markers:
        if x0 <= marker.x <= x1:
            x = px(marker.x)
            colour = MARKER_COLOURS.get(marker.kind, "#868e96")
            out.append(
                f'<line x1="{x:.1f}" y1="{MARGIN_TOP}" x2="{x:.1f}" y2="{MARGIN_TOP + plot_h}" '
                f'stroke="{colour}" class="marker"><title>{escape(marker.label)}</title></line>'
            )
            if label_markers:
                out.append(
                    f'<text transform="translate({x + 3:.1f} {MARGIN_TOP + 4}) rotate(90)" '
                    f'fill="{colour}" class="tick">{escape(marker.label)}</text>'
                )
    for series in chart.series:
        out.extend(_polyline(series, px, py))
    if chart.empty:
        out.append(
            f'<text x="{MARGIN_LEFT + plot_w / 2:.1f}" y="{MARGIN_TOP + plot_h / 2:.1f}" '
            f'text-anchor="middle" class="note">no data: '
            f"{escape(chart.empty_hint or 'the run reported none')}</text>"
        )
    legend = [(s.name, s.colour) for s in chart.series] + list(chart.extra_legend)
    for i, (name, colour) in enumerate(legend):
        y = MARGIN_TOP + 8 + i * 16
        lx = MARGIN_LEFT + plot_w + 12
        out.append(
            f'<line x1="{lx}" y1="{y}" x2="{lx + 18}" y2="{y}" stroke="{colour}" '
            f'stroke-width="3"/><text x="{lx + 24}" y="{y + 4}" class="legend">'
            f"{escape(name)}</text>"
        )
    out.append("</svg>")
    return "\n".join(out)


def _polyline(series: Series, px, py) -> list[str]:  # type: ignore[no-untyped-def]
    runs: list[list[str]] = [[]]
    for x, y in series.points:
        if y is None or not math.isfinite(y):
            if runs[-1]:
                runs.append([])
            continue
        runs[-1].append(f"{px(x):.1f},{py(y):.1f}")
    dash = ' stroke-dasharray="5 3"' if series.dashed else ""
    parts = []
    for run in runs:
        if len(run) == 1:
            cx, cy = run[0].split(",")
            parts.append(f'<circle cx="{cx}" cy="{cy}" r="2.5" fill="{series.colour}"/>')
        elif run:
            parts.append(
                f'<polyline points="{" ".join(run)}" fill="none" stroke="{series.colour}" '
                f'stroke-width="1.8"{dash}/>'
            )
    return parts
