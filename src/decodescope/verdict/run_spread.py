"""The between-run spread, learned from the store instead of declared.

The trials of one run share the machine's state of that moment, so a run's own interval
cannot show how far the next run of the same stack will land (docs/methodology.md §2,
/shared run-noise measurements: 3.5–4× what the within-run spread predicts). This module
estimates that component from repeated runs of one caliber on one **stack** — the same
fingerprint: host, engine, engine version, served model and launch command (its port left
out, so a restart on another port is the same stack):

* each run contributes the mean of its per-trial log decode rates (the engine's when at least
  MIN_SPREAD_RUNS runs have them — a run without it is left out, never a switch of every run
  to the client's rate — else the client's) and the within-run variance of that mean;
* `ab` arms (single trials alternating with another server) are not runs of the stack and
  never count; the stack includes the server's engine environment (GGML_*, CUDA_*, …);
* the between-run variance is the variance of the run means minus the mean within-run part
  (one-way random effects, method of moments — the logic of bench/bench_run_noise.py);
* its 95 % interval comes from the chi-square distribution of the variance of the run means
  (k − 1 degrees of freedom), less the same within-run part, floored at 0;
* a trend is not spread: the runs of each server process (verdict/server_state.py: the stack
  plus its process start; runs whose start is unknown form one series) are tested in time
  order for a monotone trend (Mann–Kendall at TREND_ALPHA, two-sided), and the runs before
  the trend's end — a warm-up after a start, or a slide — are left out, and said;
* with fewer than MIN_SPREAD_RUNS runs the estimate is too thin: a conservative prior
  (PRIOR_RUN_SD) is used instead, and the text says so and why.

`triage` widens the decode and step-rate intervals by the two sides' spreads with the
estimate's degrees of freedom (Welch–Satterthwaite), and an INCONCLUSIVE says how many runs
per side, or interleaved A/B pairs, would decide it (`decide_lines`; the pairs from the pair
sd `ab` will see, at its looks: `ab_prediction`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from decodescope.records.stored_run import StoredRun
from decodescope.verdict import thresholds as th
from decodescope.verdict.stack import (
    describe_stack,
    stack_key,
    usable,
)

SpreadSource = Literal["learned", "prior", "override", "log"]



@dataclass(frozen=True)
class RunSpread:
    """The between-run spread of one stack (relative sd of a run's mean rate, log scale)."""

    sd: float
    source: SpreadSource
    runs: int  # runs of this caliber on this stack that the estimate saw
    df: float | None = None  # degrees of freedom of `sd` (None: taken as exact)
    lo: float | None = None  # 95 % interval of `sd` (learned only)
    hi: float | None = None
    metric: str | None = None  # "engine decode rate" | "client decode rate"
    why: str | None = None  # why the prior (or how the override) was used
    stack: str | None = None  # the stack in words (shortened: two stacks may read alike)
    # what identifies the stack (verdict.stack.stack_key) of a learned spread: two learned
    # spreads are one stack's only when these are equal, never by their words or numbers
    stack_key: tuple[str, ...] | None = None
    left_out: int = 0  # runs left out as part of a trend (warm-up after a start, a slide)
    trends: tuple[str, ...] = ()  # each trend found, in words

    def trend_text(self) -> str:
        """'' or '; 4 runs left out: warm-up … over after run 4 of 10'."""
        if not self.left_out:
            return ""
        return (f"; {self.left_out} run{'s' if self.left_out != 1 else ''} of a trend left out "
                f"(a trend is not spread): {'; '.join(self.trends)}")

    def text(self) -> str:
        """One line, e.g. 'run-to-run spread 3.8 % (95 % CI 2.5 … 7.7 %) from 8 runs on this
        stack (engine decode rate)'."""
        p = f"{100 * self.sd:.1f} %"
        if self.source == "learned":
            ci = (f" (95 % CI {100 * (self.lo or 0.0):.1f} … {100 * (self.hi or 0.0):.1f} %)"
                  if self.lo is not None and self.hi is not None else "")
            where = f" on this stack ({self.stack})" if self.stack else " on this stack"
            return (f"run-to-run spread {p}{ci} from {self.runs} runs of this caliber{where}, "
                    f"{self.metric}{self.trend_text()}")
        if self.source == "override":
            return f"run-to-run spread {p} (--run-spread)"
        if self.source == "log":
            return (f"run-to-run spread {p} (declared default for engine windows — a log or "
                    "Prometheus range spans minutes of the machine's changing state, which its "
                    "units already sample)")
        return f"run-to-run spread {p}: conservative prior — {self.why}{self.trend_text()}"

    def to_dict(self) -> dict[str, Any]:
        return {"sd": self.sd, "source": self.source, "runs": self.runs, "df": self.df,
                "ci": [self.lo, self.hi] if self.lo is not None else None,
                "metric": self.metric, "why": self.why, "stack": self.stack,
                "left_out": self.left_out, "trends": list(self.trends), "text": self.text()}


# -- estimate ----------------------------------------------------------------------------------
def _per_run_logs(run: StoredRun, key: str) -> list[float]:
    out = []
    for t in (run.result or {}).get("trials") or []:
        if t.get("status") != "ok":
            continue
        v = t.get(key)
        if isinstance(v, (int, float)) and math.isfinite(v) and v > 0:
            out.append(math.log(v))
    return out


def without_trends(runs: Sequence[StoredRun]) -> tuple[list[StoredRun], int, tuple[str, ...]]:
    """(the runs outside any trend, how many were left out, each trend in words): per server
    process (server_state.instance_key; runs whose process start is unknown form one series),
    in time order, the runs before a Mann–Kendall trend's end are left out."""
    from decodescope.verdict import server_state as ss

    groups: dict[Any, list[StoredRun]] = {}
    for r in runs:
        groups.setdefault(ss.instance_key(r), []).append(r)
    keep: list[StoredRun] = []
    dropped = 0
    said: list[str] = []
    for key, group in groups.items():
        kept, tr = ss.instance_trend(group, alternative="two-sided")
        if tr is None:
            keep.extend(group)
            continue
        out = {r.id for r in kept[:tr.stretch]}
        dropped += len(out)
        keep.extend(r for r in group if r.id not in out)
        ids = sorted(out)
        who = (f"runs {ids[0]}–{ids[-1]}" if len(ids) > 2 else
               "runs " + ", ".join(map(str, ids)))
        start = "after a server start, " if key is not None else ""
        said.append(f"{start}{tr.text()} ({who})")
    keep.sort(key=lambda r: r.id, reverse=True)
    return keep, dropped, tuple(said)


def estimate(runs: Sequence[StoredRun], *, confidence: float = th.CONFIDENCE,
             stack: str | None = None, stack_key: tuple[str, ...] | None = None) -> RunSpread:
    """The between-run spread from these runs (one caliber, one stack), or the prior when
    fewer than MIN_SPREAD_RUNS of them have ≥ 2 trials with a decode rate; the runs of a trend
    (`without_trends`) are left out first, and said."""
    runs, left_out, trends = without_trends(runs)
    est = _estimate(runs, confidence=confidence, stack=stack)
    return replace(est, left_out=left_out, trends=trends,
                   stack_key=stack_key if est.source == "learned" else None)


def _estimate(runs: Sequence[StoredRun], *, confidence: float = th.CONFIDENCE,
              stack: str | None = None) -> RunSpread:
    # Learned on the rate that decides: the engine's, whenever enough runs carry it — a run
    # that withheld its engine rate is left out, not a reason to switch every run to the
    # client's rate; the client's only when too few runs have the engine's.
    key, metric = "engine_decode_rate", "engine decode rate"
    per = [x for x in (_per_run_logs(r, key) for r in runs) if len(x) >= th.MIN_UNITS]
    if len(per) < th.MIN_SPREAD_RUNS:
        key, metric = "decode_rate", "client decode rate"
        per = [x for x in (_per_run_logs(r, key) for r in runs) if len(x) >= th.MIN_UNITS]
    k = len(per)
    if k < th.MIN_SPREAD_RUNS:
        return prior(k)
    means = [statistics.fmean(x) for x in per]
    within = statistics.fmean([statistics.variance(x) / len(x) for x in per])
    s2 = statistics.variance(means)
    df = k - 1
    from scipy.stats import chi2

    a = 1.0 - confidence
    lo2 = df * s2 / float(chi2.ppf(1.0 - a / 2.0, df))
    hi2 = df * s2 / float(chi2.ppf(a / 2.0, df))
    return RunSpread(sd=math.sqrt(max(0.0, s2 - within)), source="learned", runs=k, df=float(df),
                     lo=math.sqrt(max(0.0, lo2 - within)), hi=math.sqrt(max(0.0, hi2 - within)),
                     metric=metric, stack=stack)


def prior(runs: int, *, why: str | None = None) -> RunSpread:
    """The conservative prior, with the reason it stands in for a learned spread."""
    reason = why or (f"{runs} run{'s' if runs != 1 else ''} of this caliber on this stack, "
                     f"{th.MIN_SPREAD_RUNS} needed to learn it")
    return RunSpread(sd=th.PRIOR_RUN_SD, source="prior", runs=runs,
                     why=f"{reason}; {th.PRIOR_RUN_SD:.0%} is {th.PRIOR_RUN_SD_BASIS}")


def override(sd: float) -> RunSpread:
    return RunSpread(sd=sd, source="override", runs=0)


def for_log_side() -> RunSpread:
    return RunSpread(sd=th.RUN_TO_RUN_SD, source="log", runs=0)


def same_stack_runs(candidates: Sequence[StoredRun], run: StoredRun) -> list[StoredRun]:
    """Of `candidates`, the usable runs of `run`'s caliber on `run`'s stack (newest first, at
    most MAX_SPREAD_RUNS)."""
    key = stack_key(run.fingerprint)
    if key is None:
        return []
    out = [r for r in candidates if r.caliber_identity == run.caliber_identity
           and usable(r) and stack_key(r.fingerprint) == key]
    out.sort(key=lambda r: r.id, reverse=True)
    return out[:th.MAX_SPREAD_RUNS]


def learn(candidates: Sequence[StoredRun], run: StoredRun) -> RunSpread:
    """The spread of `run`'s stack at `run`'s caliber, from the stored `candidates` (the runs
    of that caliber: store.runs.list_runs(caliber=identity))."""
    key = stack_key(run.fingerprint)
    if key is None and (run.meta or {}).get("imported"):
        return prior(0, why=f"run {run.id} is imported from another tool's files, which carry "
                            "no stack fingerprint, so runs of its stack cannot be found")
    if key is None:
        return prior(0, why=f"run {run.id} has no stack fingerprint (probed with "
                            "--no-fingerprint, or the server could not be inspected), so "
                            "runs of its stack cannot be found")
    return estimate(same_stack_runs(candidates, run), stack=describe_stack(key), stack_key=key)


# -- what would decide it ----------------------------------------------------------------------
def runs_needed(sd_b: float, sd_c: float, within_b: float, within_c: float, trials: int,
                half_width: float, confidence: float = th.CONFIDENCE) -> int | None:
    """Runs per side (each of `trials` trials) for a 95 % interval of ±half_width on the
    decode rate: k with z·√((σ_b² + s_b²/n + σ_c² + s_c²/n)/k) ≤ ln(1 + half_width) (normal
    approximation; σ the between-run spreads, s the within-run sds of the log rates). None
    beyond MAX_TRIALS_SUGGESTED."""
    z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2.0)
    n = max(1, trials)
    var = sd_b * sd_b + sd_c * sd_c + (within_b * within_b + within_c * within_c) / n
    target = math.log1p(half_width)
    k = max(1, math.ceil(z * z * var / (target * target)))
    return k if k <= th.MAX_TRIALS_SUGGESTED else None


def log_sd(values: Sequence[float]) -> float | None:
    xs = [math.log(v) for v in values if v > 0]
    return statistics.stdev(xs) if len(xs) >= 2 else None


# -- the store ---------------------------------------------------------------------------------
def for_side(store: Any, side: Any) -> RunSpread:
    """The spread of a side's stack at its caliber, learned from the store (`store`: a
    store.db.Store). A log window keeps the declared default; a side of several runs (a
    named baseline) uses its newest run's stack."""
    if getattr(side, "kind", None) != "run" or not side.run_ids:
        return for_log_side()
    from decodescope.store import runs as sr

    run = sr.get_run(store, max(side.run_ids), with_traces=False)
    if not run.caliber_identity:
        return prior(0, why=f"run {run.id} has no caliber identity")
    return learn(sr.list_runs(store, caliber=run.caliber_identity, limit=100_000), run)


def combine_sides(b: RunSpread, c: RunSpread, runs_b: int = 1,
                  runs_c: int = 1) -> tuple[float, float | None]:
    """(per-side sd, degrees of freedom) for stats.relative_change: the comparison's
    between-run variance is σ_b²/k_b + σ_c²/k_c = 2·sd² (a side pooling k runs carries σ²/k);
    its df by Welch–Satterthwaite (an exact component — prior, override — has infinite df).
    The same stack on both sides is one estimate: its own df."""
    vb, vc = b.sd * b.sd / max(1, runs_b), c.sd * c.sd / max(1, runs_c)
    sd = math.sqrt((vb + vc) / 2.0)
    if b == c and runs_b == runs_c:
        return sd, b.df
    den = ((vb * vb / b.df) if b.df else 0.0) + ((vc * vc / c.df) if c.df else 0.0)
    return sd, ((vb + vc) ** 2 / den) if den else None


# -- what the verdict says about it ------------------------------------------------------------
HINT_HALF_WIDTH = 0.05  # "N runs / N A/B pairs for ±5 %": the user's question, "slower by 5 %?"


# the other side's spread in words, beside one side's prior
_SOURCE_WORDS = {"learned": "learned spread", "override": "--run-spread",
                 "log": "declared default for engine windows"}


def one_stack(b: RunSpread, c: RunSpread) -> bool:
    """Both sides' spreads were learned from the runs of one stack (equal stack keys). Equal
    records alone do not say so: the prior, the declared default and an override are the same
    for two stacks, and two stacks' spreads can read alike (both at the 0 floor, their
    launch commands shortened to the same words)."""
    return b == c and b.source == "learned" and b.stack_key is not None


def spread_lines(b: RunSpread, c: RunSpread, same_stack: bool) -> list[str]:
    """The spread behind the comparison, in words (one line when both sides share it).
    `same_stack`: both sides are runs of one stack (`one_stack`, and not one stack's spread
    lent to the other side)."""
    if same_stack:
        return [f"Between-run term: {b.text()} (both sides: one stack)."]
    if b == c:
        return [f"Between-run term: {b.text()} (the same for both sides)."]
    return [f"Between-run term, baseline: {b.text()}.", f"Between-run term, current: {c.text()}."]


def decide_lines(verdict: Any, b: RunSpread, c: RunSpread, same_stack: bool) -> list[str]:
    """For an INCONCLUSIVE (or a NO_CHANGE too wide to rule out ±5 %): how many runs per side,
    or interleaved A/B pairs, would decide it — from the measured within-run spreads and the
    between-run spreads, not from a fixed rule."""
    d = verdict.changes["decode"]
    wide = d.half_width is not None and d.half_width > HINT_HALF_WIDTH
    if not (verdict.kind == "INCONCLUSIVE" and verdict.cause == "noise") and not (
            verdict.kind == "NO_CHANGE" and wide):
        return []
    key = "engine_decode_rate" if verdict.decode_source == "engine" else "decode_rate"
    vb, vc = verdict.baseline.values(key), verdict.current.values(key)
    sb, sc = log_sd(vb), log_sd(vc)
    if sb is None or sc is None:
        return []
    n = min(len(vb), len(vc))
    out = []
    targets = ([th.MAX_CI_HALF_WIDTH] if verdict.kind == "INCONCLUSIVE" else []) + \
        [HINT_HALF_WIDTH]
    runs = [(hw, runs_needed(b.sd, c.sd, sb, sc, n, hw)) for hw in targets]
    have = min(len(verdict.baseline.run_ids) or 1, len(verdict.current.run_ids) or 1)
    parts = []
    for hw, k in runs:
        if k is None:
            parts.append(f"more than {th.MAX_TRIALS_SUGGESTED} runs per side for ±{hw:.0%}")
        else:
            more = f" ({k - have} more each)" if k > have else ""
            parts.append(f"{k} runs per side{more} of {n} trials for ±{hw:.0%}")
    basis = ("this stack's spread" if same_stack else "the spread both sides share"
             if b == c else "the two sides' spreads")
    if b.source == "prior" or c.source == "prior":
        whose = "" if b.source == c.source else \
            f" for the baseline, the current side's {_SOURCE_WORDS[c.source]}" \
            if b.source == "prior" else \
            f" for the current side, the baseline's {_SOURCE_WORDS[b.source]}"
        basis = f"the prior spread{whose} (learned spreads are usually smaller: measure them " \
                "with `decodescope spread`)"
    out.append(f"What would decide it as separate runs: {'; '.join(parts)} — from {basis} "
               f"and the within-run sd {100 * sb:.1f} % / {100 * sc:.1f} %.")
    pred = ab_prediction(sb, len(vb), sc, len(vc), verdict.min_effect)
    if pred is not None:
        out.append(pred.text())
    return out


@dataclass(frozen=True)
class PairPrediction:
    """What `ab` would take on these stacks, predicted from the sides' trial-to-trial spread.

    An A/B pair is one trial per side, back to back: the pair's trials share the machine's
    state, so the between-run term mostly drops out and what stays is each side's spread of
    one trial around its run's mean — the within-run sds (σ_pair² ≈ s_b² + s_c²; a drift faster
    than a pair adds to it). The counts are ab's looks (Design.looks) at which the expected
    interval — the look's own level, Student t — decides: the equivalence interval inside
    ±minimum effect when nothing changed, the change interval clear of 0 for a ±5 % change.
    The pair sd estimated from a few trials is uncertain (chi-square, df = n_b + n_c − 2): the
    counts at its 95 % interval's ends are given with it; None: not within ab's maximum."""

    sd: float
    sd_lo: float
    sd_hi: float
    same: tuple[int | None, int | None, int | None]  # unchanged: at sd, sd_lo, sd_hi
    change: tuple[int | None, int | None, int | None]  # a ±5 % change
    min_effect: float
    max_pairs: int

    def text(self) -> str:
        def one(x: int | None) -> str:
            return str(x) if x is not None else f"not within {self.max_pairs}"

        def span(t: tuple[int | None, int | None, int | None]) -> str:
            return f"{one(t[0])} pairs ({one(t[1])} … {one(t[2])})"

        head = (f"about {self.same[0]} A/B pairs" if self.same[0] is not None else
                f"more than its {self.max_pairs}-pair maximum")
        return (f"Interleaved: {head} to call it unchanged (`decodescope ab URL_A URL_B "
                f"--caliber C`: equivalence interval inside ±{self.min_effect:.0%}, if nothing "
                f"changed), and {span(self.change)} to find a ±{HINT_HALF_WIDTH:.0%} change — "
                f"from the expected pair sd {100 * self.sd:.1f} % (95 % CI "
                f"{100 * self.sd_lo:.1f} … {100 * self.sd_hi:.1f} %; counts at its ends in "
                f"brackets: unchanged {span(self.same)}): the two sides' trial-to-trial sds, "
                "since a pair's trials share the machine's state and the between-run term "
                "drops out; a drift faster than a pair, or a stall, makes ab take more.")

    def to_dict(self) -> dict[str, Any]:
        return {"pair_sd": self.sd, "pair_sd_ci": [self.sd_lo, self.sd_hi],
                "pairs_unchanged": list(self.same), "pairs_change": list(self.change),
                "text": self.text()}


def ab_look_deciding(pair_sd: float, target: float, design: Any, which: int) -> int | None:
    """The first of ab's looks at which an interval of the mean pair log ratio (`which`: 0 the
    change interval, 1 the equivalence interval, at the look's level) is narrower than
    `target` (log scale) at this pair sd; None: not within design.max_pairs."""
    from decodescope.verdict.paired_test import t_crit

    for n in design.looks():
        if n < 2:
            continue
        if t_crit(design.levels_at(n)[which], n - 1) * pair_sd / math.sqrt(n) <= target:
            return n
    return None


def ab_prediction(sb: float, nb: int, sc: float, nc: int,
                  min_effect: float = th.MIN_EFFECT,
                  confidence: float = th.CONFIDENCE) -> PairPrediction | None:
    """PairPrediction from the sides' within-run sds of the log rate (sb over nb trials, sc
    over nc); None without 2 trials a side or with a minimum effect ab cannot test."""
    from scipy.stats import chi2

    from decodescope.verdict.paired_test import Design

    df = nb + nc - 2
    if nb < 2 or nc < 2 or df < 1 or not 0.0 < min_effect < 1.0:
        return None
    design = Design(min_effect=min_effect)
    sd = math.sqrt(sb * sb + sc * sc)
    a = 1.0 - confidence
    lo = sd * math.sqrt(df / float(chi2.ppf(1.0 - a / 2.0, df)))
    hi = sd * math.sqrt(df / float(chi2.ppf(a / 2.0, df)))
    eq_target, ch_target = math.log1p(min_effect), math.log1p(HINT_HALF_WIDTH)
    same = tuple(ab_look_deciding(x, eq_target, design, 1) for x in (sd, lo, hi))
    change = tuple(ab_look_deciding(x, ch_target, design, 0) for x in (sd, lo, hi))
    return PairPrediction(sd, lo, hi, same, change, min_effect,  # type: ignore[arg-type]
                          design.max_pairs)
