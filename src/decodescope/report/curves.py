"""Curves a report plots, extracted from one stored run (pure).

Every x value is in seconds since the run's first request (or in output-token positions);
a `None` y breaks a line: "no data" between two stretches, never a drawn zero.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence

from decodescope.records.request_metrics import decode_rate_by_position, token_points
from decodescope.records.stored_run import StoredRun
from decodescope.records.trace import RequestTrace
from decodescope.records.window import EngineWindow

Point = tuple[float, float | None]
DECIDING_SOURCES = ("prometheus", "log", "request")  # engine window sources, best first

# Client time buckets: about this many buckets over the run's decoding time ...
TARGET_BUCKETS = 80
# ... but long enough to hold this many chunks (a rate from one or two chunks is mostly
# timing jitter) and never longer than a vLLM log interval (coarser than the engine's own
# windows would hide what they show).
MIN_CHUNKS_PER_BUCKET = 8
MAX_BUCKET_S = 10.0
# A bucket only partly covered by a request (its first or last) is kept when at least this
# share of it was covered: a sliver of a bucket gives a rate from one or two chunks.
MIN_BUCKET_COVERAGE = 0.3
# Output-position buckets: about this many along the longest output, at a power of two ≥ 16.
TARGET_POSITION_BUCKETS = 16
MIN_POSITION_BUCKET = 16


def wall_points(run: StoredRun) -> list[list[tuple[float, int]]]:
    """(epoch seconds, tokens) of every token-carrying chunk, one list per ok request."""
    out = []
    for t in run.trials:
        for r in t.requests:
            if not r.ok:
                continue
            pts, _ = token_points(r)
            out.append([(ts + t.wall_anchor_s, n) for ts, n, _ in pts])
    return [p for p in out if p]


def run_t0(run: StoredRun) -> float | None:
    """Epoch seconds of the run's first request send (else its first engine window)."""
    sends = [t.wall_anchor_s + r.t_send_s for t in run.trials for r in t.requests]
    if sends:
        return min(sends)
    starts = [w.t_start_s for w in run.windows if w.t_start_s is not None]
    return min(starts) if starts else None


def bucket_seconds(requests: Sequence[Sequence[tuple[float, int]]]) -> float:
    spans = [p[-1][0] - p[0][0] for p in requests if len(p) > 1]
    total = sum(s for s in spans if s > 0)
    gaps = sorted(b[0] - a[0] for p in requests
                  for a, b in zip(p, p[1:], strict=False) if b[0] > a[0])
    if total <= 0 or not gaps:
        return 1.0
    shortest = MIN_CHUNKS_PER_BUCKET * gaps[len(gaps) // 2]
    return min(MAX_BUCKET_S, _nice(max(total / TARGET_BUCKETS, shortest)))


def _nice(x: float) -> float:
    """The 1-2-5 step at or above x."""
    exp = math.floor(math.log10(x))
    for m in (1, 2, 2.5, 5, 10):
        if m * 10**exp >= x:
            return float(m * 10**exp)
    return float(10 ** (exp + 1))


def client_rate(run: StoredRun, t0: float, bucket_s: float) -> list[Point]:
    """Per-request decode rate in time buckets (tokens received / covered time), the mean over
    requests active in a bucket. The first chunk of a request (its TTFT) is never counted."""
    per_bucket: dict[int, list[float]] = {}
    for pts in wall_points(run):
        if len(pts) < 2:
            continue
        first_t, last_t = pts[0][0], pts[-1][0]
        tokens: dict[int, int] = {}
        for ts, n in pts[1:]:
            b = math.floor((ts - t0) / bucket_s)
            tokens[b] = tokens.get(b, 0) + n
        b_first = math.floor((first_t - t0) / bucket_s)
        b_last = math.floor((last_t - t0) / bucket_s)
        for b in range(b_first, b_last + 1):
            lo = max(t0 + b * bucket_s, first_t)
            hi = min(t0 + (b + 1) * bucket_s, last_t)
            covered = hi - lo
            if covered < MIN_BUCKET_COVERAGE * bucket_s:
                continue
            per_bucket.setdefault(b, []).append(tokens.get(b, 0) / covered)
    return _with_gaps([((b + 0.5) * bucket_s, statistics.fmean(v))
                       for b, v in sorted(per_bucket.items())], bucket_s * 1.5)


def _with_gaps(points: list[tuple[float, float]], max_dx: float) -> list[Point]:
    out: list[Point] = []
    for i, (x, y) in enumerate(points):
        if i and x - points[i - 1][0] > max_dx:
            out.append(((x + points[i - 1][0]) / 2, None))
        out.append((x, y))
    return out


def deciding_windows(run: StoredRun) -> tuple[str | None, list[EngineWindow]]:
    """The engine windows of the best source the run has (reset windows left out)."""
    for src in DECIDING_SOURCES:
        ws = [w for w in run.windows if w.source == src and "reset" not in w.flags]
        if ws:
            return src, ws
    return None, []


def window_steps(windows: Sequence[EngineWindow], t0: float,
                 value: Callable[[EngineWindow], float | None]) -> list[Point]:
    """A step line: each window is a flat segment over its own interval; a gap between two
    windows (or a window without the value) breaks the line."""
    out: list[Point] = []
    ws = sorted((w for w in windows if w.t_start_s is not None and w.t_end_s is not None),
                key=lambda w: w.t_start_s or 0.0)
    prev_end: float | None = None
    for w in ws:
        v = value(w)
        a, b = (w.t_start_s or 0.0) - t0, (w.t_end_s or 0.0) - t0
        if v is None or b <= a:
            continue
        if prev_end is not None and a - prev_end > 1e-6 and out:
            out.append(((a + prev_end) / 2, None))
        out.extend([(a, v), (b, v)])
        prev_end = b
    return out


def engine_decode(w: EngineWindow) -> float | None:
    """Per-request decode rate of a window (aggregate when the running count is unknown)."""
    v = w.decode_rate_per_request
    if v is None and w.running is None:
        return w.decode_rate
    return v


def position_bucket(run_list: Sequence[StoredRun]) -> int:
    longest = max((r.completion_tokens or len(r.chunks) for run in run_list
                   for t in run.trials for r in t.requests if r.ok), default=0)
    size = MIN_POSITION_BUCKET
    while longest / size > TARGET_POSITION_BUCKETS:
        size *= 2
    return size


def rate_by_position(run: StoredRun, bucket_tokens: int) -> list[Point]:
    """Mean over requests of decode rate per output-position bucket (x = bucket middle)."""
    acc: dict[int, list[float]] = {}
    for t in run.trials:
        for r in t.requests:
            if r.ok:
                for pos, rate in decode_rate_by_position(r, bucket_tokens):
                    acc.setdefault(pos // bucket_tokens, []).append(rate)
    return [((b + 0.5) * bucket_tokens, statistics.fmean(v)) for b, v in sorted(acc.items())]


def acceptance_by_position(windows: Sequence[EngineWindow]) -> list[float] | None:
    """Share of drafts whose position i was accepted, for i = 1..k, pooled by summing counts."""
    ws = [w for w in windows if w.accepted_per_pos and w.drafts]
    if not ws:
        return None
    k = max(len(w.accepted_per_pos or ()) for w in ws)
    drafts = sum(w.drafts or 0 for w in ws)
    sums = [0] * k
    for w in ws:
        for i, v in enumerate(w.accepted_per_pos or ()):
            sums[i] += v
    return [s / drafts for s in sums]


def ok_requests(run: StoredRun) -> list[RequestTrace]:
    return [r for t in run.trials for r in t.requests if r.ok]
