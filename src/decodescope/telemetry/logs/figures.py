"""One figure of a log summary (decode rate, MAL, step rate ... per window), in bounded memory.

A log of any size sums up in the same memory: the values are kept exactly up to EXACT_MAX
(the summary is then Summary.of's, exact), beyond that they go into log-spaced buckets of
relative width GAMMA - 1 (a DDSketch-like histogram: at most a few thousand buckets for any
spread of values). Then n, mean, stdev (Welford), min and max stay exact, and the median,
MAD and percentiles are within REL_ERROR of the exact ones (`approx` says so). A 1 GiB vLLM
log has ~370,000 windows, an SGLang one ~860,000: they sum up in ~1 MB per figure, not 8 bytes
x windows (+ 32 bytes x windows while sorting) as before.
"""

from __future__ import annotations

import math
from array import array

from decodescope.records.summary import Summary, percentile

EXACT_MAX = 1 << 17  # values kept exactly (1 MiB): every test log and a day of 10 s windows
GAMMA = 1.001  # bucket width: a value is represented within 0.05 % of itself
REL_ERROR = GAMMA - 1  # median and percentiles (half of it), MAD (med's error plus its own)
_LOG_G = math.log(GAMMA)
_log, _floor = math.log, math.floor

FAST_SUMMARY_MIN_N = 5000  # above this, summary_of skips Summary.of's exact-fraction stdev


class Figure:
    __slots__ = ("_xs", "_pos", "_neg", "_zero", "n", "_mean", "_m2", "min", "max")

    def __init__(self) -> None:
        self._xs: array[float] | None = array("d")
        self._pos: dict[int, int] = {}
        self._neg: dict[int, int] = {}
        self._zero = 0
        self.n = 0
        self._mean = self._m2 = 0.0
        self.min = math.inf
        self.max = -math.inf

    def __len__(self) -> int:
        return len(self._xs) if self._xs is not None else self.n

    @property
    def approx(self) -> bool:
        return self._xs is None

    def append(self, x: float) -> None:
        if x != x:  # NaN: no value
            return
        xs = self._xs
        if xs is not None:  # exact: the summary is computed from the values at the end
            xs.append(x)
            if len(xs) > EXACT_MAX:
                self._to_buckets(xs)
            return
        n = self.n = self.n + 1
        d = x - self._mean
        mean = self._mean = self._mean + d / n
        self._m2 += d * (x - mean)
        if x < self.min:
            self.min = x
        if x > self.max:
            self.max = x
        if x > 0:  # _bucket, inline: a call per value costs as much as the rest
            k = _floor(_log(x) / _LOG_G)
            pos = self._pos
            pos[k] = pos.get(k, 0) + 1
        else:
            self._bucket(x)

    def _to_buckets(self, xs: array[float]) -> None:
        self._xs = None
        self.n = len(xs)
        self._mean = math.fsum(xs) / self.n
        self._m2 = math.fsum((v - self._mean) ** 2 for v in xs)
        self.min, self.max = min(xs), max(xs)
        for v in xs:
            self._bucket(v)

    def _bucket(self, x: float) -> None:
        if x > 0:
            k = math.floor(math.log(x) / _LOG_G)
            self._pos[k] = self._pos.get(k, 0) + 1
        elif x < 0:
            k = math.floor(math.log(-x) / _LOG_G)
            self._neg[k] = self._neg.get(k, 0) + 1
        else:
            self._zero += 1

    def summary(self) -> Summary | None:
        if self._xs is not None:
            return summary_of(self._xs)
        vals = self._values()
        med = _quantile(vals, self.n, 50.0)
        devs = sorted((abs(v - med), c) for v, c in vals)
        return Summary(
            n=self.n, mean=self._mean,
            stdev=math.sqrt(self._m2 / (self.n - 1)) if self.n > 1 else None,
            median=med, mad=_quantile(devs, self.n, 50.0),
            p5=_quantile(vals, self.n, 5.0), p95=_quantile(vals, self.n, 95.0),
            p99=_quantile(vals, self.n, 99.0), min=self.min, max=self.max,
        )

    def _values(self) -> list[tuple[float, int]]:
        """(representative value, count) ascending; representatives clamped to [min, max]."""
        lo, hi = self.min, self.max
        out = [(min(max(-GAMMA ** (k + 0.5), lo), hi), c)
               for k, c in sorted(self._neg.items(), reverse=True)]
        if self._zero:
            out.append((0.0, self._zero))
        out += [(min(max(GAMMA ** (k + 0.5), lo), hi), c) for k, c in sorted(self._pos.items())]
        return out


def _quantile(vals: list[tuple[float, int]], n: int, q: float) -> float:
    """Linear-interpolated percentile (as records.summary.percentile) over (value, count)."""
    pos = (n - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    a = b = None
    seen = 0
    for v, c in vals:
        seen += c
        if a is None and lo < seen:
            a = v
        if hi < seen:
            b = v
            break
    assert a is not None and b is not None
    return a + (b - a) * (pos - lo)


def summary_of(values: array[float]) -> Summary | None:
    """Summary.of, with a faster exact-enough path for many values.

    Summary.of computes stdev with exact fractions (statistics.stdev): about 1.4 us per value,
    seconds for a big log. Past FAST_SUMMARY_MIN_N values the same fields are computed with
    one sort and math.fsum (agrees to ~1e-12 relative; tests/test_logs_summary.py checks).
    """
    if len(values) <= FAST_SUMMARY_MIN_N:
        return Summary.of(values)
    xs = sorted(v for v in values if v == v)
    n = len(xs)
    if n < 2:
        return Summary.of(xs)
    med = _median_sorted(xs)
    mean = math.fsum(xs) / n
    ss = math.fsum((x - mean) ** 2 for x in xs)
    return Summary(
        n=n, mean=mean, stdev=math.sqrt(ss / (n - 1)), median=med,
        mad=_median_sorted(sorted(abs(x - med) for x in xs)),
        p5=percentile(xs, 5), p95=percentile(xs, 95), p99=percentile(xs, 99),
        min=xs[0], max=xs[-1],
    )


def _median_sorted(xs: list[float]) -> float:
    n = len(xs)
    mid = n // 2
    return xs[mid] if n % 2 else (xs[mid - 1] + xs[mid]) / 2
