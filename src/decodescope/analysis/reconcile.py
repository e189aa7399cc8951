"""Reconciliation: why the client's decode rate and the engine's differ, cause by cause.

Who decides is not decided here: `reported.who_decides` decides once (the engine when it has
per-trial rates — it counts tokens where they are made, on its own clock — else the client),
and this line says that one decision. The client number is what a user sees; each cause below
estimates how far one known effect moves a client-side number away from the engine's. When
the engine's per-trial rates are suspended (client and engine disagree at concurrency 1), the
gap is still shown, from the suspended rates, so that it is the warning's gap.
"""

from __future__ import annotations

from typing import Any

# Client and engine within this are the same measurement (loopback jitter, edge chunks).
AGREE_PCT = 5.0
# A cause smaller than this is not worth a line.
MIN_CAUSE_PCT = 1.0
# More than this many tokens per chunk on average means multi-token (bursty) chunks.
MULTI_TOKEN_CHUNKS = 1.05


def reconcile(client: dict[str, Any], engine: dict[str, Any] | None, trials: list[dict[str, Any]],
              contamination: dict[str, Any] | None, source: str | None,
              deciding: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """`deciding`: the run's one decision (`reported.who_decides`); None: made here from the
    trials, the same way."""
    if deciding is None:
        from decodescope.analysis.run_quantities import who_decides

        deciding = who_decides(trials, source)
    c = _med(client.get("decode_rate"))
    ok = [t for t in trials if t.get("status") == "ok"]
    ok = [{**t, "engine_decode_rate": t["engine_decode_rate_suspended"]}
          if t.get("engine_decode_rate_suspended") is not None else t for t in ok]
    per_trial = _median([t.get("engine_decode_rate") for t in ok])
    # Like for like: the client number is a median over trials, so is the engine's when the
    # engine has per-trial windows; the gap is the median of per-trial (paired) gaps, so a
    # trial slowed by something else moves both sides and not the gap.
    e = per_trial if per_trial is not None else (
        engine.get("decode_rate_per_request") if engine else None)
    if c is None and e is None:
        return None
    pairs = [100.0 * (t["decode_rate"] - t["engine_decode_rate"]) / t["engine_decode_rate"]
             for t in ok if t.get("decode_rate") is not None and t.get("engine_decode_rate")]
    gap = _median(pairs) if pairs else (100.0 * (c - e) / e if (c is not None and e) else None)
    causes = _causes(client, engine, trials, contamination)
    who = deciding.get("source")
    out: dict[str, Any] = {"client": c, "engine": e, "gap_pct": gap, "source": source,
                           "paired_trials": len(pairs), "explained_by": causes,
                           "deciding": who, "deciding_reason": deciding.get("reason")}
    out["text"] = _text(c, e, gap, causes, source, who, paired=len(pairs))
    return out


def _causes(client: dict[str, Any], engine: dict[str, Any] | None, trials: list[dict[str, Any]],
            contamination: dict[str, Any] | None) -> list[dict[str, Any]]:
    ok = [t for t in trials if t.get("status") == "ok"]
    causes: list[dict[str, Any]] = []
    steady = _mean([t.get("decode_rate") for t in ok])
    wall = _mean([t.get("wall_rate") for t in ok])
    ttft = _med(client.get("ttft_s"))
    if steady and wall is not None:
        pct = 100.0 * (wall - steady) / steady
        if abs(pct) >= MIN_CAUSE_PCT:
            causes.append({"cause": "ttft", "pct": pct, "text": (
                f"TTFT inside wall time: tokens / end-to-end time reads {wall:.1f} tok/s "
                f"({pct:+.0f}%; TTFT {_s(ttft)}); decode rates start at the first token")})
    paused = _mean([t.get("decode_rate_with_stalls") for t in ok if t.get("stall_count")])
    if steady and paused is not None:  # the stall warning's pauses: the engine times them too
        pct = 100.0 * (paused - steady) / steady
        if abs(pct) >= MIN_CAUSE_PCT:
            causes.append({"cause": "stalls", "pct": pct, "text": (
                f"the server paused inside the outputs: with the pauses the client reads "
                f"{paused:.1f} tok/s ({pct:+.0f}%), as the engine's whole-request timings "
                "include them")})
    every = _mean([t.get("decode_rate_all") for t in ok])
    if steady and every is not None:
        pct = 100.0 * (every - steady) / steady
        if abs(pct) >= MIN_CAUSE_PCT:
            causes.append({"cause": "steady_state", "pct": pct, "text": (
                f"the caliber's steady-state window skips the first tokens; over every "
                f"token the client reads {every:.1f} tok/s ({pct:+.0f}%), as an engine that "
                "times whole requests does")})
    tpc = _med(client.get("mean_tokens_per_chunk"))
    out_tok = _med(client.get("output_tokens"))
    if tpc is not None and tpc > MULTI_TOKEN_CHUNKS and out_tok:
        pct = 100.0 * tpc / out_tok
        causes.append({"cause": "chunking", "pct": pct, "text": (
            f"{tpc:.2f} tokens per chunk: the client times chunk arrivals, so the window "
            f"edges are uncertain by one chunk (±{pct:.1f}%) and bursts hide inter-token gaps")})
    src = next((t.get("tokens_per_chunk_source") for t in ok), None)
    if src == "estimated":
        causes.append({"cause": "final_usage_chunk", "pct": None, "text": (
            "the server reports usage only in its final chunk, so tokens per chunk are "
            "estimated; ask for continuous usage (vLLM: stream_options.continuous_usage_stats)")})
    eng_tokens = _per_request_tokens(engine, ok)
    if eng_tokens is not None and out_tok:
        pct = 100.0 * (out_tok - eng_tokens) / eng_tokens
        if abs(pct) >= MIN_CAUSE_PCT:
            causes.append({"cause": "token_count", "pct": pct, "text": (
                f"the client's usage says {out_tok:.0f} output tokens per request, the engine "
                f"counted {eng_tokens:.0f} ({pct:+.0f}%)")})
    if contamination and contamination.get("flagged"):
        causes.append({"cause": "foreign_load", "pct": None, "text": (
            f"foreign load: the engine ran up to {contamination['max_running']:.1f} requests, "
            f"the probe had {contamination['in_flight']} in flight; engine per-request numbers "
            "describe that larger batch")})
    return causes


def _per_request_tokens(engine: dict[str, Any] | None, ok: list[dict[str, Any]]) -> float | None:
    """Engine generated tokens per request when the engine windows are whole requests."""
    if not engine or engine.get("generation_tokens") is None or not ok:
        return None
    if not set(engine.get("sources") or ()) <= {"request"} and not engine.get("decode_s"):
        return None  # interval windows cut requests: no per-request count
    n = sum(t.get("requests") or 0 for t in ok)
    return engine["generation_tokens"] / n if n else None


def _text(c: float | None, e: float | None, gap: float | None, causes: list[dict[str, Any]],
          source: str | None, who: str | None, *, paired: int = 0) -> str:
    decides = f"the {who} number decides" if who else "no number decides"
    if e is None:
        return f"client {c:.1f} tok/s; no engine number (no /metrics, log or timings); {decides}"
    if c is None:
        return f"engine {e:.1f} tok/s ({source}); no client decode rate; {decides}"
    # The gap of paired trials is a median of per-trial gaps: said so, since it can differ
    # from (even in sign) the gap of the two medians shown beside it.
    what = f" median of {paired} per-trial gaps" if paired > 1 else ""
    head = f"client {c:.1f} vs engine {e:.1f} tok/s ({_sign(gap)}{what}, {source})"
    if gap is not None and abs(gap) <= AGREE_PCT:
        return head + f": agree; {decides}"
    named = ", ".join(x["cause"].replace("_", " ") for x in causes) or "no known cause"
    return head + f": gap, likely {named}; {decides}"


def _med(summary: dict[str, Any] | None) -> float | None:
    return summary.get("median") if summary else None


def _median(xs: list[Any]) -> float | None:
    v = sorted(x for x in xs if x is not None)
    if not v:
        return None
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def _mean(xs: list[Any]) -> float | None:
    v = [x for x in xs if x is not None]
    return sum(v) / len(v) if v else None


def _sign(v: float | None) -> str:
    return "—" if v is None else f"{v:+.1f}%"


def _s(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f} s"
