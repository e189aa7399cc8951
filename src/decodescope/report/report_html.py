"""The self-contained HTML report: one file, inline CSS and SVG, no script, works offline.

Every text that comes from a run (labels, model names, caliber text, findings, verdict text)
goes through `markup.html` (the one escaping module); a Content-Security-Policy that allows no script at all backs that
up. Order: the answer (verdict) first, then the evidence, the plots, and each run's details.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from importlib import resources

from decodescope import markup
from decodescope.records.evidence import shown_detail_of
from decodescope.report import cells
from decodescope.report.comparison import Comparison
from decodescope.report.document import Report, RunSection
from decodescope.report.plot_svg import STYLE, colour, render_svg
from decodescope.report.plotdata import Plot

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
STATUS_WORD = {"same": "same", "changed": "changed", "unknown": "unknown"}


def _css() -> str:
    return resources.files("decodescope.report").joinpath("assets/report.css").read_text("utf-8")


def e(text: object) -> str:
    return markup.html(text)


def render(report: Report) -> str:
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        f'<meta name="generator" content="decodescope {e(report.tool_version)}">',
        f"<title>{e(report.title)}</title>",
        f"<style>{_css()}</style></head><body><main>",
        _header(report),
        *(_comparison(report, c) for c in report.comparisons),
        _side_by_side(report),
        _plots(report.plots),
        '<section id="runs"><h2>Runs</h2>',
        *(_run(r) for r in report.runs),
        "</section>",
        _footer(report),
        "</main></body></html>",
    ]
    return "\n".join(parts) + "\n"


def _header(report: Report) -> str:
    out = [f'<header><h1>{e(report.title)}</h1>',
           f'<p class="meta">generated {e(cells.when(report.generated_at))} by decodescope '
           f'{e(report.tool_version)} · report schema {report.schema_version} · '
           f'{len(report.runs)} run{"s" if len(report.runs) != 1 else ""}</p>']
    sim = [r for r in report.runs if r.simulated]
    if sim:
        ids = ", ".join(f"run {r.run_id}" for r in sim)
        out.append(f'<p class="banner sim" id="simulated-banner"><strong>SIMULATED</strong> — {e(ids)} '
                   "came from decodescope's simulator, a test instrument: its numbers describe "
                   "no real engine.</p>")
    out.append("</header>")
    return "\n".join(out)


def _table(header: Sequence[str], rows: Iterable[Sequence[str]], cls: str = "",
           raw_cols: tuple[int, ...] = ()) -> str:
    head = "".join(f"<th>{e(h)}</th>" for h in header)
    body = []
    for row in rows:
        tds = "".join(f"<td>{c if i in raw_cols else e(c)}</td>" for i, c in enumerate(row))
        body.append(f"<tr>{tds}</tr>")
    return (f'<table class="{cls}"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>')


def _comparison(report: Report, c: Comparison) -> str:
    base, cur = report.run(c.baseline_id), report.run(c.current_id)
    out = [f'<section class="comparison" id="comparison-{c.baseline_id}-{c.current_id}">',
           f"<h2>Verdict: {e(base.short)} → {e(cur.short)}</h2>"]
    if c.verdict is None:
        out.append(f'<p class="verdict none">No verdict: {e(c.unavailable or "unknown reason")}.</p>')
    else:
        word = (c.label or c.verdict).replace("_", " ")
        code = f'<span class="exit">exit {c.exit_code}</span>' if c.exit_code is not None else ""
        out.append(f'<div class="verdict v-{e(c.verdict.lower())}" data-verdict="{e(c.verdict)}">'
                   f'<span class="badge">{e(word)}</span>{code}</div>')
        out.append(f'<p class="headline">{e(cells.strip_kind(c.headline or "", word))}</p>')
        out += [f'<p class="explanation">{e(line)}</p>' for line in c.explanation]
        if c.decomposition:
            out.append(f'<p class="decomposition">Decomposition: {e(c.decomposition)}</p>')
    if c.side_rows:
        head, *rows = c.side_rows
        out.append(_table(("", f"baseline: {head[1]}", f"current: {head[2]}"), rows, "pair"))
    else:
        out.append(_table(("", f"baseline: {base.short}", f"current: {cur.short}"),
                          cells.pair_rows(base, cur), "pair"))
    diff = [r for r in c.caliber_rows if not r.get("same")]
    if diff:
        out.append(f'<details class="caliber"><summary>Caliber, element by element ({len(diff)} '
                   f'of {len(c.caliber_rows)} differ)</summary>{_caliber_rows(c.caliber_rows)}'
                   "</details>")
    if c.evidence:
        out.append("<h3>Evidence</h3>")
        out.append(_evidence(c.evidence))
    if c.statistics:
        out.append("<h3>Statistics (per-trial values, 95% interval)</h3>")
        out.append(_table(("metric", "current vs baseline"),
                          [(str(s.get("metric", "")), str(s.get("text", ""))) for s in c.statistics],
                          "stats"))
    if c.notes:
        out.append('<ul class="notes">' + "".join(f"<li>{e(n)}</li>" for n in c.notes) + "</ul>")
    if c.next_steps:
        first, *more = c.next_steps
        out.append(f'<p class="next"><strong>Next:</strong> {_maybe_code(first)}</p>')
        out += [f'<p class="next more">{_maybe_code(m)}</p>' for m in more]
    out.append("</section>")
    return "\n".join(out)


def _maybe_code(line: str) -> str:
    return f"<code>{e(line.strip())}</code>" if cells.is_command(line) else e(line)


def _caliber_rows(rows: Sequence[dict[str, object]]) -> str:
    body = []
    for r in rows:
        cls = "same" if r.get("same") else "diff"
        mark = "" if r.get("same") else "≠ "
        body.append(f'<tr class="cal-{cls}"><td>{mark}{e(r.get("element", ""))}</td>'
                    f'<td>{e(r.get("baseline", ""))}</td><td>{e(r.get("current", ""))}</td></tr>')
    return ('<table class="caliber-diff"><thead><tr><th>element</th><th>baseline</th>'
            f'<th>current</th></tr></thead><tbody>{"".join(body)}</tbody></table>')


def _evidence(rows: Sequence[dict[str, object]]) -> str:
    body = []
    for r in rows:
        status = str(r.get("status") or "unknown")
        detail = shown_detail_of(r)
        det = (f'<div class="detail">{e(detail)}</div>' if detail else "")
        body.append(f'<tr class="ev-{e(status)}"><td>{e(r.get("check", ""))}</td>'
                    f'<td><span class="st st-{e(status)}">{e(STATUS_WORD.get(status, status))}'
                    f'</span> {e(r.get("result", ""))}{det}</td></tr>')
    return ('<table class="evidence"><thead><tr><th>check</th><th>result</th></tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>')


def _side_by_side(report: Report) -> str:
    rows = [(r["caliber"], r["decode"], r["mal"], r["source"]) for r in report.side_by_side]
    return ('<section id="side-by-side"><h2>Numbers side by side</h2>'
            + _table(("caliber", "decode tokens/s", "MAL", "source"), rows, "sbs") + "</section>")


def _legend(plot: Plot) -> str:
    items = []
    for s in plot.series:
        width, opacity = STYLE.get(s.role, STYLE["engine"])
        c = colour(s.color)
        swatch = ('<svg class="swatch" width="26" height="10" aria-hidden="true">'
                  + (f'<rect x="3" y="1" width="20" height="8" fill="{c}"/>' if plot.kind == "bars"
                     else f'<line x1="1" x2="25" y1="5" y2="5" stroke="{c}" stroke-width="{width}" '
                          f'stroke-opacity="{opacity}"/>')
                  + "</svg>")
        items.append(f"<li>{swatch}{e(s.name)}</li>")
    return f'<ul class="legend">{"".join(items)}</ul>'


def _plots(plots: Sequence[Plot]) -> str:
    out = ['<section id="plots"><h2>Plots</h2><div class="plots">']
    for p in plots:
        state = "data" if p.has_data else "no-data"
        out.append(f'<figure class="plot" id="plot-{e(p.id)}" data-plot="{e(p.id)}" '
                   f'data-state="{state}"><figcaption>{e(p.title)}</figcaption>')
        if p.has_data:
            out.append(render_svg(p))
            out.append(_legend(p))
        else:
            out.append(f'<p class="no-data">No data: {e(p.no_data)}.</p>'
                       f'<p class="axes-note">axes would be: {e(p.x_label)} × {e(p.y_label)}</p>')
        if p.note and p.has_data:
            out.append(f'<p class="note">{e(p.note)}</p>')
        out.append("</figure>")
    out.append("</div></section>")
    return "\n".join(out)


def _run(r: RunSection) -> str:
    badges = [f'<span class="badge status">{e(r.status)}</span>']
    if r.simulated:
        badges.append('<span class="badge sim">SIMULATED</span>')
    if r.caliber_status and r.caliber_status != "ok":
        badges.append(f'<span class="badge warn">caliber {e(r.caliber_status)}</span>')
    swatch = f'<span class="dot" style="background:{colour(r.color)}"></span>'
    out = [f'<article class="run" id="run-{r.run_id}">',
           f"<h3>{swatch}{e(r.name)} {' '.join(badges)}</h3>",
           '<dl class="facts">',
           f"<dt>caliber</dt><dd>{e(cells.caliber(r))} · identity "
           f"<code>{e(r.caliber_identity or '—')}</code></dd>"]
    if r.caliber.get("description"):
        out.append(f"<dt>caliber text</dt><dd>{e(r.caliber['description'])}</dd>")
    out += [f"<dt>engine</dt><dd>{e(r.engine or '?')} · model {e(r.model or '?')} · "
            f"{e(r.url or '')}</dd>",
            f"<dt>when</dt><dd>{e(cells.when(r.created_at))}</dd>"]
    if r.labels:
        out.append("<dt>labels</dt><dd>" + ", ".join(
            f"<code>{e(k)}={e(v)}</code>" for k, v in r.labels.items()) + "</dd>")
    out.append("</dl>")
    out.append(_table(("", "client", f"engine ({r.engine_source or 'none'})"),
                      cells.run_rows(r), "numbers"))
    header, trials = cells.trial_table(r)
    if trials:
        out.append(_table(header, trials, "trials"))
    lat_head, lat = cells.latency_table(r)
    if lat:
        out.append(_table(lat_head, lat, "latency"))
    if r.output_sample:
        out.append('<details class="sample"><summary>output sample (start of the first request, '
                   f'as streamed)</summary><pre>{e(r.output_sample)}</pre></details>')
    if r.findings:
        out.append('<ul class="findings">' + "".join(
            f'<li class="sev-{e(fd.get("severity", "warning"))}">{e(cells.finding_text(fd))}</li>'
            for fd in r.findings) + "</ul>")
    out.append("</article>")
    return "\n".join(out)


def _footer(report: Report) -> str:
    # General definitions only: who decides is each run's and each verdict's own decision,
    # and drafts per second are a step rate only where every step drafts.
    return ('<footer><p>decode rate = step rate × tokens per step (= MAL where every step '
            "drafts). MAL = 1 + accepted / drafts (bonus token included); step rate = "
            "verification steps / s / running request. Client numbers come from the streamed "
            "chunks; engine numbers from the engine's own counters; which one decides is said "
            "with each run and verdict. "
            f"Export: <code>decodescope report … --format json</code> (schema "
            f"{report.schema_version}).</p></footer>")
