"""The derived result of a stored run (pure; recomputable from the raw traces and windows)."""

from __future__ import annotations

from typing import Any

from decodescope.analysis.decompose import pool
from decodescope.analysis.summary import Summary
from decodescope.findings import Finding
from decodescope.probe.metrics import compute
from decodescope.store.runs import StoredRun

RESULT_VERSION = 1


def trial_values(run: StoredRun) -> list[dict[str, Any]]:
    """Per-trial aggregates: the unit of statistics (requests in one trial are not independent)."""
    steady = int(((run.caliber or {}).get("output") or {}).get("steady_state_start") or 0)
    out = []
    for t in run.trials:
        ms = [compute(r, steady) for r in t.requests if r.ok]
        rates = [m.decode_rate for m in ms if m.decode_rate is not None]
        out.append({
            "idx": t.idx,
            "status": t.status,
            "requests": len(t.requests),
            "decode_rate": sum(rates) / len(rates) if rates else None,
            "aggregate_rate": _aggregate_rate(ms) if len(ms) > 1 else (rates[0] if rates else None),
            "ttft_s": _mean([m.ttft_s for m in ms]),
            "ttfot_s": _mean([m.ttfot_s for m in ms]),
            "output_tokens": _mean([m.output_tokens for m in ms]),
            "prompt_tokens": _mean([m.prompt_tokens for m in ms]),
            "reasoning_tokens": _mean([m.reasoning_tokens for m in ms]),
            "mean_tokens_per_chunk": _mean([m.mean_tokens_per_chunk for m in ms]),
            "itl_median_s": _mean([m.itl_median_s for m in ms]),
            "tokens_per_chunk_source": ms[0].tokens_per_chunk_source if ms else None,
            "t_start_s": min((m.steady_t_start_s for m in ms if m.steady_t_start_s is not None),
                             default=None),
            "t_end_s": max((m.steady_t_end_s for m in ms if m.steady_t_end_s is not None),
                           default=None),
            "wall_anchor_s": t.wall_anchor_s,
        })
    return out


def _aggregate_rate(ms: list[Any]) -> float | None:
    starts = [m.steady_t_start_s for m in ms if m.steady_t_start_s is not None]
    ends = [m.steady_t_end_s for m in ms if m.steady_t_end_s is not None]
    toks = [m.steady_tokens for m in ms if m.steady_tokens is not None]
    if not starts or not ends or not toks or max(ends) <= min(starts):
        return None
    return sum(toks) / (max(ends) - min(starts))


def _mean(xs: list[Any]) -> float | None:
    v = [x for x in xs if x is not None]
    return sum(v) / len(v) if v else None


def analyze_run(run: StoredRun, extra_findings: list[Finding] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    trials = trial_values(run)
    ok = [t for t in trials if t["status"] == "ok"]
    findings = [f.to_dict() for f in extra_findings]
    seen = {(f["code"], f.get("context")) for f in findings}
    for t in run.trials:
        for f in (t.result or {}).get("findings", []):
            if (f["code"], f.get("context")) not in seen:
                findings.append(f)
    caliber_missed = any(f["code"].startswith("caliber.") for f in findings)
    client = {
        "decode_rate": _summary([t["decode_rate"] for t in ok]),
        "ttft_s": _summary([t["ttft_s"] for t in ok]),
        "ttfot_s": _summary([t["ttfot_s"] for t in ok]),
        "itl_median_s": _summary([t["itl_median_s"] for t in ok]),
        "output_tokens": _summary([t["output_tokens"] for t in ok]),
        "prompt_tokens": _summary([t["prompt_tokens"] for t in ok]),
        "reasoning_tokens": _summary([t["reasoning_tokens"] for t in ok]),
        "mean_tokens_per_chunk": _summary([t["mean_tokens_per_chunk"] for t in ok]),
    }
    engine = {src: pool(w for w in run.windows if w.source == src and "reset" not in w.flags)
              for src in ("prometheus", "log", "request")}
    engine = {k: v for k, v in engine.items() if v is not None}
    return {
        "result_version": RESULT_VERSION,
        "trials": trials,
        "client": client,
        "engine": engine,
        "caliber_status": "missed" if caliber_missed else "ok",
        "findings": findings,
    }


def _summary(xs: list[float | None]) -> dict[str, Any] | None:
    s = Summary.of(xs)
    return s.to_dict() if s else None
