"""Length decay: decode rate as a function of output position, and its linear trend.

Attention cost grows with the sequence, so a request's decode rate usually falls along its
output; two numbers taken at different output lengths differ by this alone. The fit pools
every request's (position, rate) buckets; `per_1k_pct` is the change of the fitted rate per
1,000 output tokens, relative to the fitted rate at the first bucket.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from decodescope.probe.metrics import decode_rate_by_position
from decodescope.probe.trace import RequestTrace

MIN_BUCKET_TOKENS = 16  # below this, chunk timing jitter dominates a bucket's rate
MAX_BUCKET_TOKENS = 256
BUCKETS_PER_REQUEST = 8  # enough points for a slope, few enough for stable bucket rates
MIN_POSITIONS = 3  # a line through fewer distinct positions says nothing


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
    raw: list[tuple[float, float]] = []
    for t in traces:
        raw += [(float(p), r) for p, r in decode_rate_by_position(t, bucket_tokens)]
    fit = linear_fit(raw)
    by_pos: dict[int, list[float]] = {}
    for p, r in raw:
        by_pos.setdefault(int(p), []).append(r)
    points = [{"position": p, "rate": sum(rs) / len(rs), "n": len(rs)}
              for p, rs in sorted(by_pos.items())]
    out: dict[str, Any] = {"bucket_tokens": bucket_tokens, "requests": len(traces),
                           "points": points, "per_1k_pct": None, "slope_per_1k": None,
                           "intercept": None, "r2": None}
    if fit is None or len(by_pos) < MIN_POSITIONS:
        out["reason"] = f"fewer than {MIN_POSITIONS} output positions to fit"
        return out
    slope, intercept, r2 = fit
    first = min(by_pos)
    base = intercept + slope * first
    out.update(slope_per_1k=slope * 1000, intercept=intercept, r2=r2,
               per_1k_pct=(100.0 * slope * 1000 / base) if base > 0 else None)
    return out


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
