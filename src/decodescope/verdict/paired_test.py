"""The interleaved A/B test: paired statistics over pairs of trials, with a sequential stop.

Each pair is one trial on A and one on B taken back to back, in alternating order
(A B, B A, A B, …), and contributes d = ln(rate_B) − ln(rate_A). Drift of the machine, the
network and the time of day falls on both trials of a pair alike, and a drift that is linear
within two trials enters the pairs with alternating sign, so it cancels in their mean and only
widens their spread (honestly: it is then in the sd).

**Method: a group-sequential design with Lan–DeMets alpha spending** (Lan & DeMets,
Biometrika 1983; Jennison & Turnbull, *Group Sequential Methods*, 2000, ch. 7 and 11; the
boundaries are computed in verdict/spending.py). The test looks after `min_pairs` pairs and
then at `n_looks` − 1 more pair counts spaced geometrically up to `max_pairs` (default 6, 9,
13, 19, 27, 40): K looks planned in advance, information fraction t_k = n_k / max_pairs. Two
tests run side by side, each with its own error spent along the looks by the Pocock-type
spending function α·ln(1 + (e − 1)·t) (default; O'Brien–Fleming-type on request):

* **change** (two-sided, α): at look k the Student t interval of the mean of d at the look's
  nominal level; it excludes 0 with |change| ≥ the minimum effect → REGRESSION / IMPROVEMENT.
  Identical stacks read "beyond noise" at any look with probability ≤ α.
* **equivalence** (two one-sided tests, TOST, Schuirmann 1987, each one-sided at α spent along
  the looks): the interval at 1 − 2·q_k (q_k the look's one-sided nominal level) lies inside
  ±minimum effect → NO_CHANGE. A stack changed by the minimum effect or more is called
  NO_CHANGE with probability ≤ α (the intersection–union principle: both one-sided tests must
  reject at one look).

Stopping for one decision only lowers the other's error (non-binding). A change beyond noise
but below the minimum effect whose interval still reaches beyond it is never NO_CHANGE: the
test goes on, and at the last look says so (INCONCLUSIVE, "below the minimum effect, not ruled
out"). NO_CHANGE whose change interval excludes 0 carries a note: a real change, smaller than
the minimum effect. The stop never decides on fewer than `min_pairs` pairs.

**Pairs that are not independent.** The t intervals assume independent pairs. Two server
processes that drift apart over minutes make neighbouring pairs alike: a lag-1 autocorrelation
of the pair log ratios beyond white noise's 1.96/√n (`serial_rho`) widens both intervals by the
AR(1) variance factor √((1 + ρ)/(1 − ρ)) with n(1 − ρ)/(1 + ρ) effective pairs (Box, Jenkins &
Reinsel, *Time Series Analysis*, the variance of a mean under AR(1)); the verdict says so.

**Two server processes.** Pairs cancel what both sides share, not the difference of the two
processes' levels: when A and B are different server processes and the between-process spread
τ of A's stack is known (verdict/process_spread.py), both intervals carry it: var(mean d) =
s²/n_eff + 2τ², with τ's own uncertainty from its ANOVA (`Design.process_ms`: MS_between,
MS_within, their df, n₀) by a **generalized confidence interval** (Weerahandi 1993): the
half-width at the look's nominal level is the quantile of the generalized pivotal quantity
|Z|·√(s²/n·df_p/U_p + 2·max(0, (MS_b·df_b/U_b − MS_w·df_w/U_w)/n₀)) over GPQ_DRAWS seeded draws
(`gpq_half`). Chosen by measurement over the one-sided χ² upper bound of τ (formerly carried),
its MLS variant and τ̂ with Satterthwaite's df (`Design.process_den`, kept for the comparison
in bench/bench_tau_carry.py): docs/methodology.md §9. When the between-process term alone (the
same quantile with the pairs' term 0) reaches the minimum effect no number of pairs between
these two processes decides; the verdict says what would (restarts).

Pure: no I/O.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any, Literal

from decodescope.records.evidence import EvidenceRow, EvidenceStatus
from decodescope.verdict import thresholds as th
from decodescope.verdict.spending import SPENDINGS, nominal_levels
from decodescope.verdict.stats import pct

# The smallest effective df a Satterthwaite combination is given (Student's t at df < 0.5 has
# no useful quantile: its tails are too heavy)
SATTERTHWAITE_MIN_DF = 0.5

# "N A/B pairs for ±5 %": the user's question is "is the new stack slower by 5 %?"
HINT_HALF_WIDTH = 0.05

LookDecision = Literal["change", "equivalent", "below_min_effect", "continue", "undecided"]


@dataclass(frozen=True)
class Design:
    """The planned looks and their error control."""

    alpha: float = th.AB_ALPHA
    min_pairs: int = th.AB_MIN_PAIRS
    max_pairs: int = th.AB_MAX_PAIRS
    n_looks: int = th.AB_LOOKS
    min_effect: float = th.MIN_EFFECT
    spending: str = th.AB_SPENDING
    process_sd: float = 0.0  # between-process spread τ carried (0: one process, or unknown)
    # Satterthwaite's denominator of the carried 2τ² (4·Σ (cᵢ·MSᵢ)²/dfᵢ of its ANOVA): the
    # intervals then use the effective df of s²/n + 2τ²; 0: τ taken as known (the pairs' df)
    process_den: float = 0.0
    # The ANOVA of the carried τ (MS_between, MS_within, df_between, df_within, n₀): the
    # intervals are then generalized confidence intervals (`gpq_half`); None: not carried so
    process_ms: tuple[float, float, int, int, float] | None = None
    # What one unit of the test is: "pairs" (a pair of trials, ln(B/A)), or "starts" (`ab
    # --launch`: a fresh process of each side and its pairs, their mean ln(B/A)); min_pairs,
    # max_pairs and the looks then count starts
    unit: Literal["pairs", "starts"] = "pairs"

    def __post_init__(self) -> None:
        if not 0.0 < self.alpha < 0.5:
            raise ValueError("alpha must be in (0, 0.5)")
        if self.min_pairs < 3:
            raise ValueError("min_pairs must be at least 3 (the pair sd needs 2 df)")
        if self.max_pairs < self.min_pairs:
            raise ValueError("max_pairs must be at least min_pairs")
        if self.n_looks < 1:
            raise ValueError("n_looks must be at least 1")
        if self.spending not in SPENDINGS:
            raise ValueError(f"spending must be one of {', '.join(SPENDINGS)}")
        if not (self.process_sd >= 0.0 and math.isfinite(self.process_sd)):
            raise ValueError("process_sd must be a finite number ≥ 0")
        if not (self.process_den >= 0.0 and math.isfinite(self.process_den)):
            raise ValueError("process_den must be a finite number ≥ 0")
        if self.process_ms is not None:
            msb, msw, dfb, dfw, n0 = self.process_ms
            if not (msb >= 0.0 and msw >= 0.0 and dfb >= 1 and dfw >= 1 and n0 > 0.0):
                raise ValueError("process_ms must be (MS_between ≥ 0, MS_within ≥ 0, "
                                 "df_between ≥ 1, df_within ≥ 1, n0 > 0)")

    def looks(self) -> list[int]:
        """Pair counts at which the test looks: min_pairs … max_pairs, geometrically spaced."""
        k, lo, hi = self.n_looks, self.min_pairs, self.max_pairs
        if k == 1 or hi == lo:
            return [hi]
        ratio = hi / lo
        out = sorted({round(lo * ratio ** (i / (k - 1))) for i in range(k)})
        return out

    def _fractions(self) -> tuple[float, ...]:
        return tuple(n / self.max_pairs for n in self.looks())

    def change_levels(self) -> tuple[float, ...]:
        """Per look: the confidence level of the change interval (1 − the two-sided nominal
        level its boundary spends)."""
        return tuple(1.0 - p for p in nominal_levels(self.spending, self.alpha,
                                                     self._fractions(), 2))

    def equivalence_levels(self) -> tuple[float, ...]:
        """Per look: the confidence level of the TOST interval (1 − 2 × the one-sided nominal
        level)."""
        return tuple(1.0 - 2.0 * q for q in nominal_levels(self.spending, self.alpha,
                                                           self._fractions(), 1))

    def levels_at(self, n: int) -> tuple[float, float]:
        """(change level, equivalence level) of the look at n pairs; between looks or past the
        last, those of the nearest look at or before n (the first look's before it)."""
        looks = self.looks()
        i = max([j for j, x in enumerate(looks) if x <= n], default=0)
        return self.change_levels()[i], self.equivalence_levels()[i]

    @property
    def level(self) -> float:
        """Confidence level of the change interval at the last planned look."""
        return self.change_levels()[-1]

    def describe(self) -> str:
        k = len(self.looks())
        at = ", ".join(map(str, self.looks()))
        ch, eq = self.change_levels(), self.equivalence_levels()
        return (f"group-sequential, {k} looks (after {at} {self.unit}), Lan–DeMets {self.spending} "
                f"alpha spending: change intervals at {100 * min(ch):.2f}–{100 * max(ch):.2f} %, "
                f"equivalence (TOST) intervals at {100 * min(eq):.2f}–{100 * max(eq):.2f} %; "
                f"false-alarm rate ≤ {self.alpha:.0%} and false 'no change' rate ≤ "
                f"{self.alpha:.0%} over all looks"
                + ("; Student t on the starts' mean ln(B/A), their variance at least their "
                   "pairs' pooled within-start variance / pairs per start"
                   if self.unit == "starts" else "")
                + (f"; between-process spread τ {100 * self.process_sd:.1f} % carried "
                   "(var of the mean pair log ratio s²/n + 2τ²"
                   + (", generalized confidence intervals from its ANOVA"
                      if self.process_ms is not None
                      else ", Satterthwaite's effective df" if self.process_den else "") + ")"
                   if self.carries_process else ""))

    @property
    def carries_process(self) -> bool:
        """Whether the intervals carry a between-process term (τ, or its uncertainty)."""
        return bool(self.process_sd or self.process_den or self.process_ms is not None)

    def combined(self, pair_var: float, df_pairs: float) -> tuple[float, float]:
        """(se, df) of the mean pair log ratio: se² = s²/n + 2τ² (pair_var = s²/n); df the
        pairs' when τ is taken as known (process_den 0), else Satterthwaite's (1946) effective
        df (s²/n + 2τ²)² / ((s²/n)²/df_pairs + process_den)."""
        v_tau = 2.0 * self.process_sd ** 2
        var = pair_var + v_tau
        if not self.process_den:
            return math.sqrt(var), df_pairs
        den = pair_var * pair_var / df_pairs + self.process_den
        return math.sqrt(var), max(var * var / den, SATTERTHWAITE_MIN_DF)

    def half_width(self, level: float, pair_var: float, df_pairs: float) -> float:
        """The half-width (log scale) of an interval of the mean pair log ratio at `level`
        (pair_var = s²/n_eff): the generalized confidence interval when the ANOVA of τ is
        carried (process_ms), else Student's t × √(s²/n + 2τ²) at `combined`'s df."""
        if self.process_ms is not None:
            return gpq_half(level, pair_var, df_pairs, self.process_ms)
        se, df = self.combined(pair_var, df_pairs)
        return t_crit(level, df) * se

    def process_df(self) -> float:
        """The effective df of the carried 2τ² alone ((2τ²)²/process_den; infinite when τ is
        taken as known)."""
        if not self.process_den:
            return math.inf
        return max((2.0 * self.process_sd ** 2) ** 2 / self.process_den, SATTERTHWAITE_MIN_DF)

    def process_floor(self, level: float) -> float:
        """The half-width (log scale) that the between-process term alone gives an interval
        at `level` whatever the pairs: q·√2·τ with q the normal quantile when τ is taken as
        known, else Student's t at the τ term's own effective df (the limit of the combined
        df as the pairs grow); 0 when none is carried."""
        if self.process_ms is not None:
            return gpq_half(level, 0.0, math.inf, self.process_ms)
        if not self.process_sd:
            return 0.0
        df = self.process_df()
        q = (statistics.NormalDist().inv_cdf(0.5 + level / 2.0) if math.isinf(df)
             else t_crit(level, df))
        return q * math.sqrt(2.0) * self.process_sd

    def undecidable_by_pairs(self) -> bool:
        """No number of pairs rules out a change of the minimum effect: the equivalence
        interval of the last look, with infinitely many pairs, still reaches ±minimum
        effect."""
        return self.process_floor(self.equivalence_levels()[-1]) >= math.log1p(self.min_effect)


# Generalized confidence intervals (Weerahandi, JASA 88:899–905, 1993; for the one-way random
# model Krishnamoorthy & Mathew, 2004): the quantiles of the generalized pivotal quantity from
# GPQ_DRAWS draws of one fixed seed (deterministic; the draws measured in
# bench/bench_tau_carry.py, docs/methodology.md §9)
GPQ_DRAWS = 4000
GPQ_SEED = 36


@lru_cache(maxsize=256)
def _gpq_draws(df_pairs: float, df_between: int, df_within: int) -> tuple[Any, ...]:
    import numpy as np

    rng = np.random.default_rng(GPQ_SEED)
    z = np.abs(rng.standard_normal(GPQ_DRAWS))
    up = (rng.chisquare(df_pairs, GPQ_DRAWS) / df_pairs if math.isfinite(df_pairs)
          else np.ones(GPQ_DRAWS))
    ub = rng.chisquare(df_between, GPQ_DRAWS) / df_between
    uw = rng.chisquare(df_within, GPQ_DRAWS) / df_within
    return z, up, ub, uw


def gpq_half(level: float, pair_var: float, df_pairs: float,
             ms: tuple[float, float, int, int, float]) -> float:
    """Half-width of the generalized confidence interval of the mean pair log ratio at
    `level`: the quantile of |Z|·√(s²/n·df_p/U_p + 2·max(0, (MS_b·df_b/U_b − MS_w·df_w/U_w)/n₀))
    (Z normal, U_p, U_b, U_w χ² with the pairs', between- and within-process df): the
    generalized pivotal quantity of var(mean d) = s²/n + 2τ², each mean square replaced by its
    pivot (τ²'s truncated at 0). pair_var 0 and df_pairs ∞: the between-process term alone."""
    import numpy as np

    msb, msw, dfb, dfw, n0 = ms
    z, up, ub, uw = _gpq_draws(df_pairs, int(dfb), int(dfw))
    v = pair_var / up + 2.0 * np.maximum(0.0, (msb / ub - msw / uw) / n0)
    return float(np.quantile(z * np.sqrt(v), level))


def t_crit(level: float, df: float) -> float:
    from scipy.stats import t

    return float(t.ppf(0.5 + level / 2.0, df))


@dataclass(frozen=True)
class Look:
    pairs: int
    mean: float  # mean log ratio B/A
    sd: float  # sd of the pair log ratios
    lo: float  # change interval of the mean log ratio, at the look's change level
    hi: float
    decision: LookDecision
    eq_lo: float | None = None  # equivalence (TOST) interval, at the look's equivalence level
    eq_hi: float | None = None
    level: float | None = None  # change interval's confidence level
    eq_level: float | None = None
    serial: float | None = None  # lag-1 autocorrelation of the pairs that widened the intervals
    unit: str = "pairs"  # what `pairs` counts (Design.unit)
    # starts: the starts' sd was below what their own pairs' spread allows (s_w/√m), and that
    # floor was used instead (start_floor_var)
    floored: bool = False

    @property
    def rel(self) -> float:
        return math.expm1(self.mean)

    @property
    def rel_lo(self) -> float:
        return math.expm1(self.lo)

    @property
    def rel_hi(self) -> float:
        return math.expm1(self.hi)

    @property
    def beyond_noise(self) -> bool:
        return self.lo > 0.0 or self.hi < 0.0

    def describe(self) -> str:
        return (f"{pct(self.rel)} (interval {pct(self.rel_lo)} … {pct(self.rel_hi)}) after "
                f"{self.pairs} {self.unit}")

    def describe_eq(self) -> str:
        if self.eq_lo is None or self.eq_hi is None:
            return ""
        return f"{pct(math.expm1(self.eq_lo))} … {pct(math.expm1(self.eq_hi))}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "rel": self.rel, "rel_lo": self.rel_lo, "rel_hi": self.rel_hi}


def look(log_ratios: Sequence[float], design: Design, *, final: bool = False,
         floor_var: float | None = None) -> Look:
    """The intervals after these pairs (or start means) and what they decide. `floor_var`: a
    lower bound on one unit's variance known from elsewhere (a start mean's, from its own
    pairs: start_floor_var); the units' sample variance below it is replaced by it."""
    n = len(log_ratios)
    if n < 2:
        raise ValueError("a look needs at least 2 pairs")
    m = statistics.fmean(log_ratios)
    sd = statistics.stdev(log_ratios)
    floored = floor_var is not None and sd * sd < floor_var
    if floored:
        assert floor_var is not None
        sd = math.sqrt(floor_var)
    rho = serial_rho(log_ratios)
    n_eff = n * (1.0 - rho) / (1.0 + rho) if rho else float(n)
    df_pairs = max(2, math.floor(n_eff) - 1) if rho else n - 1
    lev, eq_lev = design.levels_at(n)
    half = design.half_width(lev, sd * sd / n_eff, df_pairs)
    eq_half = design.half_width(eq_lev, sd * sd / n_eff, df_pairs)
    lo, hi = m - half, m + half
    eq_lo, eq_hi = m - eq_half, m + eq_half
    edge = math.log1p(design.min_effect)
    low_edge = math.log1p(-design.min_effect) if design.min_effect < 1.0 else -math.inf
    beyond = lo > 0.0 or hi < 0.0
    decision: LookDecision
    if n < design.min_pairs:
        decision = "continue"
    elif beyond and abs(math.expm1(m)) >= design.min_effect:
        decision = "change"
    elif eq_lo > low_edge and eq_hi < edge:
        decision = "equivalent"
    elif not final:
        decision = "continue"
    elif beyond:
        decision = "below_min_effect"  # real, small, but a change of the minimum effect is
        # not ruled out: never NO_CHANGE
    else:
        decision = "undecided"
    return Look(n, m, sd, lo, hi, decision, eq_lo, eq_hi, lev, eq_lev, rho or None, design.unit,
                floored)


def start_floor_var(starts: Sequence[Sequence[float]]) -> float | None:
    """The least variance a start's mean ln(B/A) can have: its pairs' own spread over their
    count (var = 2τ² + s²/m ≥ s²/m), s² pooled within the starts (n·(m − 1) df, far more than
    the starts' n − 1). Four start means can sit closer together by chance than their pairs
    allow (an H100 gave start means of sd 1.2 % from pairs of sd 12.6 %, and an alarm); the
    floor keeps the t interval from trusting that. None when no start has two pairs."""
    groups = [list(g) for g in starts if len(g) >= 2]
    if not groups:
        return None
    ss = sum(sum((x - statistics.fmean(g)) ** 2 for x in g) for g in groups)
    df = sum(len(g) - 1 for g in groups)
    within = ss / df
    return within * statistics.fmean(1.0 / len(g) for g in starts if g)


def serial_rho(log_ratios: Sequence[float]) -> float:
    """The lag-1 autocorrelation of the pairs in order when it is beyond white noise's
    1.96/√n and there are at least AB_SERIAL_MIN_PAIRS pairs (capped at AB_SERIAL_MAX_RHO);
    else 0 (independent pairs, as the t interval assumes)."""
    n = len(log_ratios)
    if n < th.AB_SERIAL_MIN_PAIRS:
        return 0.0
    m = statistics.fmean(log_ratios)
    den = sum((x - m) ** 2 for x in log_ratios)
    if den <= 0.0:
        return 0.0
    rho = sum((log_ratios[i] - m) * (log_ratios[i - 1] - m) for i in range(1, n)) / den
    if rho <= 1.96 / math.sqrt(n):
        return 0.0
    return min(rho, th.AB_SERIAL_MAX_RHO)


def step(log_ratios: Sequence[float], design: Design, *,
         floor_var: float | None = None) -> Look | None:
    """What the test says with these pairs (or start means) so far: None between looks (keep
    going), else the look at this count (its decision "continue" when it does not stop)."""
    n = len(log_ratios)
    if n not in design.looks():
        return None
    return look(log_ratios, design, final=n >= design.max_pairs, floor_var=floor_var)


def run_sequential(log_ratios: Sequence[float], design: Design) -> Look | None:
    """Replay the test over a finished sequence of pairs: the look that stopped it, or the last
    look reached (None when fewer than min_pairs pairs)."""
    last = None
    for n in design.looks():
        if n > len(log_ratios):
            break
        last = look(log_ratios[:n], design, final=n >= design.max_pairs)
        if last.decision != "continue":
            return last
    return last


def step_starts(starts: Sequence[Sequence[float]], design: Design) -> Look | None:
    """`step` over starts (each start's pair log ratios, in order): the test on the start
    means, their variance floored by their own pairs (start_floor_var)."""
    return step([statistics.fmean(g) for g in starts], design,
                floor_var=start_floor_var(starts))


def run_sequential_starts(starts: Sequence[Sequence[float]], design: Design) -> Look | None:
    """Replay the test over finished starts: the look that stopped it, or the last look
    reached (None when fewer than the first look's starts)."""
    last = None
    for n in design.looks():
        if n > len(starts):
            break
        last = step_starts(starts[:n], design)
        assert last is not None  # n is a planned look
        if last.decision != "continue":
            return last
    return last


def pairs_needed(pair_sd: float, half_width: float, design: Design,
                 level: float | None = None) -> int | None:
    """Pairs for an interval of ±half_width (relative) at `level` (default: the design's
    change level at its last look), given the sd of the pair log ratios: the smallest n with
    t(n − 1)·sd/√n ≤ ln(1 + half_width); None beyond MAX_TRIALS_SUGGESTED."""
    lev = design.level if level is None else level
    target = math.log1p(half_width)
    if design.process_floor(lev) >= target:
        return None  # the between-process term alone is wider: no number of pairs
    if pair_sd <= 0.0:
        return design.min_pairs
    z = statistics.NormalDist().inv_cdf(0.5 + lev / 2.0)
    n = max(design.min_pairs, math.ceil((z * pair_sd / target) ** 2))
    while n <= th.MAX_TRIALS_SUGGESTED:
        if design.half_width(lev, pair_sd * pair_sd / n, n - 1) <= target:
            return n
        n += 1
    return None


def verdict_kind(lk: Look) -> str:
    """The triage verdict a look's decision maps to (B is the current side, A the baseline)."""
    if lk.decision == "change":
        return "REGRESSION" if lk.mean < 0 else "IMPROVEMENT"
    if lk.decision == "equivalent":
        return "NO_CHANGE"
    return "INCONCLUSIVE"


# -- the verdict of an A/B ---------------------------------------------------------------------
def same_host(fp_a: dict[str, Any] | None, fp_b: dict[str, Any] | None) -> str | None:
    """The host both endpoints' server processes run on, when the fingerprints show one (a
    local process found behind each endpoint, on the same hostname); None otherwise."""
    def local_host(fp: dict[str, Any] | None) -> str | None:
        if not isinstance(fp, dict):
            return None
        secs = fp.get("sections") or {}
        pid = (secs.get("process") or {}).get("pid") or {}
        host = (secs.get("host") or {}).get("hostname") or {}
        if pid.get("status") != "collected" or host.get("status") != "collected":
            return None
        return str(host.get("value"))

    ha, hb = local_host(fp_a), local_host(fp_b)
    return ha if ha is not None and ha == hb else None


SHARED_HOST_MEANING = (
    "both endpoints run on one host ({host}): they share its CPU, memory bandwidth and "
    "accelerators. Interleaving probes one side at a time, so each trial sees the other "
    "server idle — but anything the idle server still does (a background task, its own "
    "polling, another client) slows the side being measured, and the difference found is "
    "the difference on this shared host, not that of each stack alone")


@dataclass(frozen=True)
class Arm:
    """What the rules before the statistics (verdict.decide.premises) read of one A/B arm: the
    cause that persisted on it through the bounded re-takes, in words; None: none persisted."""

    name: str  # "A" | "B"
    caliber_missed: str | None = None
    contamination: str | None = None


@dataclass(frozen=True)
class Retake:
    """A pair that was named and re-taken, not pooled: which trial, and the evidence."""

    pair: int  # 1-based pair number it was taken as
    side: str  # "A" | "B"
    reason: str  # "contaminated" | "caliber missed" | "stalled"
    detail: str

    def describe(self) -> str:
        return f"pair {self.pair} ({self.side} {self.reason}: {self.detail})"


@dataclass(frozen=True)
class ABVerdict:
    kind: str  # NO_CHANGE | REGRESSION | IMPROVEMENT | INCONCLUSIVE | CONTAMINATED
    cause: str | None
    headline: str
    lines: tuple[str, ...]
    look: Look | None
    looks: tuple[Look, ...]
    log_ratios: tuple[float, ...]
    orders: tuple[str, ...]
    design: Design
    stopped: str
    run_a: int
    run_b: int
    urls: tuple[str | None, str | None]
    host: str | None  # the shared host, when both endpoints run on one
    fingerprints: tuple[dict[str, Any] | None, dict[str, Any] | None]
    evidence: tuple[Any, ...]  # EvidenceRow of the two runs' triage (fingerprint diff, …)
    pairs_for_hint: int | None
    seconds: float
    retaken: tuple[Retake, ...] = ()
    next_step: str | None = None
    premise: str | None = None  # the rule before the statistics that decided, when one did
    processes: Any | None = None  # process_spread.Processes: one server process or two, τ
    pair_log_ratios: tuple[float, ...] = ()  # every pair's (with --launch: log_ratios are starts)
    starts: tuple[dict[str, Any], ...] = ()  # --launch: each start's processes and mean

    @property
    def exit_code(self) -> int:
        from decodescope.verdict import for_verdict

        return int(for_verdict(self.kind))

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.kind, "cause": self.cause, "exit_code": self.exit_code,
            "headline": self.headline, "lines": list(self.lines),
            "pairs": len(self.pair_log_ratios or self.log_ratios), "unit": self.design.unit,
            "starts": list(self.starts), "pair_log_ratios": list(self.pair_log_ratios),
            "stopped": self.stopped,
            "method": self.design.describe(), "design": asdict(self.design),
            "look": self.look.to_dict() if self.look else None,
            "looks": [x.to_dict() for x in self.looks],
            "log_ratios": list(self.log_ratios), "orders": list(self.orders),
            "run_a": self.run_a, "run_b": self.run_b, "url_a": self.urls[0],
            "url_b": self.urls[1], "same_host": self.host,
            "fingerprints": {"A": self.fingerprints[0], "B": self.fingerprints[1]},
            "evidence": [r.to_dict() for r in self.evidence],
            "pairs_for_5pct": self.pairs_for_hint, "seconds": self.seconds,
            "retaken": [asdict(r) for r in self.retaken], "next_step": self.next_step,
            "premise": self.premise,
            "processes": self.processes.to_dict() if self.processes is not None else None,
        }


def paired_change(lk: Look, design: Design) -> Any:
    """The paired decode statistic of a look as a stats.Change, so the carrier rule that
    triage applies (verdict.decide.change_cause) reads it as it reads triage's own."""
    from decodescope.verdict.stats import Change, ChangeStatus

    status: ChangeStatus = ("down" if lk.mean < 0 else "up") if lk.decision == "change" else (
        "below_min_effect" if lk.beyond_noise else "not_significant")
    return Change("decode", lk.pairs, lk.pairs, None, None, lk.rel, lk.rel_lo, lk.rel_hi,
                  float(lk.pairs - 1), lk.level or design.level, design.min_effect, status,
                  None)


def _cause(kind: str, lk: Look, design: Design, runs_verdict: Any | None) -> str:
    """The cause of a decided change: triage's carrier rule over the two runs' components
    (acceptance, step rate) against the paired decode change — the same rule whatever the
    runs' own unpaired decode verdict was, so it does not flip with it."""
    if runs_verdict is None or not getattr(runs_verdict, "changes", None):
        return "decode rate"
    from decodescope.verdict.decide import change_cause
    from decodescope.verdict.side import spec_state

    b, c = runs_verdict.baseline, runs_verdict.current
    spec = spec_state(b, c)
    if spec is not None and ((spec == "off") == (kind == "REGRESSION")):
        return f"speculative decoding {spec}"
    return change_cause(paired_change(lk, design), runs_verdict.changes, b, c) or "decode rate"


def ab_verdict(log_ratios: Sequence[float], orders: Sequence[str], looks: Sequence[Look],
               design: Design, *, stopped: str, run_a: int, run_b: int,
               urls: tuple[str | None, str | None],
               fingerprints: tuple[dict[str, Any] | None, dict[str, Any] | None],
               runs_verdict: Any | None, seconds: float = 0.0,
               arms: tuple[Arm, Arm] | None = None,
               retaken: Sequence[Retake] = (), processes: Any | None = None,
               pair_log_ratios: Sequence[float] = (),
               starts: Sequence[dict[str, Any]] = ()) -> ABVerdict:
    """The A/B's verdict and its words. First the rules before the statistics
    (verdict.decide.premises) on the two arms — a cause that persisted on an arm through the
    re-takes (caliber missed, foreign load) decides as it does in triage; then the paired
    sequential test. `runs_verdict` is triage of the two stored runs (B against A): its
    components (acceptance, step rate) name what carries a decided change by triage's carrier
    rule, and its evidence rows (caliber, fingerprint diff) are shown. `processes`
    (process_spread.Processes): whether A and B are two server processes and the
    between-process spread carried (design.process_sd); its words are added. With `ab
    --launch` (design.unit "starts") `log_ratios` are the starts' means, `pair_log_ratios`
    every pair and `starts` each start's processes."""
    from decodescope.verdict.decide import premises
    from decodescope.verdict.types import CaliberComparison

    lk = looks[-1] if looks else None
    n = len(log_ratios)
    blocked = None
    if arms is not None:
        blocked = premises(arms[0], arms[1], CaliberComparison(True, "one caliber for both "
                                                               "arms (an A/B)"))
    kind = verdict_kind(lk) if lk is not None else "INCONCLUSIVE"
    cause: str | None = None
    if blocked is not None:
        kind, cause = blocked.kind, blocked.cause
    elif kind in ("REGRESSION", "IMPROVEMENT") and lk is not None:
        cause = _cause(kind, lk, design, runs_verdict)
    elif lk is not None and lk.decision == "below_min_effect":
        cause = "below the minimum effect, not ruled out"
    elif kind == "INCONCLUSIVE" and lk is not None and lk.decision == "undecided" and \
            process_blocks(lk, design):
        cause = "between-process spread"
    elif kind == "INCONCLUSIVE":
        cause = "noise"
    sd = statistics.stdev(log_ratios) if n >= 2 else None
    hint = pairs_needed(sd, HINT_HALF_WIDTH, design) if sd is not None else None
    lev = f"{100 * (lk.level or design.level):.2f} %" if lk is not None else ""
    eq_lev = f"{100 * (lk.eq_level or 0.0):.2f} %" if lk is not None else ""
    next_step: str | None = None
    if blocked is not None and arms is not None:
        why = "; ".join(f"{a.name}: {x}" for a in arms
                        for x in (a.caliber_missed, a.contamination) if x)
        if kind == "CONTAMINATED":
            head = (f"CONTAMINATED — foreign load persisted through the re-takes ({why}): "
                    "the paired rates would describe a larger batch than the caliber's.")
            next_step = ("Measure on idle engines (or dedicated replicas), then run the same "
                         "`decodescope ab` again.")
        else:
            head = (f"INCONCLUSIVE (caliber missed) — {why}: the two sides were not measured "
                    "under the caliber asked for.")
            next_step = ("Give the arm what the caliber asks for (for thinking: a reasoning "
                         "parser and a model that honours it), or use a caliber it can meet.")
    elif lk is None:
        head = (f"INCONCLUSIVE — {n} {_units(design, n)}: the test looks first after "
                f"{design.min_pairs} {design.unit}.")
    elif kind in ("REGRESSION", "IMPROVEMENT"):
        head = (f"{kind} ({cause}) — B is {'slower' if lk.mean < 0 else 'faster'} than A: "
                f"decode {lk.describe()}, interval at {lev}; decided at a planned look.")
    elif lk.decision == "equivalent":
        head = (f"NO CHANGE — decode {pct(lk.rel)} after {lk.pairs} {design.unit}, equivalence "
                f"interval {lk.describe_eq()} at {eq_lev} inside ±{design.min_effect:.0%}: a "
                "change of the minimum effect is ruled out.")
    elif lk.decision == "below_min_effect":
        head = (f"INCONCLUSIVE (a change below the minimum effect, not ruled out) — decode "
                f"{lk.describe()}, interval at {lev}: beyond noise, smaller than "
                f"{design.min_effect:.0%}, but its equivalence interval {lk.describe_eq()} "
                f"reaches beyond ±{design.min_effect:.0%}.")
    elif cause == "between-process spread":
        floor = 100 * math.expm1(design.process_floor(design.level))
        head = (f"INCONCLUSIVE (between-process spread) — decode {lk.describe()}, interval at "
                f"{lev}: two server processes of A's stack differ in level (τ "
                f"{100 * design.process_sd:.1f} %, {tau_df_words(design)}), which alone keeps "
                f"the interval ±{floor:.1f} % wide — no number of pairs between these two "
                f"processes rules out a change of ±{design.min_effect:.0%} here or shows one "
                f"smaller than {floor:.1f} %.")
    else:
        head = (f"INCONCLUSIVE — decode {lk.describe()}, interval at {lev}: neither a "
                f"change of ≥ {design.min_effect:.0%} nor its absence is shown.")
    order_words = (f"pairs in order {' '.join(orders[:8])}{' …' if len(orders) > 8 else ''}; "
                   if orders else "")
    if design.unit == "starts":
        per = {int(x.get("pairs", 0)) for x in starts}
        lines = [f"Method: {design.describe()}; each start is a fresh server process of each "
                 f"side ({'/'.join(map(str, sorted(per))) or 'its'} pairs, in order AB, BA, …, "
                 "warmed up first), stopped after its pairs; statistic: a start's mean ln(B/A) "
                 "of its pairs' client steady-state decode rates — the level difference of "
                 "two processes of one launch (the between-process spread) is in the starts' "
                 f"spread, so the interval carries it ({len(pair_log_ratios)} pairs in all)."]
    else:
        lines = [f"Method: {design.describe()}; {order_words}"
                 "statistic: ln(B/A) of each pair's client steady-state decode rates."]
    if blocked is None and lk is not None and lk.decision == "equivalent" and lk.beyond_noise:
        lines.append(f"A small change is beyond noise: {lk.describe()} (interval at {lev}), "
                     f"inside ±{design.min_effect:.0%} — real, smaller than the minimum effect.")
    if sd is not None:
        lines.append(f"{'Start mean' if design.unit == 'starts' else 'Pair'} log-ratio sd "
                     f"{100 * sd:.1f} %"
                     + (f"; about {hint} {design.unit} give ±{HINT_HALF_WIDTH:.0%} at this sd."
                        if hint else "."))
    if lk is not None and lk.floored:
        lines.append("The start means sat closer together than their own pairs allow (a start "
                     "mean varies at least as its pairs' within-start spread over their count): "
                     "that floor was used for their sd, never the chance-tight spread.")
    if lk is not None and lk.serial:
        eff = lk.pairs * (1.0 - lk.serial) / (1.0 + lk.serial)
        lines.append(f"Pairs not independent: lag-1 autocorrelation {lk.serial:.2f} of the pairs "
                     f"in order (beyond white noise's {1.96 / math.sqrt(lk.pairs):.2f}) — the "
                     "two servers drift apart over minutes; intervals widened "
                     f"×{math.sqrt((1 + lk.serial) / (1 - lk.serial)):.2f} ({eff:.1f} effective "
                     f"{design.unit})."
                     + (" Repeat the A/B over server restarts rather than taking more pairs "
                        "of these two processes (`decodescope ab --launch-a … --launch-b …`)."
                        if design.unit == "pairs" else ""))
    if retaken:
        lines.append(f"Re-taken, not pooled ({len(retaken)}): "
                     + "; ".join(r.describe() for r in retaken[:6])
                     + (" …" if len(retaken) > 6 else "") + ".")
    far = far_pairs(log_ratios)
    if far:
        lines.append("Far from the rest, with no engine or trace evidence against them: "
                     + ", ".join(f"{_units(design, 1)} {i + 1} "
                                 f"({pct(math.expm1(log_ratios[i]))})"
                                 for i in far[:6]) + (" …" if len(far) > 6 else "")
                     + " — kept: they widen the interval (which keeps the error rate); a "
                       "pause the trace saw would have been re-taken.")
    if processes is not None:
        lines.extend(process_lines(processes, design))
    if blocked is None and kind == "INCONCLUSIVE" and lk is not None and sd is not None:
        line, next_step = decide_hint(lk, sd, design, hint)
        lines.append(line)
    host = same_host(*fingerprints)
    if host is not None:
        lines.append("Shared host: " + SHARED_HOST_MEANING.format(host=host) + ".")
    ev = ab_evidence(tuple(getattr(runs_verdict, "evidence", ()) or ()), lk, n, lev,
                     starts=len(starts) if design.unit == "starts" else None)
    return ABVerdict(kind, cause, head, tuple(lines), lk, tuple(looks), tuple(log_ratios),
                     tuple(orders), design, stopped, run_a, run_b, urls, host, fingerprints,
                     ev, hint, seconds, tuple(retaken), next_step,
                     None if blocked is None else f"{blocked.kind} ({blocked.cause})",
                     processes, tuple(pair_log_ratios), tuple(starts))


def _units(design: Design, n: int) -> str:
    """The test's unit for n of them ("pair" / "pairs", "start" / "starts")."""
    return design.unit if n != 1 else design.unit[:-1]


def process_lines(p: Any, design: Design) -> list[str]:
    """What the verdict says about one server process or two (process_spread.Processes)."""
    if not p.differ:
        return []
    sp = p.spread
    if design.carries_process and sp is not None and sp.known:
        return [f"Two server processes ({p.why}): the {sp.text()}; both intervals carry it "
                "(variance of the mean pair log ratio s²/n + 2τ², with τ's uncertainty from "
                "its ANOVA: generalized confidence intervals): identical servers whose levels "
                "differ by less are not a change."]
    if sp is not None and sp.known:
        return [f"Two server processes ({p.why}): the {sp.text()} — τ is 0 with no "
                "uncertainty left, so the intervals are the pairs' own."]
    why = sp.why if sp is not None else "not learned"
    return [f"Two server processes ({p.why}); between-process spread unknown ({why}). This "
            "verdict speaks of these two server processes: as a verdict on the two stacks it "
            "assumes that processes of one stack are exchangeable — on issue 36's H100 two "
            "identical llama.cpp processes differed by −6 … +14 % for minutes. Learn τ with "
            f"`decodescope spread URL_A --caliber C` after each of ≥ {th.MIN_PROCESSES} fresh "
            f"starts of A's server (≥ {th.MIN_PROCESS_RUNS} runs each, one store); `ab` then "
            "carries it."]


def restarts_needed(lk: Look, design: Design) -> int | None:
    """Server restarts per side (each side one fresh process per restart, an A/B of up to
    max pairs between each, pooled) for the interval that would decide at the measured change:
    the smallest N with z·√((2τ² + s²/max pairs)/N) ≤ the target (normal; τ the planning value
    `planning_tau`: τ̂, or more where its uncertainty widens the interval; None beyond
    MAX_TRIALS_SUGGESTED)."""
    m = abs(lk.rel)
    if m >= design.min_effect:
        target, lev = math.log1p(m), design.level
    else:
        target, lev = math.log1p(design.min_effect) - math.log1p(m), \
            design.equivalence_levels()[-1]
    if target <= 0.001:
        return None
    z = statistics.NormalDist().inv_cdf(0.5 + lev / 2.0)
    var = 2.0 * planning_tau(design, lev) ** 2 + lk.sd * lk.sd / design.max_pairs
    n = max(2, math.ceil(z * z * var / (target * target)))
    return n if n <= th.MAX_TRIALS_SUGGESTED else None


def planning_tau(design: Design, level: float) -> float:
    """The τ to plan restarts with: τ̂, or the τ whose z·√2·τ is the between-process floor at
    `level` when τ's uncertainty (few processes) makes that floor wider."""
    z = statistics.NormalDist().inv_cdf(0.5 + level / 2.0)
    return max(design.process_sd, design.process_floor(level) / (z * math.sqrt(2.0)))


FAR_ROBUST_Z = 5.0  # |d − median| beyond this many robust sds (1.4826 × MAD) is named


def far_pairs(log_ratios: Sequence[float]) -> list[int]:
    """Indices of pairs far from the rest: |d − median| > FAR_ROBUST_Z × 1.4826 × MAD (a
    robust z that one or two outliers cannot inflate). Named, not dropped: without evidence
    (a stall, foreign load, a missed caliber) a slow trial may be the stack's own."""
    if len(log_ratios) < 5:
        return []
    med = statistics.median(log_ratios)
    mad = statistics.median(abs(x - med) for x in log_ratios)
    if mad <= 0.0:
        return []
    return [i for i, x in enumerate(log_ratios) if abs(x - med) > FAR_ROBUST_Z * 1.4826 * mad]


_LOOK_WORDS = {"change": "yes", "equivalent": "no",
               "below_min_effect": "yes, below the minimum effect (not ruled out)",
               "undecided": "undecided", "continue": "undecided"}


def ab_evidence(rows: Sequence[EvidenceRow], lk: Look | None, n: int,
                level: str, starts: int | None = None) -> tuple[EvidenceRow, ...]:
    """The two runs' evidence rows as the A/B shows them. The decode rate is decided once, by
    the paired client statistic of the headline: the runs' own decode row (an unpaired
    comparison, the engine's number where it has one) would state the same quantity a second
    time with another number, so the A/B's row replaces it. Two servers side by side are not
    a restart: that row says what they are (with `--launch`, `starts` fresh processes of each
    side)."""
    out: list[EvidenceRow] = []
    for r in rows:
        if r.check.startswith("decode rate changed?"):
            if lk is None:
                res = (f"undecided: {n} {'start' if starts is not None else 'pair'}"
                       f"{'s' if n != 1 else ''}, before the first look")
            else:
                res = (f"{_LOOK_WORDS.get(lk.decision, 'undecided')}: {lk.describe()}, "
                       f"interval at {level}")
            status: EvidenceStatus = ("changed" if lk is not None and lk.decision == "change"
                                      else "same" if lk is not None and _LOOK_WORDS.get(
                                          lk.decision) == "no" else "unknown")
            out.append(EvidenceRow("decode rate changed? (client, paired ln(B/A))", res,
                                   status))
        elif r.check.startswith("did the server restart?"):
            out.append(EvidenceRow("two servers?", "yes: A and B are separate server processes "
                                   "probed in turn (an A/B, not a restart)"
                                   + (f"; {starts} start{'s' if starts != 1 else ''}, each a "
                                      "fresh process of each side (started by decodescope)"
                                      if starts is not None else ""), "changed"))
        else:
            out.append(r)
    return tuple(out)


def decide_hint(lk: Look, sd: float, design: Design, hint: int | None) -> tuple[str, str]:
    """What would decide an INCONCLUSIVE A/B, from the measured pair sd, and the next step
    that can decide it: a change of the minimum effect needs a change interval that excludes 0
    (half-width under the measured |change|); no change needs an equivalence interval inside
    ±minimum effect around the measured change (half-width under minimum effect − |change|).
    The wider of the two that applies sets the pairs; beyond what pairs can give, a longer
    trial (more output tokens per trial lowers the per-trial noise)."""
    if process_blocks(lk, design):
        return process_hint(lk, design)
    m = abs(lk.rel)
    if m >= design.min_effect:
        target, goal, lev = m, f"excludes 0 at the measured {pct(lk.rel)}", design.level
    else:
        target = design.min_effect - m
        goal = (f"rules out a change of ≥ {design.min_effect:.0%} around the measured "
                f"{pct(lk.rel)}")
        lev = design.equivalence_levels()[-1]
    n = pairs_needed(sd, target, design, level=lev) if target > 0.001 else None
    if n is not None:
        u, flag = ("starts", "--max-starts") if design.unit == "starts" else ("pairs",
                                                                             "--max-pairs")
        first = (f"about {n} {u} in all at this {u[:-1]} sd ({100 * sd:.1f} %) for an "
                 f"interval of ±{100 * target:.1f} % that {goal}")
        step_ = (f"rerun with {flag} {max(n, design.max_pairs + 1)} (the same caliber and "
                 f"{'launch commands' if design.unit == 'starts' else 'endpoints'})")
    else:
        first = (f"more than {th.MAX_TRIALS_SUGGESTED} {design.unit} at this "
                 f"{design.unit[:-1]} sd ({100 * sd:.1f} %) to decide against the "
                 f"{design.min_effect:.0%} minimum effect")
        step_ = ("a longer trial: a caliber with more output tokens per trial (its pair sd "
                 "falls), or a quieter host")
    five = f"; ±{HINT_HALF_WIDTH:.0%} takes about {hint} {design.unit}" if hint else ""
    return f"What would decide it: {first}{five}.", step_


def process_blocks(lk: Look, design: Design) -> bool:
    """The between-process term alone keeps this A/B from deciding, whatever the pairs: no
    equivalence interval fits inside ±minimum effect, or (at a measured change of at least
    the minimum effect) no change interval excludes 0 at the measured change."""
    if not design.carries_process:
        return False
    if design.undecidable_by_pairs():
        return True
    m = abs(lk.rel)
    if m >= design.min_effect:
        return design.process_floor(design.level) >= math.log1p(m)
    return design.process_floor(design.equivalence_levels()[-1]) >= \
        math.log1p(design.min_effect - m)


def tau_df_words(design: Design) -> str:
    """How the carried τ's uncertainty enters, in words."""
    if design.process_ms is not None:
        return (f"carried with its uncertainty from {design.process_ms[2] + 1} processes: a "
                "generalized confidence interval")
    df = design.process_df()
    return ("taken as known" if math.isinf(df)
            else f"carried with Satterthwaite's effective df, its own {df:.1f}")


def process_hint(lk: Look, design: Design) -> tuple[str, str]:
    """What would decide an A/B that the between-process spread alone keeps undecided: never
    more pairs of these two processes — restarts of both servers, each adding a pair of fresh
    processes whose level difference averages out as 2τ²/N."""
    floor = math.expm1(design.process_floor(design.level))
    k = restarts_needed(lk, design)
    unsure = planning_tau(design, design.level) > 1.2 * design.process_sd
    more = (f" Its uncertainty is part of that width (τ learned from "
            f"{design.process_ms[2] + 1} processes): learning τ from more fresh processes of "
            "A's launch narrows it." if unsure and design.process_ms is not None else "")
    many = (f"about {k} server restarts per side" if k is not None else
            f"more than {th.MAX_TRIALS_SUGGESTED} server restarts per side")
    return (f"What would decide it: no number of pairs between these two processes — the "
            f"between-process spread alone (τ {100 * design.process_sd:.1f} %, "
            f"{tau_df_words(design)}) keeps the "
            f"interval ±{100 * floor:.1f} % wide: a smaller change cannot be told between two "
            f"processes of this stack on this host. {many[0].upper() + many[1:]} would (each "
            f"side's level then averages that many processes: 2τ²/N).{more}",
            f"Let the A/B restart both servers itself over {many}: `decodescope ab "
            "--launch-a 'CMD_A … {port}' --launch-b 'CMD_B … {port}'` (same caliber) starts a "
            "fresh process of each side per start and tests the starts' mean changes, which "
            "carry the between-process spread.")


def render_ab(v: ABVerdict) -> str:
    out = [v.headline + f" (exit {v.exit_code})", *(f"  {x}" for x in v.lines), ""]
    out.append(f"A: run {v.run_a} {v.urls[0] or ''}")
    out.append(f"B: run {v.run_b} {v.urls[1] or ''}")
    if v.looks:
        out += ["", f"Looks ({v.design.unit}: B vs A, interval):"]
        out += [f"  {x.pairs:>3}: {pct(x.rel)} ({pct(x.rel_lo)} … {pct(x.rel_hi)}) → "
                f"{x.decision}" for x in v.looks]
    if v.evidence:
        out += ["", "Evidence (the two runs, B against A):"]
        width = max(len(r.check) for r in v.evidence)
        out += [f"  {r.check:<{width}}  {r.result}" for r in v.evidence]
    if v.next_step:
        out += ["", f"Next: {v.next_step}"]
    out += ["", f"Both sides are stored as runs {v.run_a} (A) and {v.run_b} (B)."]
    return "\n".join(out)
