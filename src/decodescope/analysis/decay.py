"""Length decay: decode rate as a function of output position, and its linear trend.

Attention cost grows with the sequence, so a request's decode rate usually falls along its
output; two numbers taken at different output lengths differ by this alone. Each request's
(position, rate) buckets get a least-squares line; its `per_1k_pct` is the change of the
fitted rate per 1,000 output tokens relative to the fit at the first bucket, and the run's
value is the median over requests. `r2` is that of one line through every request's rates
relative to its own mean.
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
    out: dict[str, Any] = {"bucket_tokens": bucket_tokens, "requests": len(traces),
                           "points": points, "per_1k_pct": None, "per_request_pct": per_request,
                           "r2": None}
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
