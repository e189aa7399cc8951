"""The report as Markdown, in the seed's style: `check | result` evidence and
`caliber | decode tokens/s | MAL | source` tables. Plots live in the HTML report.

Every text from a run (labels, model id, caliber names, findings, verdict text) goes through
`markup` (the one escaping module): Markdown tables (`|`, line breaks), links and images,
code spans, emphasis, and the HTML that Markdown passes through (`<`, `>`, `&`), so model text
stays text wherever the file is rendered.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from decodescope import markup
from decodescope.records.evidence import shown_detail_of
from decodescope.report import cells
from decodescope.report.comparison import Comparison
from decodescope.report.document import Report, RunSection


def cell(text: object) -> str:
    """Text inside a line or a table cell (markup.md_text; line breaks as " · ")."""
    return markup.md_text(text, joiner=" · ", line_start=False) or " "


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(cell(h) if h else " " for h in header) + " |",
           "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return out


def render(report: Report) -> str:
    out = [f"# {cell(report.title)}", "",
           f"generated {cells.when(report.generated_at)} by decodescope {report.tool_version} · "
           f"report schema {report.schema_version}", ""]
    sim = [r for r in report.runs if r.simulated]
    if sim:
        ids = ", ".join(f"run {r.run_id}" for r in sim)
        out += [f"> **SIMULATED** — {ids} came from decodescope's simulator, a test instrument: "
                "its numbers describe no real engine.", ""]
    for c in report.comparisons:
        out += _comparison(report, c)
    out += ["## Numbers side by side", ""]
    out += table(("caliber", "decode tokens/s", "MAL", "source"),
                 [(r["caliber"], r["decode"], r["mal"], r["source"])
                  for r in report.side_by_side])
    out += ["", "## Runs", ""]
    for r in report.runs:
        out += _run(r)
    out += ["Plots (decode rate over time, MAL and step rate over time, decode rate vs output "
            "position, per-position acceptance): `decodescope report … --format html`; "
            "their points are in `--format json`.", ""]
    return "\n".join(out)


def _comparison(report: Report, c: Comparison) -> list[str]:
    base, cur = report.run(c.baseline_id), report.run(c.current_id)
    out = [f"## Verdict: {cell(base.short)} → {cell(cur.short)}", ""]
    if c.verdict is None:
        out += [f"No verdict: {cell(c.unavailable or 'unknown reason')}.", ""]
    else:
        code = f" (exit {c.exit_code})" if c.exit_code is not None else ""
        word = (c.label or c.verdict).replace("_", " ")
        out += [f"**{cell(word)}**{code} — {cell(cells.strip_kind(c.headline or '', word))}", ""]
        out += [markup.md_text(line) + "  " for line in c.explanation]
        if c.decomposition:
            out.append(f"Decomposition: {cell(c.decomposition)}")
        out.append("")
    if c.side_rows:
        head, *rows = c.side_rows
        out += table(("", f"baseline: {head[1]}", f"current: {head[2]}"), rows)
    else:
        out += table(("", f"baseline: {base.short}", f"current: {cur.short}"),
                     cells.pair_rows(base, cur))
    out.append("")
    diff = [r for r in c.caliber_rows if not r.get("same")]
    if diff:
        out += [f"### Caliber, element by element ({len(diff)} of {len(c.caliber_rows)} differ)", ""]
        out += table(("element", "baseline", "current"), [
            (("≠ " if not r.get("same") else "") + str(r.get("element", "")),
             str(r.get("baseline", "")), str(r.get("current", ""))) for r in c.caliber_rows])
        out.append("")
    if c.evidence:
        out += ["### Evidence", ""]
        out += table(("check", "result"), [
            (str(r.get("check", "")),
             f"{r.get('result', '')}" + (f" ({d})" if (d := shown_detail_of(r)) else ""))
            for r in c.evidence])
        out.append("")
    if c.statistics:
        out += ["### Statistics (per-trial values, 95% interval)", ""]
        out += table(("metric", "current vs baseline"),
                     [(str(s.get("metric", "")), str(s.get("text", ""))) for s in c.statistics])
        out.append("")
    if c.notes:
        out += [f"- {cell(n)}" for n in c.notes] + [""]
    if c.next_steps:
        prose = [s for s in c.next_steps if not cells.is_command(s)]
        cmds = [s.strip() for s in c.next_steps if cells.is_command(s)]
        out += [f"**Next:** {cell(' '.join(prose))}", ""]
        if cmds:  # a fenced block shows its text verbatim: nothing to escape but the fence
            out += ["```sh", *(markup.md_fence_line(c) for c in cmds), "```", ""]
    return out


def _run(r: RunSection) -> list[str]:
    sim = " **[SIMULATED]**" if r.simulated else ""
    out = [f"### {cell(r.name)}{sim}", "",
           f"caliber {cell(cells.caliber(r))} (identity {markup.md_code_span(r.caliber_identity or '—')}) · "
           f"{cell(r.engine or '?')} · model {cell(r.model or '?')} · {r.status} · "
           f"{cells.when(r.created_at)}", ""]
    if r.labels:
        out += ["labels: " + ", ".join(cell(f"{k}={v}") for k, v in r.labels.items()), ""]
    out += table(("", "client", f"engine ({r.engine_source or 'none'})"), cells.run_rows(r))
    out.append("")
    header, trials = cells.trial_table(r)
    if trials:
        out += table(header, trials)
        out.append("")
    lat_head, lat = cells.latency_table(r)
    if lat:
        out += table(lat_head, lat)
        out.append("")
    if r.findings:
        out += [f"- {cell(cells.finding_text(fd))}" for fd in r.findings]
        out.append("")
    return out

