"""Length decay: decode rate as a function of output position, and its linear trend.

Attention cost grows with the sequence, so a request's decode rate usually falls along its
output; two numbers taken at different output lengths differ by this alone. Each request's
(position, rate) buckets get a least-squares line; its `per_1k_pct` is the change of the
fitted rate per 1,000 output tokens relative to the fit at the first bucket, and the run's
value is the median over requests. `r2` is that of one line through every request's rates
relative to its own mean.

The slope is stated per 1,000 tokens, so it is only given for outputs at least
MIN_DECAY_OUTPUT_TOKENS long (median over requests); shorter, it is withheld with the reason
and the length that would suffice (`decay_pct` applies the same rule to stored results).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from decodescope.records.request_metrics import decode_rate_by_position
from decodescope.records.trace import RequestTrace

MIN_BUCKET_TOKENS = 16  # below this, chunk timing jitter dominates a bucket's rate
MAX_BUCKET_TOKENS = 256
BUCKETS_PER_REQUEST = 8  # enough points for a slope, few enough for stable bucket rates
MIN_POSITIONS = 3  # a line through fewer distinct positions says nothing
# Shortest output (tokens per request, median over requests) whose slope is stated per 1K
# tokens. The bucket rates of one output wobble with its content (under speculation each
# bucket's MAL follows the text: tens of percent) and with chunk timing; a line fitted over a
# span S extrapolates that wobble to 1K tokens by 1000 / S. On a real H200 (issue 21) 384-token
# outputs read "+128 … +148 % per 1K" while the seed's real decays are a few percent per 1K
# (NVFP4 flat, AWQ decays). From 2,048 tokens the factor is at most 0.5 and the fit covers
# the range it reports, so a few-percent decay stands out of the wobble.
MIN_DECAY_OUTPUT_TOKENS = 2048


def bucket_tokens_for(output_tokens: int | None) -> int:
    n = (output_tokens or 0) // BUCKETS_PER_REQUEST
    return max(MIN_BUCKET_TOKENS, min(MAX_BUCKET_TOKENS, n))


def length_decay(traces: Iterable[RequestTrace], bucket_tokens: int | None = None
                 ) -> dict[str, Any] | None:
    traces = [t for t in traces if t.ok]
    if not traces:
        return None
    if bucket_tokens is None:
        outs = sorted(t.completion_tokens for t in traces if t.completion_tokens)
        bucket_tokens = bucket_tokens_for(outs[len(outs) // 2] if outs else None)
    raw: list[tuple[float, float]] = []  # (position, rate relative to the request's mean)
    per_request: list[float] = []
    by_pos: dict[int, list[float]] = {}
    for t in traces:
        pts = decode_rate_by_position(t, bucket_tokens)
        if not pts:
            continue
        mean = sum(r for _, r in pts) / len(pts)
        for p, r in pts:
            by_pos.setdefault(int(p), []).append(r)
        if mean <= 0:
            continue
        rel = [(float(p), r / mean) for p, r in pts]
        raw += rel
        pct = _pct_per_1k(rel)
        if pct is not None:
            per_request.append(pct)
    points = [{"position": p, "rate": sum(rs) / len(rs), "n": len(rs)}
              for p, rs in sorted(by_pos.items())]
    outs = sorted(t.completion_tokens for t in traces if t.completion_tokens)
    output_tokens: float | None = outs[len(outs) // 2] if outs else None
    if output_tokens is None and points:  # no usage counts: the last bucket's end
        output_tokens = float(points[-1]["position"] + bucket_tokens)
    out: dict[str, Any] = {"bucket_tokens": bucket_tokens, "requests": len(traces),
                           "points": points, "per_1k_pct": None, "per_request_pct": per_request,
                           "r2": None, "output_tokens": output_tokens,
                           "min_output_tokens": MIN_DECAY_OUTPUT_TOKENS}
    short = too_short(output_tokens)
    if short is not None:
        out.update(per_request_pct=[], reason=short)
        return out
    fit = linear_fit(raw)
    if fit is None or len(by_pos) < MIN_POSITIONS or not per_request:
        out["reason"] = f"fewer than {MIN_POSITIONS} output positions to fit"
        return out
    # The median over requests: one request slowed by something else (a neighbour's load
    # burst) must not set the run's decay.
    per_request_sorted = sorted(per_request)
    n = len(per_request_sorted)
    mid = per_request_sorted[n // 2] if n % 2 else (per_request_sorted[n // 2 - 1]
                                                    + per_request_sorted[n // 2]) / 2
    out.update(per_1k_pct=mid, r2=fit[2])
    return out


def too_short(output_tokens: int | float | None, *, approx: bool = False) -> str | None:
    """Why outputs of this length cannot carry a slope per 1K tokens, or None when they can
    (`approx`: the length was read from the last bucket, not counted)."""
    if output_tokens is not None and output_tokens >= MIN_DECAY_OUTPUT_TOKENS:
        return None
    have = ("unknown" if output_tokens is None
            else f"{'about ' if approx else ''}{output_tokens:.0f} tokens")
    return (f"withheld: outputs of {have} are too short for a slope per 1K tokens; it needs "
            f"≥ {MIN_DECAY_OUTPUT_TOKENS} output tokens per request (a caliber with max_tokens "
            f"≥ {MIN_DECAY_OUTPUT_TOKENS})")


def decay_pct(d: Any) -> float | None:
    """A stored `length_decay` result's % per 1K tokens, or None when it has none or its
    outputs are too short (results stored before the rule: their output length is read from
    the last bucket's position; a result that records no length at all keeps its number)."""
    if not isinstance(d, dict):
        return None
    v = d.get("per_1k_pct")
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return None
    n = output_length(d)
    return None if n is not None and too_short(n) else float(v)


def output_length(d: dict[str, Any]) -> float | None:
    """Output tokens per request of a stored `length_decay` result."""
    n = d.get("output_tokens")
    if isinstance(n, (int, float)):
        return float(n)
    pts, width = d.get("points") or [], d.get("bucket_tokens")
    pos: list[float] = [float(p["position"]) for p in pts if isinstance(p, dict)
                        and isinstance(p.get("position"), (int, float))]
    if not pos or not isinstance(width, (int, float)):
        return None
    return float(max(pos) + width)


def withheld_reason(d: Any) -> str | None:
    """Why a stored `length_decay` result states no % per 1K tokens (None when it does)."""
    if not isinstance(d, dict) or decay_pct(d) is not None:
        return None
    if d.get("reason"):
        return str(d["reason"])
    return too_short(output_length(d), approx="output_tokens" not in d) or "no fit"


def _pct_per_1k(points: list[tuple[float, float]]) -> float | None:
    """% change of the fitted rate per 1,000 tokens, relative to the fit at the first point."""
    if len({p for p, _ in points}) < MIN_POSITIONS:
        return None
    fit = linear_fit(points)
    if fit is None:
        return None
    slope, intercept, _ = fit
    base = intercept + slope * min(p for p, _ in points)
    return 100.0 * slope * 1000 / base if base > 0 else None


def linear_fit(points: list[tuple[float, float]]) -> tuple[float, float, float | None] | None:
    """Least squares y = a + b x: (b, a, r²); None without two distinct x."""
    n = len(points)
    if n < 2:
        return None
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    if sxx <= 0:
        return None
    sxy = sum((p[0] - mx) * (p[1] - my) for p in points)
    b = sxy / sxx
    a = my - b * mx
    syy = sum((p[1] - my) ** 2 for p in points)
    r2 = (sxy * sxy / (sxx * syy)) if syy > 0 else None
    return b, a, r2
