"""Statistics of a comparison: Welch's interval for the relative change of per-trial values.

Values are rates (> 0). The change is computed on their logarithms: the difference of mean
logs is the log of the ratio of geometric means, its Welch interval maps back to a relative
change with exp(), and log-differences add up (ln D = ln S + ln M), so the decomposition of
decode rate into step rate and MAL uses the same numbers. The Student t quantile is computed
numerically (regularized incomplete beta, Numerical Recipes §6.4) — no SciPy.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from decodescope.verdict import thresholds as th

ChangeStatus = Literal[
    "up",  # beyond noise and at least the minimum effect, upwards
    "down",  # beyond noise and at least the minimum effect, downwards
    "below_min_effect",  # beyond noise but smaller than the minimum effect
    "not_significant",  # interval contains 0 and is narrow enough to say so
    "undecidable",  # interval contains 0 but is too wide to rule out a change that matters
    "no_data",  # fewer than MIN_UNITS values on a side
]


# -- Student t ---------------------------------------------------------------------------------
def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction for the incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 3e-16
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                + a * math.log(x) + b * math.log1p(-x))
    front = math.exp(ln_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


# Above this many degrees of freedom Student's t is the normal distribution to within 1e-7,
# and the lgamma / incomplete-beta forms below lose their digits (wrong from df ≈ 1e13, a
# division by zero in t_quantile at 1e20: Welch's df of a stretch whose values barely vary).
NORMAL_DF = 1e7
_NORMAL = statistics.NormalDist()


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with df degrees of freedom (df may be fractional)."""
    if df > NORMAL_DF:
        return _NORMAL.cdf(t)
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_pdf(t: float, df: float) -> float:
    if df > NORMAL_DF:
        return _NORMAL.pdf(t)
    ln = (math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
          - (df + 1) / 2 * math.log1p(t * t / df))
    return math.exp(ln)


def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t (0 < p < 1): Newton steps on t_cdf from the normal
    quantile, kept inside a bisection bracket (a few CDF evaluations instead of dozens)."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError("t_quantile needs 0 < p < 1 and df > 0")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    if p == 0.5:
        return 0.0
    if df > NORMAL_DF:
        return _NORMAL.inv_cdf(p)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    t = min(max(statistics.NormalDist().inv_cdf(p), lo), hi)
    for _ in range(100):
        f = t_cdf(t, df) - p
        if f < 0:
            lo = t
        else:
            hi = t
        step = f / t_pdf(t, df)
        nxt = t - step
        if not lo < nxt < hi:  # Newton left the bracket: bisect instead
            nxt = (lo + hi) / 2.0
        if abs(nxt - t) < 1e-12 * max(1.0, abs(t)) or hi - lo < 1e-12 * max(1.0, hi):
            return nxt
        t = nxt
    return t


def welch_df(v1: float, n1: int, v2: float, n2: int, known: float = 0.0,
             known_df: float | None = None) -> float | None:
    """Welch–Satterthwaite degrees of freedom; None when all variance terms are exact. `known`
    is a variance term with `known_df` degrees of freedom (None: exact, infinite df: it adds to
    the numerator only) — a between-run spread learned from k runs has k − 1."""
    a, b = v1 / n1, v2 / n2
    den = (a * a / (n1 - 1) if a else 0.0) + (b * b / (n2 - 1) if b else 0.0)
    if known and known_df:
        den += known * known / known_df
    if den == 0.0:
        return None
    return (a + b + known) ** 2 / den


def difference_interval(baseline: Sequence[float], current: Sequence[float],
                        confidence: float = th.CONFIDENCE) -> tuple[float, float, float] | None:
    """Current minus baseline mean with its Welch interval: (difference, low, high). For
    quantities that can be 0 on a side (a share of time lost to stalls), where a ratio cannot
    be taken. None with fewer than MIN_UNITS values on a side; an exact interval when neither
    side varies."""
    if len(baseline) < th.MIN_UNITS or len(current) < th.MIN_UNITS:
        return None
    diff = statistics.fmean(current) - statistics.fmean(baseline)
    v1, v2 = statistics.variance(baseline), statistics.variance(current)
    df = welch_df(v1, len(baseline), v2, len(current))
    if df is None:
        return diff, diff, diff
    half = t_quantile(0.5 + confidence / 2.0, df) * math.sqrt(v1 / len(baseline)
                                                              + v2 / len(current))
    return diff, diff - half, diff + half


# -- relative change ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Change:
    """Current vs baseline for one metric: ratio of geometric means with a Welch interval."""

    metric: str
    n_baseline: int
    n_current: int
    baseline: float | None  # geometric mean
    current: float | None
    rel: float | None  # current / baseline - 1
    ci_lo: float | None  # relative, at `confidence`
    ci_hi: float | None
    df: float | None
    confidence: float
    min_effect: float
    status: ChangeStatus
    trials_needed: int | None  # per side, for an interval within ±MAX_CI_HALF_WIDTH
    trials_for_min_effect: int | None = None  # per side, for an interval within ±min_effect
    p_value: float | None = None  # two-sided Welch p of "no change" (None: no data / no df)

    @property
    def log_ratio(self) -> float | None:
        return None if self.rel is None else math.log1p(self.rel)

    @property
    def half_width(self) -> float | None:
        if self.ci_lo is None or self.ci_hi is None:
            return None
        return (self.ci_hi - self.ci_lo) / 2.0

    @property
    def changed(self) -> bool:
        return self.status in ("up", "down")

    def describe(self) -> str:
        """'−39.4% (95% CI −41.0% … −37.7%)' plus the judgement, in words."""
        if self.status == "no_data" or self.rel is None:
            return f"no data (n = {self.n_baseline} vs {self.n_current}; needs ≥ {th.MIN_UNITS} each)"
        ci = ""
        if self.ci_lo is not None and self.ci_hi is not None:
            ci = f" (95% CI {pct(self.ci_lo)} … {pct(self.ci_hi)})"
        judgement = {
            "up": "beyond noise",
            "down": "beyond noise",
            "below_min_effect": f"beyond noise but below the {self.min_effect:.0%} minimum effect",
            "not_significant": "not significant",
            "undecidable": "noise too high to decide",
        }[self.status]
        return f"{pct(self.rel)}{ci}: {judgement}"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["half_width"] = self.half_width
        return d


def pct(x: float) -> str:
    """A relative value in percent with its sign, one decimal: "+4.2%", "−0.3%". A value that
    rounds to zero prints "0.0%" — never "+0.0%" or "−0.0%" (a sign the digits do not carry)."""
    s = f"{x * 100:+.1f}"
    if s in ("+0.0", "-0.0"):
        return "0.0%"
    return (s + "%").replace("-", "−")


def positive(values: Sequence[float | None]) -> list[float]:
    """The usable rate values: present, finite and > 0 (a rate of 0 is a failed unit)."""
    return [float(v) for v in values if v is not None and math.isfinite(v) and v > 0]


def relative_change(metric: str, baseline: Sequence[float | None], current: Sequence[float | None],
                    *, min_effect: float = th.MIN_EFFECT, confidence: float = th.CONFIDENCE,
                    max_half_width: float = th.MAX_CI_HALF_WIDTH, run_sd: float = 0.0,
                    run_sd_df: float | None = None) -> Change:
    """`run_sd` is the between-run spread (relative sd of a run's mean) that the trials of one
    run cannot show: they share the run's machine state. It adds 2·run_sd² to the variance of
    the log difference: a known component (no degrees of freedom of its own) unless
    `run_sd_df` gives the degrees of freedom it was estimated with (verdict/run_spread.py)."""
    xs, ys = positive(baseline), positive(current)
    n1, n2 = len(xs), len(ys)
    if n1 < th.MIN_UNITS or n2 < th.MIN_UNITS:
        g1 = _gmean(xs) if xs else None
        g2 = _gmean(ys) if ys else None
        rel = (g2 / g1 - 1.0) if (g1 and g2) else None
        return Change(metric, n1, n2, g1, g2, rel, None, None, None, confidence, min_effect,
                      "no_data", th.RECOMMENDED_TRIALS)
    l1, l2 = [math.log(x) for x in xs], [math.log(y) for y in ys]
    m1, m2 = statistics.fmean(l1), statistics.fmean(l2)
    v1, v2 = statistics.variance(l1), statistics.variance(l2)
    diff = m2 - m1
    known = 2.0 * run_sd * run_sd
    se = math.sqrt(v1 / n1 + v2 / n2 + known)
    df = welch_df(v1, n1, v2, n2, known, run_sd_df)
    if df is None and known == 0.0:  # both sides constant: the interval is the point
        lo_l = hi_l = diff
        p = 1.0 if abs(diff) <= _ZERO else 0.0
    else:
        z = abs(diff) / se
        if df is None:  # only the known component: the normal distribution
            q = statistics.NormalDist().inv_cdf(0.5 + confidence / 2.0)
            p = 2.0 * (1.0 - statistics.NormalDist().cdf(z))
        else:
            q = t_quantile(0.5 + confidence / 2.0, df)
            p = 2.0 * (1.0 - t_cdf(z, df))
        lo_l, hi_l = diff - q * se, diff + q * se
    rel, lo, hi = math.expm1(diff), math.expm1(lo_l), math.expm1(hi_l)
    status = _status(rel, lo, hi, min_effect, max_half_width)
    sd1, sd2 = math.sqrt(v1), math.sqrt(v2)
    return Change(metric, n1, n2, math.exp(m1), math.exp(m2), rel, lo, hi, df, confidence,
                  min_effect, status, trials_needed(sd1, sd2, max_half_width, confidence, run_sd),
                  trials_needed(sd1, sd2, min_effect, confidence, run_sd), p)


# Bounds closer to 0 than this are 0: identical values on both sides must not read as a change
# through floating-point rounding of their logarithms.
_ZERO = 1e-9


def _status(rel: float, lo: float, hi: float, min_effect: float,
            max_half_width: float) -> ChangeStatus:
    if lo > _ZERO or hi < -_ZERO:
        if abs(rel) < min_effect:
            return "below_min_effect"
        return "up" if rel > 0 else "down"
    if (hi - lo) / 2.0 > max_half_width:
        return "undecidable"
    return "not_significant"


def trials_needed(sd1: float, sd2: float, half_width: float,
                  confidence: float = th.CONFIDENCE, run_sd: float = 0.0) -> int | None:
    """Trials per side for a Welch interval of ±half_width (relative), given the observed
    standard deviations of the log values; None when more than MAX_TRIALS_SUGGESTED or when
    the between-run spread alone (`run_sd`) is wider than the target: then more trials of one
    run cannot help, only more runs."""
    target = math.log1p(half_width)
    known = 2.0 * run_sd * run_sd
    z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2.0)
    room = target * target - z * z * known
    if room <= 0.0:
        return None
    if sd1 == 0.0 and sd2 == 0.0:
        return th.MIN_UNITS
    v1, v2 = sd1 * sd1, sd2 * sd2

    def ok(n: int) -> bool:
        df = welch_df(v1, n, v2, n, known) or float(2 * n - 2)
        return t_quantile(0.5 + confidence / 2.0, df) * math.sqrt((v1 + v2) / n + known) <= target

    # The normal quantile gives a lower bound (t > z); search upwards from it, then bisect:
    # the half-width shrinks monotonically with n.
    lo = max(th.MIN_UNITS, math.ceil(z * z * (v1 + v2) / room))
    if lo > th.MAX_TRIALS_SUGGESTED:
        return None
    hi = lo
    while not ok(hi):
        if hi >= th.MAX_TRIALS_SUGGESTED:
            return None
        lo, hi = hi + 1, min(th.MAX_TRIALS_SUGGESTED, hi * 2)
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def holm(p_values: Sequence[float | None], alpha: float = 1.0 - th.CONFIDENCE) -> list[bool]:
    """Holm's step-down correction: which of several tests reject "no change" at family-wise
    level alpha. A test without a p value never rejects."""
    order = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    out = [False] * len(p_values)
    m = len(order)
    for rank, (p, i) in enumerate(order):
        if p > alpha / (m - rank):
            break
        out[i] = True
    return out


def _gmean(xs: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(x) for x in xs))
