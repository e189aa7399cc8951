"""The derived result of a stored run (pure; recomputable from the raw traces and windows).

Keys: `trials` (per-trial aggregates, the unit of statistics, with the engine's per-trial
MAL / step rate / decode rate), `client`, `engine` (counts pooled per source over the trials'
steady-state spans), `deciding` (who decides the decode rate, and why: decided once here),
`quantities` (the reported numbers as `records.quantity.Quantity` dicts), `decomposition`,
`reconciliation`, `contamination`, `length_decay`, `caliber_status`, `findings`.
"""

from __future__ import annotations

import dataclasses
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
from decodescope.analysis.first_trial import first_trial_shift
from decodescope.analysis.queueing import queueing, server_capacity
from decodescope.analysis.reconcile import reconcile
from decodescope.analysis.run_quantities import run_quantities, who_decides
from decodescope.analysis.span import SpanNumbers, own_request_seconds, trial_span
from decodescope.records.findings import Finding
from decodescope.records.request_metrics import compute
from decodescope.records.stored_run import StoredRun
from decodescope.records.summary import Summary
from decodescope.records.window import EngineWindow
from decodescope.telemetry.prometheus import FINISH_UPDATED, Scrape

# 3: per-trial engine spans, stalls, engine/client disagreement; 4: `deciding` (who decides,
# decided once, with the reason) and `quantities` (reported numbers with their statistic)
RESULT_VERSION = 4
# Client and engine disagreeing by more than this at concurrency 1 suspends "engine decides".
ENGINE_CLIENT_AGREE_PCT = 5.0
# A first trial whose MAL / decode rate differs from the rest's median by at least this much
# (and by more than twice the rest's spread) is named: the trials are not independent.
FIRST_TRIAL_SHIFT = 0.10
# Engine rates that cannot leave stalls out (whole-request timings, whole-trial windows) are
# withheld for a trial whose stalls took more than this share of its steady state.
STALL_SHARE_WITHHOLDS = 0.01


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
        stalls = [st for m in ms for st in m.stalls]
        steady_wall = sum((m.steady_t_end_s - m.steady_t_start_s) for m in ms
                          if m.steady_t_start_s is not None and m.steady_t_end_s is not None)
        with_stalls = [m.decode_rate_with_stalls for m in ms if m.decode_rate_with_stalls]
        out.append({
            "idx": t.idx,
            "status": t.status,
            "requests": len(t.requests),
            "decode_rate": sum(rates) / len(rates) if rates else None,
            "decode_rate_with_stalls": (sum(with_stalls) / len(with_stalls)
                                        if with_stalls else None),
            "stall_count": len(stalls),
            "stall_s": sum(b - a for a, b in stalls),
            "stall_max_s": max((b - a for a, b in stalls), default=None),
            "stall_time_share": (sum(max(0.0, min(b, m.steady_t_end_s) - max(a, m.steady_t_start_s))
                                     for m in ms if m.steady_t_start_s is not None
                                     and m.steady_t_end_s is not None for a, b in m.stalls)
                                 / steady_wall) if steady_wall else None,
            "stalls_perf_s": [list(x) for x in stalls],
            "steady_perf_s": [t_start, t_end] if (t_start is not None and t_end is not None) else None,
            "decoding_perf_s": [[m.ttft_s + r.t_send_s, m.steady_t_end_s]
                                for m, r in zip(ms, ok_reqs, strict=True)
                                if m.ttft_s is not None and m.steady_t_end_s is not None],
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
    """Requests the probe had in flight at most: the caliber's concurrency, or fewer when the
    traces show fewer (an open-loop load declares no cap)."""
    c = (run.caliber or {}).get("concurrency") or run.meta.get("concurrency")
    cap = int(c) if isinstance(c, (int, float)) else None
    seen = _max_overlap([(r.t_send_s, r.t_done_s) for t in run.trials for r in t.requests
                         if r.t_done_s is not None])
    if cap is None:
        return seen
    return min(cap, seen) if seen else cap


def _max_overlap(spans: list[tuple[float, float]]) -> int | None:
    if not spans:
        return None
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    cur = best = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


# An A/B trial that stalled, was contaminated or missed its caliber, and was re-taken (run/ab.py):
# stored with its traces and findings, never pooled into the run's numbers or judgements.
RETAKEN = "retaken"


def engine_windows(run: StoredRun) -> dict[int, list[EngineWindow]]:
    """source="request" windows per trial index, from the stored traces' `timings`."""
    return {t.idx: request_windows(t.requests, t.wall_anchor_s, run.engine) for t in run.trials}


def analyze_run(run: StoredRun, extra_findings: list[Finding] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    trials = trial_values(run)
    ok = [t for t in trials if t["status"] == "ok"]
    findings = [f.to_dict() for f in extra_findings]
    for t in run.trials:
        if t.status == RETAKEN:  # an A/B trial named and re-taken: its findings are its own
            continue
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
    trial_spans = [t["trial_span_s"] for t in trials
                   if t["trial_span_s"] and t["status"] != RETAKEN]
    windows = list(run.windows) + [w for ws in req_windows.values() for w in ws]
    if conc is not None:
        windows = flag_contaminated(windows, conc, trial_spans)
    steady_spans = [t["steady_span_s"] for t in ok if t["steady_span_s"]]
    engine: dict[str, dict[str, Any]] = {}
    for source in DECIDING_SOURCES:
        p = pool(select([w for w in windows if w.source == source], steady_spans))
        if p is not None:
            engine[source] = p
    scrapes = _scrapes(run)
    continuous = bool(scrapes) and not any(s.prefix in FINISH_UPDATED for s in scrapes)
    if continuous:
        spans = {tv["idx"]: _span_of(tv, scrapes) for tv in trials}
        p = pool_spans([sp for tv in ok if (sp := spans.get(tv["idx"])) is not None])
        if p is not None:
            engine["prometheus"] = p
        else:
            engine.pop("prometheus", None)
    src, _ = deciding(engine)
    # The probe's requests that can run at once: its in-flight count, at most the server's
    # slots (an offered load above them queues: 4 offered to a 2-slot llama.cpp run 2)
    cap = server_capacity(run.engine, (run.meta.get("engine_info") or {}).get("raw"),
                          run.fingerprint)
    running_cap = min(conc, cap.slots) if (conc is not None and cap is not None) else conc
    for tv in trials:
        if src == "prometheus" and continuous:
            _trial_span_engine(tv, spans.get(tv["idx"]))
        else:
            _trial_engine(tv, windows, req_windows.get(tv["idx"], []), src, running_cap)
    _suspend_if_disagree(trials, conc, findings)
    _first_trial_shift(trials, findings, run)
    stalls = _stall_summary(ok)
    if stalls and stalls["count"]:
        _add(findings, Finding(
            "stalls",
            f"the server paused {stalls['count']}x inside the outputs of {stalls['requests']} "
            f"request(s), {stalls['min_s']:.2f}–{stalls['max_s']:.2f} s each "
            f"({stalls['time_share']:.0%} of the steady state); decode and step rates leave "
            "them out", "Look for preemption, swapping, other requests' prefills or host "
            "contention in the engine log at those times", severity="warning").to_dict())
    cont, cont_finding = contamination(windows, conc, trial_spans)
    if cont_finding is not None:
        _add(findings, cont_finding.to_dict())
    queue = queueing(run, conc)
    if queue and queue["text"]:
        _add(findings, Finding(
            "load.queued", queue["text"], "Offer at most the server's capacity to measure "
            "without queueing (a lower --concurrency), or read TTFT as queue wait + prefill",
            severity="info").to_dict())
    if any("reset" in w.flags for w in run.windows):
        _add(findings, Finding(
            "telemetry.counter_reset",
            "engine counters went back during the probe (a restart?); those intervals were "
            "left out of the engine numbers", "Check the engine's uptime and log").to_dict())
    client_rate = (client["decode_rate"] or {}).get("median")
    ok_traces = [r for t in run.trials if t.status == "ok" for r in t.requests]
    decision = who_decides(trials, src)
    out: dict[str, Any] = {
        "result_version": RESULT_VERSION,
        "trials": trials,
        "client": client,
        "engine": engine,
        "deciding": decision,
        "decomposition": decomposition(engine, client_rate),
        "reconciliation": reconcile(client, engine.get(src) if src else None, trials, cont, src,
                                    decision),
        "contamination": cont,
        "length_decay": length_decay(ok_traces),
        "caliber_status": "missed" if caliber_missed else "ok",
        "stalls": stalls,
        "queueing": queue,
        "findings": findings,
    }
    from decodescope.analysis.goodput import goodput_of_run

    gp = goodput_of_run(run)
    if gp is not None:
        out["goodput"] = gp
    out["quantities"] = {k: q.to_dict() for k, q in run_quantities(out).items()}
    return out


def _trial_engine(t: dict[str, Any], windows: list[EngineWindow], own: list[EngineWindow],
                  src: str | None, conc: int | None) -> None:
    """The deciding source's windows over this trial, pooled: per-trial engine numbers for the
    statistics (triage, verdicts). Interval windows count only when wholly inside the trial's
    steady state; whole-trial windows (engines that count at request finish) and per-request
    reports belong to their trial. The divisor is the probe's own concurrency: the running
    gauge reads 0 or a half after a request ended, and only detects foreign load."""
    p = None
    t["engine_withheld"] = None
    if src == "request":
        p = pool(own)
    elif src is not None and t["trial_span_s"]:
        mine = [w for w in windows if w.source == src and w.t_start_s is not None
                and w.t_end_s is not None]
        whole = [w for w in mine if "trial" in w.flags and _inside(w, t["trial_span_s"], 0.5)]
        steady = t["steady_span_s"]
        inside = [w for w in mine if "trial" not in w.flags and steady
                  and _inside(w, steady, 0.0)]
        picked = whole or inside
        decoding = [(a, b) for a, b in t.get("decoding_perf_s") or []]
        anchor = t.get("wall_anchor_s") or 0.0
        picked = [dataclasses.replace(w, running=_own_running(w, decoding, anchor, conc))
                  for w in picked if "contaminated" not in w.flags] or picked
        p = pool(picked)
        if p is None and mine:
            t["engine_withheld"] = ("no engine window lies inside this trial's steady state: "
                                    "the engine's windows are coarser than the trial")
        elif p is None:
            t["engine_withheld"] = f"no {src} window with a time span in this trial"
    if p is not None and (t.get("stall_time_share") or 0.0) > STALL_SHARE_WITHHOLDS:
        # Whole-request / whole-window engine timings include the pauses the client left out.
        t["engine_withheld"] = (f"stalls took {100 * t['stall_time_share']:.0f}% of this "
                                "trial, and the engine's whole-request timings include them")
        p = {**p, "decode_rate_per_request": None, "step_rate": None}
    t["engine_source"] = src if p else None
    t["engine_decode_rate"] = p.get("decode_rate_per_request") if p else None
    t["engine_mal"] = p.get("mal") if p else None
    t["engine_step_rate"] = p.get("step_rate") if p else None
    t["engine_tokens_per_step"] = p.get("tokens_per_step") if p else None
    t["engine_running"] = p.get("running_mean") if p else None


def _own_running(w: EngineWindow, decoding: list[tuple[float, float]], anchor: float,
                 conc: int | None) -> float | None:
    """The probe's own requests decoding during an interval window, on average (from the
    client's traces); the probe's in-flight count for whole-trial windows and when the traces
    cannot say."""
    if w.source != "request" and "trial" not in w.flags and w.t_start_s is not None \
            and w.t_end_s is not None \
            and w.t_end_s > w.t_start_s and decoding:
        a, b = w.t_start_s - anchor, w.t_end_s - anchor
        own = own_request_seconds(decoding, a, b) / (b - a)
        if own > 0:
            return own
    return float(conc) if conc is not None else w.running


def _inside(w: EngineWindow, span: list[float], slack_s: float) -> bool:
    assert w.t_start_s is not None and w.t_end_s is not None
    return w.t_start_s >= span[0] - slack_s and w.t_end_s <= span[1] + slack_s


def _scrapes(run: StoredRun) -> list[Scrape]:
    data = (run.series or {}).get("prometheus") or {}
    return sorted((Scrape.from_dict(d) for d in data.get("scrapes") or []), key=lambda s: s.t_s)


def _span_of(tv: dict[str, Any], scrapes: list[Scrape]) -> SpanNumbers | None:
    steady = tv.get("steady_perf_s")
    if tv["status"] != "ok" or not steady:
        return None
    return trial_span(scrapes, (steady[0], steady[1]),
                      [(a, b) for a, b in tv.get("decoding_perf_s") or []],
                      [(a, b) for a, b in tv.get("stalls_perf_s") or []])


def _trial_span_engine(t: dict[str, Any], sp: SpanNumbers | None) -> None:
    t["engine_source"] = "prometheus" if sp is not None else None
    t["engine_span"] = sp.to_dict() if sp is not None else None
    t["engine_withheld"] = sp.withheld if sp is not None else "no engine counters in this trial"
    t["engine_decode_rate"] = sp.decode_rate if sp else None
    t["engine_step_rate"] = sp.step_rate if sp else None
    t["engine_mal"] = sp.mal if sp else None
    t["engine_tokens_per_step"] = sp.tokens_per_step if sp else None
    t["engine_running"] = (sp.request_s / sp.span_s) if (sp and sp.span_s) else None


def pool_spans(spans: list[SpanNumbers]) -> dict[str, Any] | None:
    """Run-level engine numbers: the trials' span counts summed (same keys as `pool`)."""
    if not spans:
        return None
    timed = [s for s in spans if s.withheld is None]

    def total(xs: list[SpanNumbers], key: str) -> int | None:
        vals = [getattr(x, key) for x in xs]
        return None if (not vals or any(v is None for v in vals)) else int(sum(vals))

    gen, acc = total(timed, "generation_tokens"), total(timed, "accepted_tokens")
    drafts, dtok = total(spans, "drafts"), total(spans, "draft_tokens")
    acc_all, gen_all = total(spans, "accepted_tokens"), total(spans, "generation_tokens")
    steps_all = (gen_all - acc_all) if (gen_all is not None and acc_all is not None) else None
    steps = (gen - acc) if (gen is not None and acc is not None) else None
    req_s = sum(s.request_s for s in timed)
    span_s = sum(s.span_s for s in timed)
    return {
        "windows": len(spans),
        "sources": ["prometheus"],
        "duration_s": span_s or None,
        "decode_s": None,
        "generation_tokens": gen_all,
        "steps": steps_all,
        "drafts": drafts,
        "draft_tokens": dtok,
        "accepted_tokens": acc_all,
        "decode_rate": (gen / span_s) if (gen is not None and span_s) else None,
        "decode_rate_per_request": (gen / req_s) if (gen is not None and req_s) else None,
        "mal": (1 + acc_all / drafts) if (drafts and acc_all is not None) else None,
        "tokens_per_step": (gen_all / steps_all) if (gen_all is not None and steps_all) else None,
        "acceptance_rate": (acc_all / dtok) if (acc_all is not None and dtok) else None,
        "per_position_acceptance": None,
        "step_rate": (steps / req_s) if (steps is not None and req_s) else None,
        "draft_step_rate": None,
        "draft_coverage": (drafts / steps_all) if (drafts is not None and steps_all) else None,
        "batch_step_rate": None,
        "running_mean": (req_s / span_s) if span_s else None,
        "running_max": max((s.max_occupancy for s in spans if s.max_occupancy is not None),
                           default=None),
        "contaminated_windows": 0,
        "spans_withheld": len(spans) - len(timed),
    }


def _suspend_if_disagree(trials: list[dict[str, Any]], conc: int | None,
                         findings: list[dict[str, Any]]) -> None:
    """Client and engine measure the same thing at concurrency 1 on a quiet engine: when they
    disagree by more than ENGINE_CLIENT_AGREE_PCT, one of them is wrong, so the engine number
    no longer decides (kept as `engine_decode_rate_suspended`)."""
    if conc != 1:
        return
    gaps = [100.0 * (t["decode_rate"] - t["engine_decode_rate"]) / t["engine_decode_rate"]
            for t in trials if t["status"] == "ok" and t.get("decode_rate")
            and t.get("engine_decode_rate")]
    if len(gaps) < 2:
        return
    gap = sorted(gaps)[len(gaps) // 2]
    if abs(gap) <= ENGINE_CLIENT_AGREE_PCT:
        return
    for t in trials:
        t["engine_decode_rate_suspended"] = t.get("engine_decode_rate")
        t["engine_decode_rate"] = None
    _add(findings, Finding(
        "engine.disagrees",
        f"client and engine decode rates differ by {gap:+.1f}% (median of {len(gaps)} trials) "
        "at concurrency 1: one of them is wrong, so the engine number does not decide; the "
        "client's does", "Check the engine's counters (a gateway, a second replica behind the "
        "URL, or a stats bug) with `decodescope runs show`", severity="warning").to_dict())


def _first_trial_shift(trials: list[dict[str, Any]], findings: list[dict[str, Any]],
                       run: StoredRun) -> None:
    """A first trial unlike the rest (analysis.first_trial), with the advice this run's
    warm-up and sampling make true."""
    warmup = run.meta.get("warmup")
    temp = ((run.caliber or {}).get("sampling") or {}).get("temperature")
    f = first_trial_shift(trials, warmup=warmup if isinstance(warmup, int) else None,
                          greedy=(temp == 0) if isinstance(temp, (int, float)) else None)
    if f is not None:
        _add(findings, f.to_dict())


def _stall_summary(ok: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not ok:
        return None
    lengths = [x for t in ok for x in (b - a for a, b in t.get("stalls_perf_s") or [])]
    shares = [t["stall_time_share"] for t in ok if t.get("stall_time_share") is not None]
    return {"count": len(lengths), "requests": sum(t["requests"] for t in ok),
            "trials_with_stalls": sum(1 for t in ok if t.get("stall_count")),
            "min_s": min(lengths, default=None), "max_s": max(lengths, default=None),
            "total_s": sum(lengths),
            "time_share": sum(shares) / len(shares) if shares else None}


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
