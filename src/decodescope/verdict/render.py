"""Terminal text of a verdict: the answer first, then the two sides, evidence, next step."""

from __future__ import annotations

from decodescope.records.evidence import render_rows
from decodescope.verdict.comparison_quantities import comparison_quantities
from decodescope.verdict.decide import spec_state
from decodescope.verdict.side import Side, coverage_differs
from decodescope.verdict.triage import Verdict
from decodescope.verdict.types import fmt_num

WIDTH = 96  # the headline's exit-code tag is right-aligned to this column


def _f(v: float | None, fmt: str = "{:.1f}") -> str:
    return "—" if v is None else fmt.format(v)


def decode_cell(side: Side, key: str) -> str:
    med, span = side.median(key), side.span(key)
    if med is None:
        return "—"
    text = f"{med:.1f} median"
    if span and len(side.values(key)) > 1:
        text += f" / best {side.unit_name} {span[1]:.1f}"
    return text


def units_cell(side: Side) -> str:
    n = len(side.units)
    text = f"{n} {side.unit_name}{'' if n == 1 else 's'}"
    if side.window_s:
        text += f" × {side.window_s:.0f} s"
    return text


def side_rows(v: Verdict) -> list[tuple[str, str, str]]:
    """Baseline beside current. Every number is the verdict's Quantity record (the geometric
    mean the change compares, named), so the table shows what the headline's arrow shows."""
    b, c = v.baseline, v.current
    qs = v.quantities or comparison_quantities(b, c, v.decode_source)

    def rate(key: str, i: int, side: Side) -> str:
        q = qs[key][i]
        if q.value is None:
            return "—"
        span = side.span("engine_decode_rate" if key == "engine_decode_rate" else "decode_rate")
        text = q.cell()
        if span and q.statistic == "geometric mean" and q.n > 1:
            text += f" / best {side.unit_name} {span[1]:.1f}"
        if qs["decode_rate"][i].source == q.source:
            text += "  ← decides"
        return text

    off = spec_state(b, c)  # one side without drafts: MAL 1 by definition there

    def mal_cell(i: int, side: Side) -> str:
        q = qs["mal"][i]
        if off == ("off" if i else "on"):  # the side without drafts, whatever it printed
            return "1 by definition (no drafts)"
        if q.value is None:
            return "—"
        band = v.bands[i]
        text = q.cell()
        if band is not None:
            text += f" ({band.name}, {band.range_text})"
        elif side.drafts_every_step is False:
            text += " (drafted steps only)"
        span = side.span("mal")
        if span and span[0] != span[1]:
            text += f"  [{span[0]:.2f}–{span[1]:.2f}]"
        return text

    def plain(key: str, i: int) -> str:
        return qs[key][i].cell()

    rows = [
        ("", b.name, c.name),
        ("when", b.when() or "—", c.when() or "—"),
        ("caliber", _cal(b), _cal(c)),
    ]
    if b.values("engine_decode_rate") or c.values("engine_decode_rate"):
        rows.append(("decode (engine)", rate("engine_decode_rate", 0, b),
                     rate("engine_decode_rate", 1, c)))
    if b.values("decode_rate") or c.values("decode_rate"):
        rows.append(("decode (client)", rate("client_decode_rate", 0, b),
                     rate("client_decode_rate", 1, c)))
    rows.append(("MAL", mal_cell(0, b), mal_cell(1, c)))
    if coverage_differs(b, c) or off is not None:
        rows.append(("tokens per step", plain("tokens_per_step", 0), plain("tokens_per_step", 1)))
    rows += [
        ("step rate", plain("step_rate", 0), plain("step_rate", 1)),
    ]
    if b.median("running") is not None or c.median("running") is not None:
        rows.append(("running requests", fmt_num(b.median("running")),
                     fmt_num(c.median("running"))))
    rows.append((b.unit_name + "s" if b.unit_name == c.unit_name else "units",
                 units_cell(b), units_cell(c)))
    return rows


def _cal(side: Side) -> str:
    if side.caliber_ref:
        return f"{side.caliber_ref} ({side.caliber_identity})"
    if side.kind == "log":
        return ("unknown (Prometheus window)" if side.source.startswith("prometheus")
                else "unknown (engine log)")
    return "unknown"


def render_text(v: Verdict) -> str:
    tag = f"exit {v.exit_code}"
    head = v.headline
    first = head + " " * max(2, WIDTH - len(head) - len(tag)) + tag
    out = [first, *v.explanation, ""]
    rows = side_rows(v)
    w0 = max(len(r[0]) for r in rows) + 2
    w1 = max(len(r[1]) for r in rows) + 3
    out.append(f"{'':<{w0}}{'baseline':<{w1}}current")
    out.extend(f"{a:<{w0}}{b:<{w1}}{c}" for a, b, c in rows)
    diff = [r for r in v.caliber.rows if not r.same]
    if v.caliber.rows and diff:
        out += ["", f"Caliber, element by element ({len(diff)} of {len(v.caliber.rows)} differ)"]
        e0 = max(len(r.element) for r in v.caliber.rows) + 2
        e1 = max(len(r.baseline[:40]) for r in v.caliber.rows) + 3
        out.append(f"    {'element':<{e0}}{'baseline':<{e1}}current")
        for r in v.caliber.rows:
            mark = "  ≠ " if not r.same else "    "
            out.append(f"{mark}{r.element:<{e0}}{r.baseline[:40]:<{e1}}{r.current[:40]}")
    out += ["", "Evidence", render_rows(list(v.evidence))]
    if v.notes:
        out += ["", "Notes", *(f"  {n}" for n in v.notes)]
    out += ["", "Next: " + v.next_steps[0], *v.next_steps[1:]] if v.next_steps else []
    return "\n".join(out)
