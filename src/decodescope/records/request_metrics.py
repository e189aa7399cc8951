"""Client-side numbers of one request, derived from its trace (pure, recomputable).

- TTFT: send -> first chunk carrying any token (reasoning or content).
- TTFOT: send -> first chunk carrying output (non-reasoning) text.
- ITL: a chunk carrying n tokens after a gap g gives n samples of g/n; the first chunk's extra
  tokens give samples of 0. So len(itl) == output tokens - 1 and sum(itl) == t_last - t_first.
- decode rate: tokens per second after the caliber's steady-state start, measured between
  token-carrying chunks, so TTFT is never inside it. Stalls (glossary) are kept out of it.
- stall: a gap between token-carrying chunks longer than STALL_FACTOR × the request's own
  median gap and at least STALL_MIN_S — the server paused (preemption, swapping, another
  request's prefill, host contention), not a slower step. Reported by count and length;
  `decode_rate_with_stalls` keeps them in.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from decodescope.records.trace import RequestTrace

# A gap is a stall when it is this many times the request's median inter-chunk gap ...
STALL_FACTOR = 10.0
# ... and at least this long (a scheduler hiccup of a few ms is not worth a name).
STALL_MIN_S = 0.05
# Gaps shorter than this are inside one step's burst of chunks (the server writing several
# SSE events of one step), not between steps: even an H200 at ~300 steps/s takes ~3 ms a step.
BURST_GAP_S = 0.0005


@dataclass(frozen=True)
class RequestMetrics:
    ttft_s: float | None
    ttfot_s: float | None
    e2e_s: float | None
    output_tokens: int | None  # from usage, else from the server's tokenizer (None: unknown)
    prompt_tokens: int | None
    reasoning_tokens: int | None  # usage detail, else tokens of reasoning chunks
    # "usage" (exact) | "tokenized" (the server's tokenizer over each chunk) | "one-per-chunk"
    # (usage total = chunks) | "estimated" (usage total only) | "unknown" (no usage, no tokenizer)
    tokens_per_chunk_source: str
    chunks_with_tokens: int
    mean_tokens_per_chunk: float | None
    decode_rate: float | None  # steady-state tokens/s
    decode_rate_all: float | None  # from first token to last, tokens/s
    steady_tokens: int | None  # tokens inside the steady-state window
    steady_t_start_s: float | None  # perf_counter bounds of the steady-state window
    steady_t_end_s: float | None
    itl_count: int
    itl_sum_s: float | None
    itl_median_s: float | None
    itl_p99_s: float | None
    finish_reason: str | None
    stalls: tuple[tuple[float, float], ...] = ()  # (start, end) perf_counter of each stall
    decode_rate_with_stalls: float | None = None  # steady-state rate with the stalls kept in

    @property
    def stall_s(self) -> float:
        return sum(b - a for a, b in self.stalls)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def token_points(trace: RequestTrace) -> tuple[list[tuple[float, int, bool]], str]:
    """(t_recv_s, tokens, is_reasoning) for every chunk that carried tokens, and the source
    of the per-chunk counts."""
    text_chunks = [c for c in trace.chunks if c.content or c.reasoning or (c.tokens or 0) > 0]
    if trace.chunks and all(c.tokens is not None for c in trace.chunks):
        pts = [(c.t_recv_s, c.tokens or 0, bool(c.reasoning) and not c.content)
               for c in trace.chunks if (c.tokens or 0) > 0]
        return pts, "usage"
    tokenized = trace.extra.get("chunk_tokens") if trace.extra else None
    if isinstance(tokenized, list) and len(tokenized) == len(trace.chunks):
        pts = [(c.t_recv_s, int(n), bool(c.reasoning) and not c.content)
               for c, n in zip(trace.chunks, tokenized, strict=True) if n]
        return pts, "tokenized"
    pts = [(c.t_recv_s, 1, bool(c.reasoning) and not c.content)
           for c in text_chunks if c.content or c.reasoning]

    total = trace.completion_tokens
    if total is None:
        # No usage and no tokenizer: a chunk may carry several tokens (speculative decoding),
        # so counting chunks would understate the rate. The count is unknown.
        return pts, "unknown"
    if total == len(pts):
        return pts, "one-per-chunk"
    # Chunks and usage disagree (several tokens per chunk without continuous usage, or the
    # usage counts an EOS): keep chunk times, scale counts so the total matches usage.
    if pts:
        scale = total / len(pts)
        acc, out = 0.0, []
        for t, _, r in pts:
            prev = round(acc)
            acc += scale
            out.append((t, round(acc) - prev, r))
        return [p for p in out if p[1] > 0], "estimated"
    return [], "estimated"


def compute(trace: RequestTrace, steady_state_start: int = 0) -> RequestMetrics:
    pts, source = token_points(trace)
    ttft = pts[0][0] - trace.t_send_s if pts else None
    out_pts = [p for p in pts if not p[2]]
    ttfot = out_pts[0][0] - trace.t_send_s if out_pts else None
    n_tokens = sum(p[1] for p in pts)
    reasoning = trace.reasoning_tokens
    if reasoning is None and pts:
        reasoning = reasoning_tokens_seen(trace, pts)

    itl: list[float] = []
    if pts:
        itl.extend([0.0] * (pts[0][1] - 1))
        for (t0, _, _), (t1, n, _) in zip(pts, pts[1:], strict=False):
            itl.extend([(t1 - t0) / n] * n)
    itl_sorted = sorted(itl)

    decode_all = None
    if len(pts) >= 2 and pts[-1][0] > pts[0][0]:
        decode_all = (n_tokens - pts[0][1]) / (pts[-1][0] - pts[0][0])

    decode_wall, steady_tokens, t_a, t_b = _steady(pts, steady_state_start)
    if source == "unknown":
        decode_wall = decode_all = None
    stalls = stall_gaps(pts)
    decode = decode_wall
    if decode_wall is not None and steady_tokens and t_a is not None and t_b is not None:
        inside = sum(max(0.0, min(e, t_b) - max(s, t_a)) for s, e in stalls)
        if inside and t_b - t_a - inside > 0:
            decode = steady_tokens / (t_b - t_a - inside)
    return RequestMetrics(
        ttft_s=ttft,
        ttfot_s=ttfot,
        e2e_s=(trace.t_done_s - trace.t_send_s) if trace.t_done_s is not None else None,
        output_tokens=(trace.completion_tokens if trace.completion_tokens is not None
                       else n_tokens if source == "tokenized" else None),
        prompt_tokens=trace.prompt_tokens,
        reasoning_tokens=reasoning,
        tokens_per_chunk_source=source,
        chunks_with_tokens=len(pts),
        mean_tokens_per_chunk=(n_tokens / len(pts)) if (pts and source != "unknown") else None,
        decode_rate=decode,
        decode_rate_all=decode_all,
        steady_tokens=steady_tokens,
        steady_t_start_s=t_a,
        steady_t_end_s=t_b,
        itl_count=len(itl),
        itl_sum_s=sum(itl) if itl else None,
        itl_median_s=_pct(itl_sorted, 50),
        itl_p99_s=_pct(itl_sorted, 99),
        finish_reason=trace.finish_reason,
        stalls=tuple(stalls),
        decode_rate_with_stalls=decode_wall,
    )


def stall_gaps(pts: list[tuple[float, int, bool]]) -> list[tuple[float, float]]:
    """(start, end) of every gap between token-carrying chunks that is a stall.

    The reference is the request's own step time: the median of the gaps between steps.
    Servers that stream a step's tokens as one chunk each (llama.cpp with speculation) send
    bursts whose inner gaps are microseconds; those are not steps and are left out of the
    median (below BURST_GAP_S), else every real step would read as a stall."""
    gaps = [(t0, t1) for (t0, _, _), (t1, _, _) in zip(pts, pts[1:], strict=False)]
    steps = sorted(t1 - t0 for t0, t1 in gaps if t1 - t0 >= BURST_GAP_S)
    if len(steps) < 3:
        return []
    median = steps[len(steps) // 2]
    limit = max(STALL_FACTOR * median, STALL_MIN_S)
    return [(t0, t1) for t0, t1 in gaps if t1 - t0 > limit]


def reasoning_tokens_seen(trace: RequestTrace, pts: list[tuple[float, int, bool]]) -> int:
    """Reasoning tokens when usage has no detail: tokens of reasoning-only chunks, plus, for a
    chunk carrying both (the switch from reasoning to content), a share by text length."""
    total = sum(p[1] for p in pts if p[2])
    for c in trace.chunks:
        if c.reasoning and c.content and c.tokens:
            share = len(c.reasoning) / (len(c.reasoning) + len(c.content))
            # each non-empty fragment holds at least one token
            total += min(max(1, round(c.tokens * share)), max(1, c.tokens - 1))
    return total


def _steady(pts: list[tuple[float, int, bool]], start: int
            ) -> tuple[float | None, int | None, float | None, float | None]:
    """Rate over chunks after `start` tokens: tokens of chunks after the anchor chunk divided by
    the time from the anchor chunk (the chunk that crossed `start`) to the last chunk."""
    cum = 0
    anchor = None
    for i, (_, n, _) in enumerate(pts):
        cum += n
        if cum >= max(start, 1):
            anchor = i
            break
    if anchor is None or anchor >= len(pts) - 1:
        return None, None, None, None
    t_a, t_b = pts[anchor][0], pts[-1][0]
    tokens = sum(p[1] for p in pts[anchor + 1:])
    if t_b <= t_a:
        return None, None, None, None
    return tokens / (t_b - t_a), tokens, t_a, t_b


def _pct(sorted_xs: list[float], q: float) -> float | None:
    if not sorted_xs:
        return None
    from decodescope.records.summary import percentile

    return percentile(sorted_xs, q)


def decode_rate_by_position(trace: RequestTrace, bucket_tokens: int = 256
                            ) -> list[tuple[int, float]]:
    """(bucket start position, tokens/s) along the output: the length-decay curve. Stalls are
    left out of the time, as from the decode rate."""
    pts, source = token_points(trace)
    out: list[tuple[int, float]] = []
    if len(pts) < 2 or source == "unknown":
        return out
    lost = 0.0
    shifted = [pts[0]]
    stalls = {t1 for _, t1 in stall_gaps(pts)}
    for (t0, _, _), (t1, n, r) in zip(pts, pts[1:], strict=False):
        if t1 in stalls:
            lost += t1 - t0
        shifted.append((t1 - lost, n, r))
    pts = shifted
    cum = pts[0][1]
    b_start_t, b_start_pos, b_tokens = pts[0][0], cum, 0
    for t, n, _ in pts[1:]:
        cum += n
        b_tokens += n
        if cum - b_start_pos >= bucket_tokens:
            if t > b_start_t:
                out.append((b_start_pos, b_tokens / (t - b_start_t)))
            b_start_t, b_start_pos, b_tokens = t, cum, 0
    return out
