"""Terminal text of a verdict: the answer first, then the two sides, evidence, next step."""

from __future__ import annotations

from decodescope.records.evidence import render_rows
from decodescope.verdict.bands import describe
from decodescope.verdict.side_values import Side, coverage_differs
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
        text += f" / {span[1]:.1f} peak"
    return text


def units_cell(side: Side) -> str:
    n = len(side.units)
    text = f"{n} {side.unit_name}{'' if n == 1 else 's'}"
    if side.window_s:
        text += f" × {side.window_s:.0f} s"
    return text


def side_rows(v: Verdict) -> list[tuple[str, str, str]]:
    b, c = v.baseline, v.current

    def mal_cell(side: Side) -> str:
        med = side.median("mal")
        span = side.span("mal")
        text = describe(med, v.band_table) if med is not None else "—"
        if span and span[0] != span[1]:
            text += f"  [{span[0]:.2f}–{span[1]:.2f}]"
        return text

    rows = [
        ("", b.name, c.name),
        ("when", b.when() or "—", c.when() or "—"),
        ("caliber", _cal(b), _cal(c)),
    ]
    if b.values("engine_decode_rate") or c.values("engine_decode_rate"):
        rows.append(("decode (engine)", decode_cell(b, "engine_decode_rate"),
                     decode_cell(c, "engine_decode_rate")))
    if b.values("decode_rate") or c.values("decode_rate"):
        rows.append(("decode (client)", decode_cell(b, "decode_rate"), decode_cell(c, "decode_rate")))
    rows.append(("MAL", mal_cell(b), mal_cell(c)))
    if coverage_differs(b, c):
        rows.append(("tokens per step", _f(b.median("tokens_per_step"), "{:.2f}"),
                     _f(c.median("tokens_per_step"), "{:.2f}")))
    rows += [
        ("step rate", _f(b.median("step_rate"), "{:.1f} /s"), _f(c.median("step_rate"), "{:.1f} /s")),
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
    return "unknown (engine log)" if side.kind == "log" else "unknown"


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
