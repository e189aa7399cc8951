"""Markdown: the seed's "numbers side by side" table and a verdict in the seed's note style.

    numbers_side_by_side(sides) -> str   | caliber | decode tokens/s | MAL | source |
    render_verdict_md(verdict) -> str    answer, numbers side by side, caliber diff, evidence, next
"""

from __future__ import annotations

from collections.abc import Sequence

from decodescope import markup
from decodescope.caliber.spec import Caliber
from decodescope.verdict.bands import DEFAULT_BANDS, Band, content_band
from decodescope.verdict.comparison_quantities import side_quantities
from decodescope.verdict.side import Side
from decodescope.verdict.triage import Verdict


def cell(text: str) -> str:
    """A Markdown table cell (markup.md_cell: pipes, links, images, raw HTML, code spans
    escaped; newlines folded)."""
    return markup.md_cell(text)


def _range(vals: list[float], fmt: str) -> str | None:
    if not vals:
        return None
    lo, hi = min(vals), max(vals)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}–{fmt.format(hi)}"


def caliber_cell(side: Side, bands: Sequence[Band] = DEFAULT_BANDS) -> str:
    if side.caliber is not None:
        return f"{side.caliber.ref} ({side.caliber_identity}): {caliber_summary(side.caliber)}"
    if side.caliber_ref:
        return f"{side.caliber_ref} ({side.caliber_identity})"
    band = content_band(side.typical("mal"), side.drafts_every_step, bands)
    running = side.median("running")
    what = (f"MAL band: {band.name}" if band else
            "not every step drafts: no MAL band applies" if side.drafts_every_step is False
            else "MAL between bands")
    conc = f", running {running:g}" if running is not None else ""
    return f"unknown (engine log; {what}{conc})"


def caliber_summary(c: Caliber) -> str:
    """The caliber in a few words, the way the seed's table names it."""
    p, o, s = c.prompt, c.output, c.sampling
    prompt = (f"≥ {p.target_tokens // 1024}K-token {p.material} prompt" if p.target_tokens
              else f"{p.blocks} {p.material} blocks" if p.material else "short prompt")
    parts = [f"{c.task_class} task", prompt, f"thinking {'on' if c.thinking else 'off'}",
             f"out {o.max_tokens}" + (" (ignore_eos)" if o.ignore_eos else ""),
             f"steady state after {o.steady_state_start}", f"temperature {s.temperature:g}",
             f"top_p {s.top_p:g}", f"c{c.concurrency}"]
    return ", ".join(parts)


def decode_cell(side: Side) -> str:
    parts = []
    client = _range(side.values("decode_rate"), "{:.1f}")
    if client:
        parts.append(f"{client} (client)")
    eng = side.values("engine_decode_rate")
    if eng:
        # the statistic the verdict's arrow and percent use (Side.typical), named
        mean = side.typical("engine_decode_rate") or 0.0
        what = (f"engine {side.window_s:.0f} s windows" if side.kind == "log" and side.window_s
                else "engine")
        parts.append(f"{what} geomean {mean:.1f} / best {side.unit_name} {max(eng):.1f}")
    return "; ".join(parts) or "—"


def mal_cell(side: Side) -> str:
    """The side's MAL record as the verdict compares it (verdict.comparison_quantities.side_quantities:
    the geometric mean of the units, named, with their range; else the pooled counts)."""
    if side.speculative is False:  # a log side without drafts prints MAL 1: no content signal
        return "1 by definition (no drafts)"
    q = side_quantities(side, "engine", "baseline")["mal"]
    r = _range(side.values("mal"), "{:.2f}")
    if q.value is not None:
        return q.cell() + (f"; {side.unit_name}s {r}" if r and "–" in r else "")
    m = side.median("mal")
    if m is None and side.values("tokens_per_step") and side.speculative is not True:
        return "1 by definition (no drafts)"  # verdict.decide.spec_state's rule: no MAL, T known
    return f"{m:.2f}" if m is not None else "—"


def numbers_side_by_side(sides: Sequence[Side], bands: Sequence[Band] = DEFAULT_BANDS) -> str:
    lines = ["| caliber | decode tokens/s | MAL | source |", "|---|---|---|---|"]
    for s in sides:
        lines.append(f"| {cell(caliber_cell(s, bands))} | {cell(decode_cell(s))} | "
                     f"{cell(mal_cell(s))} | {cell(s.source)} |")
    return "\n".join(lines)


def render_verdict_md(v: Verdict) -> str:
    text = markup.md_text
    out = [f"## {v.label}: {text(v.headline.split(' — ', 1)[-1])}", ""]
    out += [f"{text(line)}  " for line in v.explanation]
    out += ["", f"Exit code {v.exit_code}.", "", "### Numbers side by side", "",
            numbers_side_by_side([v.baseline, v.current], v.band_table)]
    diff = [r for r in v.caliber.rows if not r.same]
    if diff:
        out += ["", "### Caliber, element by element", "", "| element | baseline | current |",
                "|---|---|---|"]
        out += [f"| {cell(r.element)} | {cell(r.baseline)} | {cell(r.current)} |"
                for r in v.caliber.rows]
    out += ["", "### Evidence", "", "| check | result |", "|---|---|"]
    out += [f"| {cell(r.check)} | {cell(r.result + ('. ' + d if (d := r.shown_detail) else ''))} |"
            for r in v.evidence]
    if v.next_steps:
        prose = [s for s in v.next_steps if not s.startswith("  ")]
        cmds = [s.strip() for s in v.next_steps if s.startswith("  ")]
        out += ["", "### Next", "", text(" ".join(prose))]
        if cmds:
            out += ["", "```sh", *(markup.md_fence_line(c) for c in cmds), "```"]
    return "\n".join(out) + "\n"
