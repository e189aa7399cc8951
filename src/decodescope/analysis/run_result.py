"""The derived result of a stored run (pure; recomputable from the raw traces and windows).

Keys: `trials` (per-trial aggregates, the unit of statistics, with the engine's per-trial
MAL / step rate / decode rate), `client`, `engine` (counts pooled per source over the trials'
steady-state spans), `decomposition`, `reconciliation`, `contamination`, `length_decay`,
`caliber_status`, `findings`.
"""

from __future__ import annotations

from typing import Any

from decodescope.analysis.contamination import contamination, flag_contaminated
from decodescope.analysis.decay import length_decay
from decodescope.analysis.decompose import (
    DECIDING_SOURCES,
    deciding,
    decomposition,
    pool,
    request_windows,
    select,
)
from decodescope.analysis.reconcile import reconcile
from decodescope.analysis.summary import Summary
from decodescope.findings import Finding
from decodescope.probe.metrics import compute
from decodescope.store.runs import StoredRun
from decodescope.telemetry.window import EngineWindow

RESULT_VERSION = 2  # 2: decomposition, reconciliation, contamination, length decay


def trial_values(run: StoredRun) -> list[dict[str, Any]]:
    """Per-trial aggregates: the unit of statistics (requests in one trial are not independent)."""
    steady = int(((run.caliber or {}).get("output") or {}).get("steady_state_start") or 0)
    out = []
    for t in run.trials:
        ok_reqs = [r for r in t.requests if r.ok]
        ms = [compute(r, steady) for r in ok_reqs]
        rates = [m.decode_rate for m in ms if m.decode_rate is not None]
        t_start = min((m.steady_t_start_s for m in ms if m.steady_t_start_s is not None),
                      default=None)
        t_end = max((m.steady_t_end_s for m in ms if m.steady_t_end_s is not None), default=None)
        sends = [r.t_send_s for r in t.requests]
        dones = [r.t_done_s for r in t.requests if r.t_done_s is not None]
        out.append({
            "idx": t.idx,
            "status": t.status,
            "requests": len(t.requests),
            "decode_rate": sum(rates) / len(rates) if rates else None,
            "aggregate_rate": _aggregate_rate(ms) if len(ms) > 1 else (rates[0] if rates else None),
            "decode_rate_all": _mean([m.decode_rate_all for m in ms]),
            "wall_rate": _mean([(m.output_tokens / m.e2e_s) if (m.output_tokens and m.e2e_s)
                                 else None for m in ms]),
            "ttft_s": _mean([m.ttft_s for m in ms]),
            "ttfot_s": _mean([m.ttfot_s for m in ms]),
            "output_tokens": _mean([m.output_tokens for m in ms]),
            "prompt_tokens": _mean([m.prompt_tokens for m in ms]),
            "reasoning_tokens": _mean([m.reasoning_tokens for m in ms]),
            "mean_tokens_per_chunk": _mean([m.mean_tokens_per_chunk for m in ms]),
            "itl_median_s": _mean([m.itl_median_s for m in ms]),
            "tokens_per_chunk_source": ms[0].tokens_per_chunk_source if ms else None,
            "t_start_s": t_start,
            "t_end_s": t_end,
            "wall_anchor_s": t.wall_anchor_s,
            # epoch spans: the steady-state window, and the whole trial (first send -> last done)
            "steady_span_s": ([t_start + t.wall_anchor_s, t_end + t.wall_anchor_s]
                              if (t_start is not None and t_end is not None) else None),
            "trial_span_s": ([min(sends) + t.wall_anchor_s, max(dones) + t.wall_anchor_s]
                             if (sends and dones) else None),
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


def in_flight(run: StoredRun) -> int | None:
    c = (run.caliber or {}).get("concurrency") or run.meta.get("concurrency")
    return int(c) if isinstance(c, (int, float)) else None


def engine_windows(run: StoredRun) -> dict[int, list[EngineWindow]]:
    """source="request" windows per trial index, from the stored traces' `timings`."""
    return {t.idx: request_windows(t.requests, t.wall_anchor_s, run.engine) for t in run.trials}


def analyze_run(run: StoredRun, extra_findings: list[Finding] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    trials = trial_values(run)
    ok = [t for t in trials if t["status"] == "ok"]
    findings = [f.to_dict() for f in extra_findings]
    for t in run.trials:
        for f in (t.result or {}).get("findings", []):
            _add(findings, f)
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
        "wall_rate": _summary([t["wall_rate"] for t in ok]),
    }
    conc = in_flight(run)
    req_windows = engine_windows(run)
    trial_spans = [t["trial_span_s"] for t in trials if t["trial_span_s"]]
    windows = list(run.windows) + [w for ws in req_windows.values() for w in ws]
    if conc is not None:
        windows = flag_contaminated(windows, conc, trial_spans)
    steady_spans = [t["steady_span_s"] for t in ok if t["steady_span_s"]]
    engine: dict[str, dict[str, Any]] = {}
    for source in DECIDING_SOURCES:
        p = pool(select([w for w in windows if w.source == source], steady_spans))
        if p is not None:
            engine[source] = p
    src, _ = deciding(engine)
    for tv in trials:
        _trial_engine(tv, windows, req_windows.get(tv["idx"], []), src)
    cont, cont_finding = contamination(windows, conc, trial_spans)
    if cont_finding is not None:
        _add(findings, cont_finding.to_dict())
    if any("reset" in w.flags for w in run.windows):
        _add(findings, Finding(
            "telemetry.counter_reset",
            "engine counters went back during the probe (a restart?); those intervals were "
            "left out of the engine numbers", "Check the engine's uptime and log").to_dict())
    client_rate = (client["decode_rate"] or {}).get("median")
    ok_traces = [r for t in run.trials if t.status == "ok" for r in t.requests]
    return {
        "result_version": RESULT_VERSION,
        "trials": trials,
        "client": client,
        "engine": engine,
        "decomposition": decomposition(engine, client_rate),
        "reconciliation": reconcile(client, engine.get(src) if src else None, trials, cont, src),
        "contamination": cont,
        "length_decay": length_decay(ok_traces),
        "caliber_status": "missed" if caliber_missed else "ok",
        "findings": findings,
    }


def _trial_engine(t: dict[str, Any], windows: list[EngineWindow], own: list[EngineWindow],
                  src: str | None) -> None:
    """The deciding source's windows over this trial's steady state, pooled: per-trial engine
    numbers for the statistics (triage, verdicts)."""
    p = None
    if src == "request":
        p = pool(own)
    elif src is not None and t["steady_span_s"]:
        p = pool(select([w for w in windows if w.source == src], [t["steady_span_s"]]))
    t["engine_source"] = src if p else None
    t["engine_decode_rate"] = p.get("decode_rate_per_request") if p else None
    t["engine_mal"] = p.get("mal") if p else None
    t["engine_step_rate"] = p.get("step_rate") if p else None
    t["engine_tokens_per_step"] = p.get("tokens_per_step") if p else None
    t["engine_running"] = p.get("running_mean") if p else None


def _add(findings: list[dict[str, Any]], f: dict[str, Any]) -> None:
    if (f["code"], f.get("context")) in {(x["code"], x.get("context")) for x in findings}:
        return
    if f["code"] in ("contamination", "telemetry.counter_reset") \
            and any(x["code"] == f["code"] for x in findings):
        return
    findings.append(f)


def _summary(xs: list[float | None]) -> dict[str, Any] | None:
    s = Summary.of(xs)
    return s.to_dict() if s else None
