"""Inline SVG for the report's plots: no scripts, no external files, every text escaped.

`render_svg(plot)` draws a plot that has data: axes with ticks and unit labels, grid, one path
per stretch of a line series (or one bar per series and category). Data marks carry the class
`mark` and a `<title>` tooltip. Colours: one per run (Okabe–Ito, readable for colour-blind
readers); the client series is thin, the engine series thick.
"""

from __future__ import annotations

import math

from decodescope.markup import html as escape
from decodescope.report.plotdata import Plot, Series

PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
WIDTH, HEIGHT = 900, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 18, 12, 46  # margins around the plot area, px
SNAP_TO_ZERO = 0.1  # an x range starting this little below 0 (share of the range) starts at 0
Y_HEADROOM = 1.08  # the highest value sits below the top of the axis
MARKERS_UP_TO = 40  # points of a line series drawn as dots too (with tooltips)
BAR_LABELS_UP_TO = 24  # bars (categories × series) printed with their value on top
STYLE = {  # role -> (stroke width, opacity)
    "client": (1.6, 0.75),
    "engine": (2.8, 1.0),
}


def colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def nice_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    """Round tick values (1-2-5 steps) covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / target
    exp = math.floor(math.log10(raw))
    step = next(m * 10**exp for m in (1, 2, 2.5, 5, 10) if m * 10**exp >= raw)
    start = math.floor(lo / step) * step
    ticks = []
    v = start
    while v <= hi + step * 1e-9:
        ticks.append(round(v, 10))
        v += step
    if ticks[-1] < hi - step * 1e-9:
        ticks.append(round(v, 10))
    return ticks


def _tick_text(v: float, step: float) -> str:
    if step >= 1:
        return f"{v:.0f}"
    if step >= 0.1:
        return f"{v:.1f}"
    return f"{v:.2f}"


class _Frame:
    """Maps data to pixels and draws the axes of one plot."""

    def __init__(self, plot: Plot, x_lo: float, x_hi: float, y_hi: float):
        self.plot = plot
        self.w = WIDTH - LEFT - RIGHT
        self.h = HEIGHT - TOP - BOTTOM
        if x_lo > 0 or (x_lo < 0 < x_hi and -x_lo < SNAP_TO_ZERO * (x_hi - x_lo)):
            x_lo = 0.0  # time and position axes start at 0 (a window opened just before the
            # first request does not make the axis start at -100)
        self.xt = nice_ticks(x_lo, x_hi, 8) if plot.kind == "line" else []
        self.x_lo = self.xt[0] if self.xt else x_lo
        self.x_hi = self.xt[-1] if self.xt else x_hi
        self.yt = nice_ticks(0.0, y_hi, 5)
        self.y_hi = self.yt[-1]

    def x(self, v: float) -> float:
        return LEFT + (v - self.x_lo) / (self.x_hi - self.x_lo) * self.w

    def y(self, v: float) -> float:
        return TOP + self.h - v / self.y_hi * self.h

    def axes(self) -> list[str]:
        out = ['<g class="axes" font-size="11" fill="#444">']
        ystep = self.yt[1] - self.yt[0] if len(self.yt) > 1 else 1.0
        for v in self.yt:
            py = self.y(v)
            out.append(f'<line x1="{LEFT}" x2="{LEFT + self.w}" y1="{py:.1f}" y2="{py:.1f}" '
                       f'stroke="#e3e3e3"/>')
            out.append(f'<text x="{LEFT - 6}" y="{py + 4:.1f}" text-anchor="end">'
                       f'{_tick_text(v, ystep)}</text>')
        xstep = self.xt[1] - self.xt[0] if len(self.xt) > 1 else 1.0
        for v in self.xt:
            px = self.x(v)
            out.append(f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{TOP + self.h}" '
                       f'y2="{TOP + self.h + 4}" stroke="#888"/>')
            out.append(f'<text x="{px:.1f}" y="{TOP + self.h + 17}" text-anchor="middle">'
                       f'{_tick_text(v, xstep)}</text>')
        group = self.w / max(len(self.plot.categories), 1)
        for i, cat in enumerate(self.plot.categories):
            out.append(f'<text x="{LEFT + group * (i + 0.5):.1f}" y="{TOP + self.h + 17}" '
                       f'text-anchor="middle">{escape(cat)}</text>')
        out.append(f'<line x1="{LEFT}" x2="{LEFT + self.w}" y1="{TOP + self.h}" '
                   f'y2="{TOP + self.h}" stroke="#888"/>')
        out.append(f'<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{TOP + self.h}" stroke="#888"/>')
        out.append(f'<text class="axis-label x-label" x="{LEFT + self.w / 2:.1f}" '
                   f'y="{HEIGHT - 8}" text-anchor="middle" font-size="12" fill="#222">'
                   f'{escape(self.plot.x_label)}</text>')
        cy = TOP + self.h / 2
        out.append(f'<text class="axis-label y-label" x="14" y="{cy:.1f}" text-anchor="middle" '
                   f'font-size="12" fill="#222" transform="rotate(-90 14 {cy:.1f})">'
                   f'{escape(self.plot.y_label)}</text>')
        out.append("</g>")
        return out


def render_svg(plot: Plot) -> str:
    """The plot as an `<svg>` element (the caller shows `plot.no_data` instead when set)."""
    if plot.kind == "bars":
        body, frame = _bars(plot)
    else:
        body, frame = _lines(plot)
    head = (f'<svg class="plot-svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="100%" role="img" '
            f'aria-label="{escape(plot.title)}" xmlns="http://www.w3.org/2000/svg" '
            f'font-family="system-ui, -apple-system, Segoe UI, Roboto, sans-serif">'
            f'<title>{escape(plot.title)}</title>')
    clip_id = f"clip-{escape(plot.id)}"
    clip = (f'<clipPath id="{clip_id}"><rect x="{LEFT}" y="0" width="{frame.w}" '
            f'height="{frame.h + TOP}"/></clipPath>')
    return (head + clip + "".join(frame.axes()) + f'<g clip-path="url(#{clip_id})">'
            + "".join(body) + "</g></svg>")


def _lines(plot: Plot) -> tuple[list[str], _Frame]:
    pts = [(x, y) for s in plot.series for x, y in s.points if y is not None]
    xs = [x for x, _ in pts]
    y_hi = plot.y_max or max(y for _, y in pts if y is not None) * Y_HEADROOM
    frame = _Frame(plot, min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1.0, y_hi)
    out: list[str] = _marks(frame, plot, "band")
    for si, s in enumerate(sorted(plot.series, key=lambda s: s.role == "engine")):
        out.extend(_line_series(frame, s, si, plot))
    out.extend(_marks(frame, plot, "line"))
    return out, frame


MARK_COLOUR = {"band": "#E69F00", "line": "#444444"}


def _marks(frame: _Frame, plot: Plot, kind: str) -> list[str]:
    """Vertical bands (behind the series) or lines (over them) of a line plot."""
    out = []
    for m in plot.marks:
        if m.kind != kind:
            continue
        cls = escape(f"vmark {m.kind} {m.cls}".strip())
        x0 = frame.x(m.x0)
        if kind == "band":
            w = max(frame.x(m.x1) - x0, 4.0)
            out.append(f'<rect class="{cls}" x="{x0:.1f}" y="{TOP}" width="{w:.1f}" '
                       f'height="{frame.h}" fill="{MARK_COLOUR[kind]}" fill-opacity="0.18">'
                       f"<title>{escape(m.label)}</title></rect>")
        else:
            out.append(f'<line class="{cls}" x1="{x0:.1f}" x2="{x0:.1f}" y1="{TOP}" '
                       f'y2="{TOP + frame.h}" stroke="{MARK_COLOUR[kind]}" stroke-width="1.5" '
                       f'stroke-dasharray="5 3"><title>{escape(m.label)}</title></line>')
    return out


def _stretches(s: Series) -> list[list[tuple[float, float]]]:
    out: list[list[tuple[float, float]]] = [[]]
    for x, y in s.points:
        if y is None:
            if out[-1]:
                out.append([])
        else:
            out[-1].append((x, y))
    return [st for st in out if st]


def _line_series(frame: _Frame, s: Series, si: int, plot: Plot) -> list[str]:
    width, opacity = STYLE.get(s.role, STYLE["engine"])
    c = colour(s.color)
    name = escape(s.name)
    out = [f'<g class="series" data-series="{name}" data-role="{escape(s.role)}">']
    for st in _stretches(s):
        if len(st) == 1:
            x, y = st[0]
            out.append(f'<circle class="mark" cx="{frame.x(x):.1f}" cy="{frame.y(y):.1f}" r="3" '
                       f'fill="{c}"><title>{name}: {y:.3g} at {x:.4g}</title></circle>')
            continue
        d = " ".join(f"{'M' if i == 0 else 'L'}{frame.x(x):.1f},{frame.y(y):.1f}"
                     for i, (x, y) in enumerate(st))
        out.append(f'<path class="mark" d="{d}" fill="none" stroke="{c}" stroke-width="{width}" '
                   f'stroke-opacity="{opacity}" stroke-linejoin="round"><title>{name}</title></path>')
    n_pts = sum(1 for _, y in s.points if y is not None)
    if s.role != "engine" and 1 < n_pts <= MARKERS_UP_TO:
        for px, py in s.points:
            if py is not None:
                out.append(f'<circle class="mark dot" cx="{frame.x(px):.1f}" cy="{frame.y(py):.1f}" '
                           f'r="2.2" fill="{c}"><title>{name}: {py:.3g} at {px:.4g} '
                           f'({escape(plot.x_label)})</title></circle>')
    out.append("</g>")
    return out


def _bars(plot: Plot) -> tuple[list[str], _Frame]:
    ys = [y for s in plot.series for _, y in s.points if y is not None]
    y_hi = plot.y_max or max(ys) * Y_HEADROOM
    k = max(len(plot.categories), 1)
    frame = _Frame(plot, 0.0, float(k), y_hi)
    group = frame.w / k
    n = max(len(plot.series), 1)
    bar = group * 0.78 / n
    out: list[str] = []
    labels = k * n <= BAR_LABELS_UP_TO
    for si, s in enumerate(plot.series):
        c = colour(s.color)
        name = escape(s.name)
        out.append(f'<g class="series" data-series="{name}" data-role="{escape(s.role)}">')
        for x, y in s.points:
            if y is None:
                continue
            px = LEFT + group * (x + 0.11) + bar * si
            py = frame.y(y)
            out.append(f'<rect class="mark" x="{px:.1f}" y="{py:.1f}" width="{bar - 1:.1f}" '
                       f'height="{TOP + frame.h - py:.1f}" fill="{c}"><title>{name}: '
                       f'position {int(x) + 1}: {y:.1f}%</title></rect>')
            if labels:
                out.append(f'<text x="{px + bar / 2:.1f}" y="{py - 4:.1f}" font-size="10" '
                           f'text-anchor="middle" fill="#333">{y:.0f}</text>')
        out.append("</g>")
    return out, frame
