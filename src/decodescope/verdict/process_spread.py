"""The between-process spread: how far two server processes of one stack differ in level.

Two processes of one unchanged stack, started the same way on one host, do not run at one
speed: on a lent H100 (issue 36, docs/methodology.md §9) fresh llama.cpp processes of one
launch ran 783–941, 919–1014, 694–848 and 772–819 tok/s for minutes, and an interleaved A/B
between two identical processes read a "change" of −6.1 … +13.8 % in 5 of 10 repetitions. A
pair of trials cancels the drift common to both sides, not the difference of the two
processes' levels: an A/B between two processes measures that difference plus any change of
stack. This module learns its size from the store, so `ab` can carry it.

**Statistic.** τ, the sd of a server process's level of the log decode rate (the rate the
run-to-run spread uses: the engine's when at least MIN_SPREAD_RUNS runs have it, else the
client's) beyond what the scatter of its runs explains. **Basis:** the stored runs of one
caliber on one stack (run_spread.stack_key; ab arms and unusable runs left out as the spread
leaves them, the runs of a trend left out by run_spread.without_trends), grouped by server
process (server_state.instance_key, the stack plus the process start); processes with at
least MIN_PROCESS_RUNS runs count, and at least MIN_PROCESSES of them are needed.
**Method:** one-way random-effects ANOVA on the runs' mean log rates, method of moments:
τ² = max(0, (MS_between − MS_within) / n₀), n₀ = (N − Σnᵢ²/N)/(g − 1) for g processes and N
runs (Searle, Casella & McCulloch, *Variance Components*, 1992, §3.5).

**What `ab` carries: the ANOVA itself, for a generalized confidence interval.** The A/B's
mean pair log ratio has variance s²/n_eff + 2τ² (its pairs, and the difference of two
processes' levels). τ from 3 processes has 2 df: its point estimate is 0 about a third of the
time when τ is not, so `ab` does not take τ̂ as known. It carries the ANOVA's mean squares,
their df and n₀ (`Processes.design_fields` → `paired_test.Design.process_ms`), and each
interval is the generalized confidence interval of Weerahandi (1993) — each mean square
replaced by its χ² pivot (paired_test.gpq_half). Chosen by measurement (bench/bench_tau_carry.py,
docs/methodology.md §9): over τ 0–5 %, pair sd 1–7 % and 3–20 stored processes it kept the
false-alarm and the false-"no change" rates ≤ α and decided most often, against the one-sided
χ² upper bound of τ (formerly carried; still computed and shown: `upper`), its MLS
(Graybill–Wang) variant and τ̂ with Satterthwaite's (1946) effective df.

Pure, but for `learn_for_fingerprint`'s caller, which reads the run store.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from decodescope.records.stored_run import StoredRun
from decodescope.verdict import thresholds as th
from decodescope.verdict.stack import describe_stack, stack_key, usable

STATISTIC = ("τ: sd of a server process's level of the log decode rate beyond its runs' "
             "within-process scatter")
METHOD = ("one-way random-effects ANOVA on per-run mean log rates grouped by server process "
          "(τ² = max(0, (MS_between − MS_within)/n₀)); carried: its mean squares, for a "
          "generalized confidence interval of the A/B (Weerahandi 1993)")
CARRIED = "τ̂ with a generalized confidence interval (GPQ of its ANOVA mean squares)"


@dataclass(frozen=True)
class ProcessSpread:
    """The between-process spread of one stack at one caliber (relative, log scale); `sd` and
    `upper` None when it is unknown, with `why`."""

    sd: float | None  # τ̂, the point estimate (`ab` carries it with its ANOVA: `ms`)
    upper: float | None  # its one-sided χ² upper bound at `confidence` (shown, not carried)
    confidence: float
    processes: int  # server processes with ≥ MIN_PROCESS_RUNS runs that the estimate saw
    runs: int  # their runs
    df_between: int | None = None  # g − 1
    df_within: int | None = None  # N − g
    ms_between: float | None = None
    ms_within: float | None = None
    n0: float | None = None
    metric: str | None = None  # "engine decode rate" | "client decode rate"
    stack: str | None = None
    why: str | None = None  # why unknown
    left_out: int = 0  # runs of a trend left out
    trends: tuple[str, ...] = ()
    statistic: str = STATISTIC
    basis: str = METHOD
    # Satterthwaite's denominator of 2τ̂²: 4·Σ (cᵢ·MSᵢ)²/dfᵢ (shown as τ̂²'s effective df)
    den: float | None = None

    @property
    def known(self) -> bool:
        return self.sd is not None

    @property
    def df(self) -> float | None:
        """The effective df of the carried 2τ̂² alone, (2τ̂²)²/den (0 when τ̂ is 0)."""
        if self.sd is None or not self.den:
            return None
        return (2.0 * self.sd ** 2) ** 2 / self.den

    def text(self) -> str:
        if self.sd is None or self.upper is None:
            return f"between-process spread unknown: {self.why}"
        trend = (f"; {self.left_out} run{'s' if self.left_out != 1 else ''} of a trend left "
                 "out" if self.left_out else "")
        where = f" of this stack ({self.stack})" if self.stack else ""
        df = f"τ̂²'s effective df {self.df:.1f}, " if self.df is not None else ""
        return (f"between-process spread τ {100 * self.sd:.1f} % (carried with its "
                f"uncertainty: {df}one-sided "
                f"{100 * self.confidence:.0f} % upper bound {100 * self.upper:.1f} %) "
                f"from {self.processes} server processes{where}, {self.runs} runs "
                f"({self.df_between} df between processes: "
                f"{'rough' if (self.df_between or 0) < 5 else 'fair'}), {self.metric}{trend}")

    def to_dict(self) -> dict[str, Any]:
        return {"tau": self.sd, "tau_upper": self.upper, "confidence": self.confidence,
                "carried": CARRIED if self.known else None, "tau_df": self.df,
                "satterthwaite_den": self.den,
                "processes": self.processes, "runs": self.runs,
                "df_between": self.df_between, "df_within": self.df_within,
                "ms_between": self.ms_between, "ms_within": self.ms_within, "n0": self.n0,
                "metric": self.metric, "stack": self.stack, "why": self.why,
                "left_out": self.left_out, "trends": list(self.trends),
                "statistic": self.statistic, "basis": self.basis, "text": self.text()}


def unknown(why: str, *, processes: int = 0, runs: int = 0,
            stack: str | None = None) -> ProcessSpread:
    return ProcessSpread(None, None, th.PROCESS_SPREAD_CONFIDENCE, processes, runs, stack=stack,
                         why=why)


# -- the estimate --------------------------------------------------------------------------
@dataclass(frozen=True)
class Anova:
    """One-way random-effects ANOVA of groups of values (method of moments)."""

    groups: int
    n: int
    ms_between: float
    ms_within: float
    n0: float

    @property
    def tau2(self) -> float:
        return max(0.0, (self.ms_between - self.ms_within) / self.n0)

    def tau2_upper(self, confidence: float) -> float:
        from scipy.stats import chi2

        df = self.groups - 1
        ms_hi = df * self.ms_between / float(chi2.ppf(1.0 - confidence, df))
        return max(0.0, (ms_hi - self.ms_within) / self.n0)

    @property
    def df_between(self) -> int:
        return self.groups - 1

    @property
    def df_within(self) -> int:
        return self.n - self.groups

    def tau2_den(self) -> float:
        """Satterthwaite's (1946) denominator for τ̂² = (MS_b − MS_w)/n₀: Σ (cᵢ·MSᵢ)²/dfᵢ with
        c = ±1/n₀ (half the estimated variance of τ̂², each MS's variance taken as 2·MS²/df)."""
        return ((self.ms_between / self.n0) ** 2 / self.df_between
                + (self.ms_within / self.n0) ** 2 / self.df_within)

    def tau2_df(self) -> float:
        """τ̂²'s Satterthwaite effective df: τ̂⁴ / Σ (cᵢ·MSᵢ)²/dfᵢ (0 when τ̂² is 0)."""
        return self.tau2 ** 2 / self.tau2_den()

    def tau2_upper_mls(self, confidence: float) -> float:
        """The modified large-sample (MLS) one-sided upper bound of τ² (Graybill & Wang 1980;
        Burdick & Graybill, *Confidence Intervals on Variance Components*, 1992, §3.3):
        τ̂² + √(H₁²·MS_b² + G₂²·MS_w²)/n₀, H₁ = df_b/χ²_{1−c; df_b} − 1,
        G₂ = 1 − df_w/χ²_{c; df_w} (the within part's uncertainty carried too)."""
        from scipy.stats import chi2

        h1 = self.df_between / float(chi2.ppf(1.0 - confidence, self.df_between)) - 1.0
        g2 = 1.0 - self.df_within / float(chi2.ppf(confidence, self.df_within))
        raw = (self.ms_between - self.ms_within) / self.n0
        return max(0.0, raw + math.sqrt((h1 * self.ms_between) ** 2
                                        + (g2 * self.ms_within) ** 2) / self.n0)


def anova(groups: Sequence[Sequence[float]]) -> Anova:
    """ANOVA of ≥ 2 groups of ≥ 2 values each (ValueError otherwise)."""
    gs = [list(g) for g in groups]
    if len(gs) < 2 or any(len(g) < 2 for g in gs):
        raise ValueError("the ANOVA needs at least 2 groups of at least 2 values")
    g = len(gs)
    n = sum(len(x) for x in gs)
    grand = statistics.fmean(v for x in gs for v in x)
    means = [statistics.fmean(x) for x in gs]
    ssb = sum(len(x) * (m - grand) ** 2 for x, m in zip(gs, means, strict=True))
    ssw = sum((v - m) ** 2 for x, m in zip(gs, means, strict=True) for v in x)
    n0 = (n - sum(len(x) ** 2 for x in gs) / n) / (g - 1)
    return Anova(g, n, ssb / (g - 1), ssw / (n - g), n0)


def _run_logs(run: StoredRun, key: str) -> list[float]:
    from decodescope.verdict.run_spread import _per_run_logs

    return _per_run_logs(run, key)


def estimate(runs: Sequence[StoredRun], *, confidence: float = th.PROCESS_SPREAD_CONFIDENCE,
             stack: str | None = None) -> ProcessSpread:
    """τ from these runs (one caliber, one stack); unknown, with the reason, below
    MIN_PROCESSES server processes of ≥ MIN_PROCESS_RUNS runs."""
    from decodescope.verdict import server_state as ss
    from decodescope.verdict.run_spread import without_trends

    kept, left_out, trends = without_trends(runs)
    key, metric = "engine_decode_rate", "engine decode rate"
    logs = {r.id: x for r in kept if len(x := _run_logs(r, key)) >= th.MIN_UNITS}
    if len(logs) < th.MIN_SPREAD_RUNS:
        key, metric = "decode_rate", "client decode rate"
        logs = {r.id: x for r in kept if len(x := _run_logs(r, key)) >= th.MIN_UNITS}
    by_process: dict[Any, list[float]] = {}
    no_start = 0
    for r in kept:
        if r.id not in logs:
            continue
        ik = ss.instance_key(r)
        if ik is None:
            no_start += 1
            continue
        by_process.setdefault(ik, []).append(statistics.fmean(logs[r.id]))
    groups = [g for g in by_process.values() if len(g) >= th.MIN_PROCESS_RUNS]
    runs_in = sum(len(g) for g in groups)
    if len(groups) < th.MIN_PROCESSES:
        notes = []
        if len(by_process) > len(groups):
            notes.append(f"{len(by_process) - len(groups)} more with fewer runs")
        if no_start:
            notes.append(f"{no_start} runs whose server start is unknown")
        why = (f"{len(groups)} server process{'es' if len(groups) != 1 else ''} with "
               f"≥ {th.MIN_PROCESS_RUNS} usable runs of this caliber on this stack"
               + (f" ({'; '.join(notes)})" if notes else "")
               + f", {th.MIN_PROCESSES} needed — learn it with `decodescope spread URL "
               f"--caliber C --runs {th.MIN_PROCESS_RUNS + 1}` after each of "
               f"≥ {th.MIN_PROCESSES} fresh starts of the server")
        return replace_trend(unknown(why, processes=len(groups), runs=runs_in, stack=stack),
                             left_out, trends)
    a = anova(groups)
    return ProcessSpread(math.sqrt(a.tau2), math.sqrt(a.tau2_upper(confidence)), confidence,
                         a.groups, a.n, a.groups - 1, a.n - a.groups, a.ms_between,
                         a.ms_within, a.n0, metric, stack, None, left_out, trends,
                         den=4.0 * a.tau2_den())


def replace_trend(p: ProcessSpread, left_out: int, trends: tuple[str, ...]) -> ProcessSpread:
    from dataclasses import replace

    return replace(p, left_out=left_out, trends=trends)


def learn_for_fingerprint(candidates: Sequence[StoredRun], fp: dict[str, Any] | None,
                          caliber_identity: str | None) -> ProcessSpread:
    """τ of the stack `fp` names at this caliber, from the stored `candidates` (the runs of
    that caliber: store.runs.list_runs(caliber=identity))."""
    key = stack_key(fp)
    if key is None:
        return unknown("the server's stack could not be fingerprinted (no launch command or "
                       "engine version), so runs of its stack cannot be found")
    runs = [r for r in candidates if r.caliber_identity == caliber_identity and usable(r)
            and stack_key(r.fingerprint) == key]
    runs.sort(key=lambda r: r.id, reverse=True)
    return estimate(runs[:th.MAX_PROCESS_SPREAD_RUNS], stack=describe_stack(key))


# -- the two sides of an A/B ---------------------------------------------------------------
@dataclass(frozen=True)
class Processes:
    """Whether an A/B's two sides are one server process or two, and the between-process
    spread it carries for that (0 for one process or an unknown τ)."""

    differ: bool  # two processes (or not known to be one)
    known: bool  # whether the fingerprints (or one URL) told
    why: str
    spread: ProcessSpread | None  # A's stack's τ; None when one process (it does not enter)

    @property
    def carried(self) -> float:
        """τ carried into the A/B's intervals (τ̂), 0 when it does not enter."""
        if not self.differ or self.spread is None or self.spread.sd is None:
            return 0.0
        return self.spread.sd

    @property
    def ms(self) -> tuple[float, float, int, int, float] | None:
        """The ANOVA carried (MS_between, MS_within, df_between, df_within, n₀), None when τ
        does not enter."""
        sp = self.spread
        if not self.differ or sp is None or sp.sd is None or sp.ms_between is None or \
                sp.ms_within is None or sp.df_between is None or sp.df_within is None or \
                sp.n0 is None:
            return None
        return (sp.ms_between, sp.ms_within, sp.df_between, sp.df_within, sp.n0)

    def design_fields(self) -> dict[str, Any]:
        """What paired_test.Design carries of it: `replace(design, **p.design_fields())`."""
        return {"process_sd": self.carried, "process_ms": self.ms}

    def to_dict(self) -> dict[str, Any]:
        on = self.differ and self.spread is not None and self.spread.known
        return {"differ": self.differ, "known": self.known, "why": self.why,
                "tau_carried": self.carried if on else None,
                "carried": CARRIED if on else None,
                "spread": self.spread.to_dict() if self.spread is not None else None}


def _pid(fp: dict[str, Any] | None) -> Any:
    if not isinstance(fp, dict):
        return None
    it = ((fp.get("sections") or {}).get("process") or {}).get("pid")
    return it.get("value") if isinstance(it, dict) and it.get("status") == "collected" else None


def _host(fp: dict[str, Any] | None) -> Any:
    if not isinstance(fp, dict):
        return None
    it = ((fp.get("sections") or {}).get("host") or {}).get("hostname")
    return it.get("value") if isinstance(it, dict) and it.get("status") == "collected" else None


def same_process(fp_a: dict[str, Any] | None, fp_b: dict[str, Any] | None,
                 url_a: str | None, url_b: str | None) -> tuple[bool | None, str]:
    """(one process?, why): True when the fingerprints show one process (same host, pid and
    start) or, without them, both sides are one URL; False when they show two; None unknown."""
    from decodescope.verdict.server_state import process_start

    sa, sb = process_start(fp_a), process_start(fp_b)
    pa, pb = _pid(fp_a), _pid(fp_b)
    ha, hb = _host(fp_a), _host(fp_b)
    if sa is not None and sb is not None:
        if round(sa) != round(sb):
            return False, "their fingerprints' process starts differ"
        if pa is not None and pb is not None and (pa != pb or ha != hb):
            return False, "their fingerprints show two processes started in the same second"
        return True, "their fingerprints show one server process (same start)"
    if url_a is not None and url_a == url_b:
        return True, "one URL on both sides (the same endpoint)"
    return None, ("unknown whether one process: the server process start is not in both "
                  "fingerprints (a remote server, or --no-fingerprint)")


def for_ab(fp_a: dict[str, Any] | None, fp_b: dict[str, Any] | None, url_a: str | None,
           url_b: str | None, spread: ProcessSpread | None) -> Processes:
    """The A/B's Processes record; `spread`: A's stack's τ (the baseline's), or None when it
    was not learned (then unknown)."""
    one, why = same_process(fp_a, fp_b, url_a, url_b)
    if one:
        return Processes(False, True, why, None)
    return Processes(True, one is not None, why,
                     spread if spread is not None else unknown("not learned"))
