"""Decomposition of a probe: engine decode rate, MAL and step rate over the probe's own window,
beside the client's numbers (glossary: decode rate ≈ step rate × MAL).

Engine windows come from Prometheus scrapes (source="prometheus"), the engine log
(source="log") or per-request engine reports (source="request", llama.cpp `timings`).
Windows are pooled by summing counts, never by averaging printed rates.

Steps. Every decode step of a request emits its accepted draft tokens plus one, so over a
window `steps = generated − accepted` exactly, whether or not the step had a draft. When
every step drafts (MTP, EAGLE) steps = drafts and tokens per step = MAL = 1 + accepted /
drafts. N-gram speculation has steps without a draft (no match): there MAL (which counts
drafted steps only) is larger than tokens per step, and `draft_coverage` = drafts / steps
says by how much. The exact identity used for the decomposition is
decode rate = step rate × tokens per step.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from decodescope.edge import count_field, seconds_field
from decodescope.errors import ProtocolError
from decodescope.records.trace import RequestTrace
from decodescope.records.window import EngineWindow

# Without a window wholly inside a span, one counts when at least this share of it lies
# inside: a window that is mostly prefill or idle would dilute the engine's decode rate.
MIN_OVERLAP_SHARE = 0.5
DECIDING_SOURCES = ("prometheus", "log", "request")  # best first
EXCLUDED_FLAGS = ("reset", "gap")  # windows whose counts are unknown or untrustworthy
# Below this share of drafted steps, MAL and tokens per step differ enough to say so.
FULL_COVERAGE = 0.9

Span = Sequence[float]  # [t_start_s, t_end_s], epoch seconds


def pool(windows: Iterable[EngineWindow]) -> dict[str, Any] | None:
    """Pool windows by summing counts; rates derived from the sums."""
    ws = [w for w in windows if not set(w.flags) & set(EXCLUDED_FLAGS)]
    if not ws:
        return None
    gen = _sum(w.generation_tokens for w in ws)
    drafts = _sum(w.drafts for w in ws)
    acc = _sum(w.accepted_tokens for w in ws)
    dtok = _sum(w.draft_tokens for w in ws)
    durs = [w.duration_s for w in ws]
    dur = sum(d for d in durs if d is not None) if all(d is not None for d in durs) else None
    running = _weighted([(w.running, w.duration_s) for w in ws])
    busy = _sum_f(w.printed.get("decode_s") for w in ws)  # engine-timed decode seconds
    busy = busy if busy else None
    decode = gen / dur if (gen is not None and dur) else None
    printed = [w.printed["generation_throughput"] for w in ws
               if "generation_throughput" in w.printed]
    whole_trial = all("trial" in w.flags for w in ws)
    if busy is not None and gen is not None:
        per_req = gen / busy  # summed per request by the engine: already per request
    elif printed and running and (whole_trial or decode is None):
        # SGLang: counters move at request finish, so a trial's tokens / time would hold
        # its prefill; its decode-only throughput gauge is the better number.
        per_req = sum(printed) / len(printed) / running
    elif decode is not None and running:
        per_req = decode / running
    else:
        per_req = None
    mal = (1 + acc / drafts) if (drafts and acc is not None) else None
    if mal is None:
        reported = [w.mal for w in ws if w.mal is not None]
        mal = sum(reported) / len(reported) if reported else None
    steps = (gen - acc) if (gen is not None and acc is not None and gen > acc) else None
    per_req_s = busy if busy is not None else (dur * running if (dur and running) else None)
    step_rate = steps / per_req_s if (steps is not None and per_req_s) else None
    draft_step_rate = drafts / per_req_s if (drafts is not None and per_req_s) else None
    tokens_per_step = gen / steps if (gen is not None and steps) else None
    if step_rate is None and per_req is not None and mal:
        step_rate, tokens_per_step = per_req / mal, mal  # no counts: the identity gives it
    batch = _sum_f(w.printed.get("batch_steps") for w in ws)
    return {
        "windows": len(ws),
        "sources": sorted({w.source for w in ws}),
        "duration_s": dur,
        "decode_s": busy,
        "generation_tokens": gen,
        "steps": steps,
        "drafts": drafts,
        "draft_tokens": dtok,
        "accepted_tokens": acc,
        "decode_rate": decode,
        "decode_rate_per_request": per_req,
        "mal": mal,
        "tokens_per_step": tokens_per_step,
        "acceptance_rate": (acc / dtok) if (acc is not None and dtok) else None,
        "per_position_acceptance": _per_pos(ws, drafts),
        "step_rate": step_rate,
        "draft_step_rate": draft_step_rate,
        "draft_coverage": (drafts / steps) if (drafts is not None and steps) else None,
        "batch_step_rate": (batch / dur) if (batch is not None and dur) else None,
        "running_mean": running,
        "running_max": max((w.running for w in ws if w.running is not None), default=None),
        "contaminated_windows": sum(1 for w in ws if "contaminated" in w.flags),
    }


def select(windows: Iterable[EngineWindow], spans: Sequence[Span]) -> list[EngineWindow]:
    """Windows that belong to the spans. Per span: the windows wholly inside it (their
    running-request gauges are not read while a request starts or ends); when there are
    none, the windows mostly inside it or containing it (a whole-trial window, or an
    interval longer than a short trial). No spans: every window. Windows without trusted
    counts (reset, gap) are left out first."""
    ws = [w for w in windows if not set(w.flags) & set(EXCLUDED_FLAGS)]
    if not spans:
        return ws
    timed = [w for w in ws if w.t_start_s is not None and w.t_end_s is not None]
    # Windows without clock times (llama.cpp log lines carry elapsed time only) belong.
    picked: dict[int, EngineWindow] = {id(w): w for w in ws
                                       if w.t_start_s is None or w.t_end_s is None}
    for s in spans:
        inside = [w for w in timed if _inside(w, s)]
        for w in inside or [w for w in timed if _belongs(w, s)]:
            picked[id(w)] = w
    if picked:
        return [w for w in ws if id(w) in picked]
    return [w for w in timed if any(_overlap(w, s) > 0 for s in spans)]


def _inside(w: EngineWindow, s: Span) -> bool:
    assert w.t_start_s is not None and w.t_end_s is not None
    return w.t_start_s >= s[0] and w.t_end_s <= s[1]


def _belongs(w: EngineWindow, s: Span) -> bool:
    assert w.t_start_s is not None and w.t_end_s is not None
    d = w.t_end_s - w.t_start_s
    ov = _overlap(w, s)
    if ov <= 0:
        return False
    return d <= 0 or ov >= MIN_OVERLAP_SHARE * d or (w.t_start_s <= s[0] and w.t_end_s >= s[1])


def _overlap(w: EngineWindow, s: Span) -> float:
    assert w.t_start_s is not None and w.t_end_s is not None
    return min(w.t_end_s, s[1]) - max(w.t_start_s, s[0])


def request_windows(traces: Sequence[RequestTrace], wall_anchor_s: float, engine: str | None
                    ) -> list[EngineWindow]:
    """source="request" windows from llama.cpp's final-chunk `timings` (one per request):
    predicted_n tokens over predicted_ms, draft_n drafted, draft_n_accepted accepted
    (the two draft fields are omitted by the engine when 0)."""
    out = []
    for tr in traces:
        tm = tr.timings or {}
        if not tr.ok:
            continue
        try:  # checked at the edge when measured; a run stored before that may hold junk
            n = count_field(tm.get("predicted_n"), "timings.predicted_n", "stored trace")
            decode_s = seconds_field(tm.get("predicted_ms"), "timings.predicted_ms",
                                     "stored trace", scale=1e-3)
            prompt_n, draft_n, accepted_n = (
                count_field(tm.get(k), f"timings.{k}", "stored trace")
                for k in ("prompt_n", "draft_n", "draft_n_accepted"))
        except ProtocolError:
            continue
        if n is None or decode_s is None or decode_s <= 0:
            continue
        ms = decode_s * 1000.0
        times = [c.t_recv_s for c in tr.chunks if c.content or c.reasoning or (c.tokens or 0) > 0]
        t_end = (times[-1] if times else (tr.t_done_s or tr.t_send_s)) + wall_anchor_s
        out.append(EngineWindow(
            "request", engine or "unknown", t_end - ms / 1000.0, t_end,
            generation_tokens=n, prompt_tokens=prompt_n,
            draft_tokens=draft_n or 0,
            accepted_tokens=accepted_n or 0,
            running=1.0, printed={"decode_s": ms / 1000.0},
            engine_id=tr.request_id))
    return out


def deciding(pools: dict[str, dict[str, Any]]) -> tuple[str | None, dict[str, Any] | None]:
    """The engine source that decides: the first with a per-request decode rate."""
    for src in DECIDING_SOURCES:
        p = pools.get(src)
        if p and p.get("decode_rate_per_request") is not None:
            return src, p
    for src in DECIDING_SOURCES:
        if pools.get(src):
            return src, pools[src]
    return None, None


def decomposition(pools: dict[str, dict[str, Any]], client_rate: float | None
                  ) -> dict[str, Any] | None:
    src, eng = deciding(pools)
    if eng is None:
        return None
    rate, step, tps = eng.get("decode_rate_per_request"), eng.get("step_rate"), \
        eng.get("tokens_per_step")
    mal = eng.get("mal")
    # decode = step rate × tokens per step holds by construction; step rate × MAL reproduces
    # the decode rate only when every step drafts (the gap is the share of draft-less steps).
    product = step * mal if (step is not None and mal is not None) else None
    out: dict[str, Any] = {
        "source": src,
        "client_decode_rate": client_rate,
        "engine_decode_rate": rate,
        "mal": mal,
        "tokens_per_step": tps,
        "step_rate": step,
        "draft_step_rate": eng.get("draft_step_rate"),
        "draft_coverage": eng.get("draft_coverage"),
        "acceptance_rate": eng.get("acceptance_rate"),
        "per_position_acceptance": eng.get("per_position_acceptance"),
        "identity_rate": product,
        "identity_gap_pct": _pct(rate, product),
        "cross_check": {s: {k: p.get(k) for k in ("mal", "acceptance_rate",
                                                  "decode_rate_per_request", "step_rate")}
                        for s, p in pools.items() if p},
    }
    cov = eng.get("draft_coverage")
    if cov is not None and cov < FULL_COVERAGE and eng.get("mal") is not None and tps:
        # The numbers are the MAL and tokens-per-step rows' (records.quantity): said once.
        out["note"] = (f"only {100 * cov:.0f}% of steps had a draft: MAL counts the drafted "
                       "steps, tokens per step counts all of them")
    return out


def _per_pos(ws: list[EngineWindow], drafts: int | None) -> list[float] | None:
    if not drafts or any(w.accepted_per_pos is None for w in ws):
        return None
    k = max(len(w.accepted_per_pos or ()) for w in ws)
    tot = [0] * k
    for w in ws:
        for i, v in enumerate(w.accepted_per_pos or ()):
            tot[i] += v
    return [t / drafts for t in tot]


def _weighted(pairs: list[tuple[float | None, float | None]]) -> float | None:
    vals = [(v, d) for v, d in pairs if v is not None]
    if not vals:
        return None
    if all(d for _, d in vals):
        tot = sum(d for _, d in vals if d)
        return sum(v * d for v, d in vals if d) / tot
    return sum(v for v, _ in vals) / len(vals)


def _pct(a: float | None, b: float | None) -> float | None:
    return 100.0 * (a - b) / b if (a is not None and b) else None


def _sum(xs: Iterable[int | None]) -> int | None:
    vals = list(xs)
    if not vals or any(v is None for v in vals):
        return None
    return int(sum(v for v in vals if v is not None))


def _sum_f(xs: Iterable[float | None]) -> float | None:
    vals = list(xs)
    if not vals or any(v is None for v in vals):
        return None
    return float(sum(v for v in vals if v is not None))
