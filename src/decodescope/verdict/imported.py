"""Same caliber? when a side is another tool's imported result (read by decodescope.peers,
stored by store/peer_import.py).

An imported run carries the caliber elements its files recorded and "unknown" for the rest. A
probe side's elements come from its caliber and what it realized. Compared element by element.

Two imports from the same tool — the user ran that tool's command on both stacks — are judged
by the workload the files record; what the tool does not record is assumed the same, and named:
- an element recorded on both sides and different, or recorded on one side only →
  CALIBER_MISMATCH, naming each (realized means within WORKLOAD_TOLERANCE are the same: the
  rule that makes files one workload in one `import`);
- else, with at least one element recorded on both sides → established: "the same recorded
  workload; not recorded by `vllm bench serve`: … — taken as the same on both sides";
- nothing recorded on both sides → not established (INCONCLUSIVE).
Realized length spans are shown, never decisive (they vary run to run).

Any other pair (an import and a probe run, imports from two tools): the elements known on both
sides are compared; one unknown on either side leaves the caliber not established — two tools
are two commands, and nothing says they asked for the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from decodescope.peers import decode_from, reader_of
from decodescope.peers.common import ELEMENTS, REALIZED_MEANS, WORKLOAD_TOLERANCE, same_realized
from decodescope.verdict.types import CaliberComparison, CaliberRow

if TYPE_CHECKING:
    from decodescope.verdict.side import Side

REALIZED_TOLERANCE = 0.05  # an import and a probe: realized mean lengths within 5 % are the same


def _same(k: str, a: str, b: str) -> bool:
    if k in REALIZED_MEANS:
        try:
            x, y = float(a), float(b)
        except ValueError:
            return a == b
        return abs(x - y) <= REALIZED_TOLERANCE * max(abs(x), abs(y), 1.0)
    if k == "model":  # a served name vs a path: the last component
        return a.rstrip("/").rsplit("/", 1)[-1] == b.rstrip("/").rsplit("/", 1)[-1]
    return a == b


def tool_of(side: Side) -> str | None:
    imp = side.imported or {}
    tool = imp.get("tool")
    return str(tool) if tool else None


def _tool_named(side: Side) -> str | None:
    """The side's tool as its reader names it (from the stored record, else its label)."""
    tool = tool_of(side)
    if tool:
        return tool
    r = reader_of(side.imported_from) if side.imported_from else None
    return str(r.TOOL) if r is not None else side.imported_from


# The expected direction of the current side's per-request decode rate when an element is
# higher / longer on it than on the baseline (docs/peers.md, "Two tools, one server").
_HIGHER_READS_LOWER = {
    "concurrency": "more requests share each step",
    "request rate": "more requests in flight",
    "input tokens (mean)": "a longer context per step",
    "output tokens (mean)": "a longer context per step (length decay)",
    "output max_tokens": "longer outputs: a longer context per step",
    "temperature": "sampling accepts fewer speculative drafts than greedy decoding",
}


def direction(k: str, vb: str, vc: str) -> str | None:
    """"expected lower on the current side: ..." for an element that differs, when its
    direction is known; None otherwise."""
    try:
        xb, xc = float(vb.split()[-1]), float(vc.split()[-1])
    except ValueError:
        xb = xc = None  # type: ignore[assignment]
    why = _HIGHER_READS_LOWER.get(k)
    if why and xb is not None and xc is not None and xb != xc:
        return f"expected {'lower' if xc > xb else 'higher'} on the current side: {why}"
    if k == "ignore_eos":
        return "changes the realized output lengths (see output tokens)"
    if k in ("dataset", "dataset sha256"):
        return "other content: MAL, and so the decode rate, move with it (either way)"
    if k == "endpoint":
        return "the chat template adds prompt tokens (a small effect)"
    return None


def compare_imported(b: Side, c: Side) -> CaliberComparison:
    tb, tc = tool_of(b), tool_of(c)
    if tb and tb == tc:
        return compare_recorded_workload(b, c, tb)
    return _compare_elements(b, c)


def compare_recorded_workload(b: Side, c: Side, tool: str) -> CaliberComparison:
    """Two imports from one tool: established by the workload their files record; every
    element the tool did not record on either side is assumed the same and named."""
    eb, ec = b.elements or {}, c.elements or {}
    realized = set((b.imported or {}).get("realized") or ()) | set(
        (c.imported or {}).get("realized") or ())
    rows: list[CaliberRow] = []
    differ: list[str] = []
    assumed: list[str] = []
    shown: list[str] = []
    compared: list[str] = []
    for k in ELEMENTS:
        vb, vc = eb.get(k), ec.get(k)
        if k in realized:  # a realized span: shown, never decisive
            if vb is not None and vc is not None:
                rows.append(CaliberRow(k, vb, vc))
                shown.append(k)
            continue
        if vb is None and vc is None:
            assumed.append(k)
            continue
        if vb is None or vc is None:
            who = c if vb is None else b
            differ.append(f"{k} recorded on {who.name} only ({vb if vc is None else vc})")
            continue
        same = (same_realized(vb, vc, WORKLOAD_TOLERANCE) if k in REALIZED_MEANS
                else _same(k, vb, vc))
        rows.append(CaliberRow(k, vb, vb if same else vc))
        compared.append(k)
        if not same:
            why = direction(k, vb, vc)
            differ.append(f"{k} {vb} vs {vc}" + (f" ({why})" if why else ""))
    what = f"imported `{tool}` files"
    tail = (f"; not recorded by `{tool}`: {', '.join(assumed)} — taken as the same on both "
            "sides" if assumed else "")
    spans = (f"; realized {', '.join(shown)} shown, not compared (they vary run to run)"
             if shown else "")
    if differ:
        return CaliberComparison(False, f"no: {what}; the recorded workload differs: "
                                 + "; ".join(differ) + tail, tuple(rows))
    if not compared:
        return CaliberComparison(None, f"not established: {what}; no element of the workload "
                                       f"is recorded on both sides{tail}", tuple(rows))
    return CaliberComparison(True, f"yes, by the recorded workload: {what}, the same "
                                   f"{', '.join(compared)}{tail}{spans}", tuple(rows))


def _compare_elements(b: Side, c: Side) -> CaliberComparison:
    eb, ec = b.elements or {}, c.elements or {}
    rows: list[CaliberRow] = []
    differ: list[str] = []
    unknown: list[str] = []
    for k in ELEMENTS:
        vb, vc = eb.get(k), ec.get(k)
        if vb is None or vc is None:  # listed in the text; a row would read as a difference
            unknown.append(k)
            continue
        same = _same(k, vb, vc)
        rows.append(CaliberRow(k, vb, vb if same else vc))  # within tolerance reads the same
        if not same:
            why = direction(k, vb, vc)
            differ.append(f"{k} {vb} vs {vc}" + (f" ({why})" if why else ""))
    who = " and ".join(s.imported_from for s in (b, c) if s.imported_from)
    tb, tc = _tool_named(b), _tool_named(c)
    if tb and tc and tb != tc:  # two tools: the basis alone can move the number (docs/peers.md)
        basis = "; ".join(f"{t}: {decode_from(t)}" for t in (tb, tc))
        who += f" (decode rate per request — {basis})"
    if differ:
        text = (f"no: imported from {who}; the elements differ: " + "; ".join(differ)
                + (f" (unknown: {', '.join(unknown)})" if unknown else ""))
        return CaliberComparison(False, text, tuple(rows))
    if unknown:
        return CaliberComparison(None, f"not established: imported from {who}; no known element "
                                       "differs, but these are unknown on a side, so the two "
                                       f"are not shown like-for-like: {', '.join(unknown)}",
                                 tuple(rows))
    return CaliberComparison(True, f"yes: imported from {who}; every element the same",
                             tuple(rows))
