"""A history (verdict.history_store.HistoryResult) as terminal text and as an HTML timeline.

Both render the one record: every number comes from it. The HTML page uses the report's style
sheet and its inline SVG plots (report.plot_svg): the decode rate of each run, the level of
each stretch, the control's runs, a dashed vertical line at each change point (named under the
plot) and a shaded band over fresh-server runs and runs inside a server warm-up, with
a legend in words.
"""

from __future__ import annotations

from datetime import datetime, timezone

from decodescope import __version__
from decodescope.markup import html as e
from decodescope.report.plot_svg import render_svg
from decodescope.report.plotdata import Mark, Plot, Series
from decodescope.report.report_html import _css, _legend
from decodescope.verdict import thresholds as th
from decodescope.verdict.history import ChangePoint, History, Level, server_lines, server_mark, span
from decodescope.verdict.history_store import FleetResult, HistoryResult


def _when(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _level(lv: Level, h: History) -> str:
    a, b = h.points[lv.first].key, h.points[lv.last].key
    return (f"{a} … {b} ({lv.runs} runs): {lv.decode:.1f} tok/s (95 % CI {lv.lo:.1f} … "
            f"{lv.hi:.1f}); {lv.spread.text()}")


def change_lines(c: ChangePoint) -> list[str]:
    out = [f"{c.label}: between {c.before} and {c.after} ({_when(c.t)}), decode "
           f"{c.decode.describe()}",
           f"  decode {c.decode.baseline:.1f} → {c.decode.current:.1f} tok/s; "
           + (f"carried by {c.carried_by}" if c.carried_by else "no component carries it "
              "beyond noise")]
    for ch in (c.step_rate, c.tokens_per_step):
        if ch is not None:
            out.append(f"  {ch.metric}: {ch.describe()}")
    if c.server is not None:
        out.append(f"  server state: {c.server.text()}")
    if c.control:
        out.append(f"  control: {c.control}")
    src = (f" (fingerprints of {c.fingerprints_from[0]} → {c.fingerprints_from[1]})"
           if c.fingerprints_from else "")
    if c.stack_changed is None:
        out.append("  stack: unknown (no fingerprint on a side; for a Prometheus range, "
                   "--fingerprints names stored runs of the endpoint)")
    elif c.fingerprint_changes:
        out.append(f"  stack changed{src}: " + "; ".join(f"{r['check']} {r['result']}"
                                                         for r in c.fingerprint_changes))
    elif c.stack_changed:
        out.append("  stack changed (launch, version or host differ)")
    else:
        out.append(f"  stack: unchanged across it{src}")
    return out


def text(r: HistoryResult | FleetResult) -> str:
    if isinstance(r, FleetResult):
        parts = [text(x) for x in r.series.values()]
        parts += [f"Fleet: {n}" for n in r.notes]
        return "\n\n".join(parts)
    h = r.history
    head = (f"History of {r.selector}" + (f" at {r.caliber}" if r.caliber else "")
            + f": {len(h.points)} runs, {r.basis}"
            + (f"; control {r.control_selector} ({len(h.control.points)} runs)"
               if h.control is not None else ""))
    lines = [head]
    if h.status == "inconclusive":
        lines.append(f"INCONCLUSIVE: {h.why}")
        lines.append(SERVER_HEAD)
        lines.extend(f"  {x}" for x in server_lines(h))
        return "\n".join(lines)
    if not h.changes:
        lines.append("No change point: the decode rate held one level beyond noise.")
    for c in h.changes:
        lines.extend(change_lines(c))
    lines.append("Stretches:")
    lines.extend(f"  {_level(lv, h)}" for lv in h.levels)
    lines.extend(h.notes)
    lines.append(SERVER_HEAD)
    lines.extend(f"  {x}" for x in server_lines(h))
    lines.append(f"Detector: {h.method} candidates (ruptures) confirmed by a two-sample test "
                 "with each stretch's between-run spread (docs/methodology.md §10).")
    return "\n".join(lines)


SERVER_HEAD = (f"Server state (fresh: < {th.FRESH_SERVER_S / 60:.0f} min after its server's "
               "process start; server warm-up: a Mann–Kendall trend over its server's "
               "runs; "
               "docs/methodology.md §9):")
BAND_LEGEND = (f"shaded band: fresh-server runs (< {th.FRESH_SERVER_S / 60:.0f} min after their "
               "server's process start) and runs inside a server warm-up — the server's "
               "state, not the stack's")
LINE_LEGEND = "dashed vertical line: a confirmed change point"


def plot_id(selector: str) -> str:
    """An id for a history's plot that is unique per selector and safe in HTML and SVG."""
    import hashlib

    return "history-" + hashlib.sha256(selector.encode()).hexdigest()[:10]


def timeline(r: HistoryResult) -> Plot:
    h = r.history
    if not h.points:
        return Plot(plot_id(r.selector), f"Decode rate over time: {r.selector}", "line",
                    "hours since the first run", f"{r.basis} (tok/s)", (),
                    no_data="no run with a decode rate")
    t0 = min([p.t for p in h.points] + ([p.t for p in h.control.points] if h.control else []))
    hours = [(p.t - t0) / 3600.0 for p in h.points]
    series = [Series("decode rate per run", None, 0, "client",
                     tuple((x, p.decode) for x, p in zip(hours, h.points, strict=True)))]
    lv_pts: list[tuple[float, float | None]] = []
    for lv in h.levels:
        lv_pts += [(hours[lv.first], lv.decode), (hours[lv.last], lv.decode),
                   (hours[lv.last], None)]
    if lv_pts:
        series.append(Series("level of each stretch", None, 1, "engine", tuple(lv_pts)))
    if h.control is not None and h.control.points:
        series.append(Series(f"control {r.control_selector}", None, 2, "client",
                             tuple(((p.t - t0) / 3600.0, p.decode) for p in h.control.points)))
    return Plot(plot_id(r.selector), f"Decode rate over time: {r.selector}", "line",
                "hours since the first run", f"{r.basis} (tok/s)", tuple(series),
                marks=tuple(_marks(h, hours)))


def _marks(h: History, hours: list[float]) -> list[Mark]:
    """A band over each stretch of consecutive runs on a warming server, a line at each
    change point (midway between the runs on either side of it)."""
    out: list[Mark] = []
    idx = {p.key: i for i, p in enumerate(h.points)}
    n = len(h.points)

    gaps = sorted(b - a for a, b in zip(hours, hours[1:], strict=False))
    pad = gaps[len(gaps) // 2] / 2.0 if gaps else 0.0  # half the median spacing of runs

    def edge(i: int, j: int) -> float:
        """The band's edge beside point i, toward its neighbour j: half the median spacing
        out, never past the midpoint to j (a band covers its runs, not the empty time)."""
        room = abs(hours[j] - hours[i]) / 2.0 if 0 <= j < n else pad
        return hours[i] + (min(pad, room) if j > i else -min(pad, room))

    def warming(i: int) -> bool:
        s = h.points[i].server
        return s is not None and s.warming

    i = 0
    while i < n:
        if not warming(i):
            i += 1
            continue
        j = i
        while j + 1 < n and warming(j + 1):
            j += 1
        keys = [p.key for p in h.points[i:j + 1]]
        marks = sorted({server_mark(p.server) for p in h.points[i:j + 1]})
        out.append(Mark("band", edge(i, i - 1), edge(j, j + 1),
                        f"{span(keys)}: server warming up ({'; '.join(marks)})", "server"))
        i = j + 1
    for c in h.changes:
        # midway between the run before it and the next run (a restart's first run, when
        # warm-up runs were left out before the level after it)
        a = idx.get(c.before)
        if a is None or a + 1 >= n:
            continue
        x = (hours[a] + hours[a + 1]) / 2.0
        out.append(Mark("line", x, x, f"{c.label}: between {c.before} and {c.after}", "change"))
    return out


def _figure(r: HistoryResult) -> list[str]:
    plot = timeline(r)
    head = [f'<figure class="plot" id="plot-{plot.id}">',
            f"<figcaption>{e(plot.title)}</figcaption>"]
    if not plot.has_data:
        return [*head, f'<p class="no-data">No data: {e(plot.no_data)}.</p>', "</figure>"]
    return [*head, render_svg(plot), _legend(plot), *_mark_legend(plot), "</figure>"]


def _mark_legend(plot: Plot) -> list[str]:
    """The legend of the plot's marks, in words (only those drawn)."""
    items = []
    if any(m.kind == "band" for m in plot.marks):
        items.append('<li><svg class="swatch" width="26" height="10" aria-hidden="true">'
                     '<rect x="1" y="0" width="24" height="10" fill="#E69F00" '
                     f'fill-opacity="0.35"/></svg>{e(BAND_LEGEND)}</li>')
    if any(m.kind == "line" for m in plot.marks):
        items.append('<li><svg class="swatch" width="26" height="10" aria-hidden="true">'
                     '<line x1="13" x2="13" y1="0" y2="10" stroke="#444444" stroke-width="1.5" '
                     f'stroke-dasharray="3 2"/></svg>{e(LINE_LEGEND)}</li>')
    return [f'<ul class="legend marks">{"".join(items)}</ul>'] if items else []


def html(r: HistoryResult | FleetResult) -> str:
    if isinstance(r, FleetResult):
        return _page(r.selector, [
            *(f"<p class=\"note\">{e('Fleet: ' + n)}</p>" for n in r.notes),
            *(x for one in r.series.values() for x in _section(one))])
    return _page(r.selector, _section(r))


def _page(title: str, body: list[str]) -> str:
    return "\n".join([
        '<!doctype html><html lang="en"><head><meta charset="utf-8">',
        f"<title>{e('decodescope history: ' + title)}</title>",
        f"<style>{_css()}</style></head><body><main>",
        f"<header><h1>{e('History of ' + title)}</h1></header>", *body,
        f"<footer><p>decodescope {e(__version__)}</p></footer></main></body></html>"])


def _section(r: HistoryResult) -> list[str]:
    h = r.history
    rows = []
    for c in h.changes:
        lines = change_lines(c)
        rows.append(f"<li><strong>{e(lines[0])}</strong><br>"
                    + "<br>".join(e(x.strip()) for x in lines[1:]) + "</li>")
    return [
        f'<section class="history"><h2>{e(r.selector)}</h2>',
        f"<p>{e(text(r).splitlines()[0])}</p>",
        '<div class="plots">', *_figure(r), "</div>",
        "<h3>Change points</h3>",
        (f"<ul>{''.join(rows)}</ul>" if rows else
         f"<p>{e(h.why or 'No change point: one level beyond noise.')}</p>"),
        "<h3>Stretches</h3><ul>",
        "".join(f"<li>{e(_level(lv, h))}</li>" for lv in h.levels), "</ul>",
        "".join(f"<p class=\"note\">{e(n)}</p>" for n in h.notes),
        f"<h3>Server state</h3><p>{e(SERVER_HEAD)}</p><ul class=\"server-state\">",
        "".join(f"<li>{e(x)}</li>" for x in server_lines(h)), "</ul>", "</section>",
    ]
