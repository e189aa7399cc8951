"""The between-process spread (verdict/process_spread.py) and the A/B that carries it.

Issue 36: two identical llama.cpp processes on one H100 differed by several % for minutes, and
an A/B between them (one process per side) read a "change" in 5 of 10 repetitions. Pure and
seeded, but for one short A/B between two simulators through the CLI."""

from __future__ import annotations

import json
import math
import random
import statistics
from pathlib import Path

import pytest
from test_triage_support import process_fingerprint, store_run, trial

from decodescope.cli.main import main
from decodescope.fingerprint.stack import Item
from decodescope.sim import SimConfig, SimServer
from decodescope.store.connect import open_store
from decodescope.verdict import process_spread as ps
from decodescope.verdict import thresholds as th
from decodescope.verdict.paired_test import (
    Design,
    ab_verdict,
    look,
    render_ab,
    restarts_needed,
    run_sequential,
    verdict_kind,
)

pytestmark = pytest.mark.timeout(300)

CAL = "demo-code-rewrite"
T0 = 1_790_000_000.0


def fp(start: float | None = T0, pid: int = 4242, port: int = 8181) -> dict:
    return process_fingerprint(start, pid=pid, port=port)


# -- the estimate ------------------------------------------------------------------------------
def _groups(rng: random.Random, tau: float, within: float, g: int, n: int) -> list[list[float]]:
    out = []
    for _ in range(g):
        u = rng.gauss(0.0, tau)
        out.append([u + rng.gauss(0.0, within) for _ in range(n)])
    return out


def test_the_anova_recovers_a_known_between_process_spread():
    # 60 processes × 4 runs, τ 5 %, runs within a process 3 %: τ̂ near 5 %; and over many
    # seeded stores of 3 processes, the moment estimate of τ² is unbiased on average
    rng = random.Random(36)
    a = ps.anova(_groups(rng, 0.05, 0.03, 60, 4))
    assert a.groups == 60 and a.n == 240 and a.n0 == pytest.approx(4.0)
    assert math.sqrt(a.tau2) == pytest.approx(0.05, abs=0.008), math.sqrt(a.tau2)
    assert a.ms_within == pytest.approx(0.03 ** 2, rel=0.25)
    raw = [ps.anova(_groups(rng, 0.05, 0.03, 3, 3)) for _ in range(2000)]
    unbiased = statistics.fmean((x.ms_between - x.ms_within) / x.n0 for x in raw)
    assert unbiased == pytest.approx(0.05 ** 2, rel=0.15), math.sqrt(max(unbiased, 0))
    # identical processes (τ = 0): the estimate is small, never negative
    z = ps.anova(_groups(rng, 0.0, 0.03, 30, 4))
    assert 0.0 <= math.sqrt(z.tau2) < 0.02


def test_the_shown_upper_bound_covers_tau_from_three_processes():
    # The one-sided 95 % upper bound the record shows (no longer carried: τ̂ with
    # Satterthwaite's df is). From 3 processes × 3 runs it must reach the true τ in about 95 %
    # of seeded stores (the point estimate: about half).
    rng = random.Random(7)
    tau = 0.05
    covered = point = 0
    for _ in range(1000):
        a = ps.anova(_groups(rng, tau, 0.03, 3, 3))
        covered += math.sqrt(a.tau2_upper(th.PROCESS_SPREAD_CONFIDENCE)) >= tau
        point += math.sqrt(a.tau2) >= tau
    assert covered / 1000 >= 0.93, (covered, point)
    assert point / 1000 < 0.6, (covered, point)


@pytest.fixture
def store(tmp_path):
    with open_store(tmp_path / "runs.sqlite") as st:
        yield st


def _store_process(store, start: float, level: float, runs: int, rng: random.Random) -> None:
    for _ in range(runs):
        r = level * math.exp(rng.gauss(0.0, 0.01))
        store_run(store, CAL, [trial(r * f) for f in (0.99, 1.0, 1.01)],
                  fingerprint=fp(start, pid=int(start) % 100_000))


def test_tau_is_learned_from_the_store_per_server_process_and_unknown_below_three(store):
    from decodescope.store import runs as sr

    rng = random.Random(3)
    _store_process(store, T0, 800.0, 3, rng)
    _store_process(store, T0 + 900, 930.0, 3, rng)
    _store_process(store, T0 + 1800, 700.0, 1, rng)  # one run: does not count
    from decodescope.caliber.resolve import resolve

    ident = resolve(CAL).identity
    runs = sr.list_runs(store, caliber=ident, limit=1000)
    few = ps.learn_for_fingerprint(runs, fp(T0), ident)
    assert not few.known and few.sd is None and few.processes == 2
    assert f"{th.MIN_PROCESSES} needed" in (few.why or "") and "decodescope spread" in (few.why or "")
    assert "1 more with fewer runs" in (few.why or "")
    assert "unknown" in few.text()

    _store_process(store, T0 + 1800, 700.0, 2, rng)  # now 3 runs for the third process
    runs = sr.list_runs(store, caliber=ident, limit=1000)
    got = ps.learn_for_fingerprint(runs, fp(T0 + 5000), ident)  # any process of the stack
    assert got.known and got.processes == 3 and got.runs == 9 and got.df_between == 2
    assert got.sd is not None and got.upper is not None and got.upper >= got.sd
    levels = [math.log(800), math.log(930), math.log(700)]
    assert got.sd == pytest.approx(statistics.stdev(levels), rel=0.1)  # within part is small
    assert "3 server processes" in got.text() and "rough" in got.text()
    d = got.to_dict()
    assert d["tau"] == got.sd and d["statistic"] and "ANOVA" in d["basis"]
    # another stack (another launch) learns nothing from these runs
    other = fp(T0)
    other["sections"]["process"]["cmdline"] = Item.ok(["llama-server", "-m", "other.gguf"]).to_dict()
    assert not ps.learn_for_fingerprint(runs, other, ident).known


def test_one_process_or_two_from_the_fingerprints():
    assert ps.same_process(fp(T0), fp(T0), "http://a", "http://b")[0] is True
    assert ps.same_process(fp(T0), fp(T0 + 5, pid=99), "http://a", "http://b")[0] is False
    assert ps.same_process(fp(T0, pid=1), fp(T0, pid=2), "http://a", "http://b")[0] is False
    assert ps.same_process(None, None, "http://a", "http://a")[0] is True  # ab URL URL
    assert ps.same_process(None, fp(T0), "http://a", "http://b")[0] is None
    p = ps.for_ab(fp(T0), fp(T0), "http://a", "http://b", None)
    assert not p.differ and p.carried == 0.0 and p.spread is None
    sp = ps.ProcessSpread(0.04, 0.09, 0.95, 3, 9, 2, 6, 5.2e-3, 1e-3, 3.0)
    p2 = ps.for_ab(None, None, "http://a", "http://b", sp)
    assert p2.differ and not p2.known and p2.carried == 0.04  # τ̂, with its ANOVA:
    assert p2.design_fields() == {"process_sd": 0.04, "process_ms": (5.2e-3, 1e-3, 2, 6, 3.0)}
    assert p2.to_dict()["carried"] == ps.CARRIED and "generalized" in ps.CARRIED
    assert p.design_fields() == {"process_sd": 0.0, "process_ms": None}  # one process


# -- the sequential test with the process offsets ---------------------------------------------
def _sequences(seed: int, reps: int, tau: float, pair_sd: float, n: int):
    rng = random.Random(seed)
    for _ in range(reps):
        offset = rng.gauss(0.0, tau) - rng.gauss(0.0, tau)  # B's process level − A's
        yield [offset + rng.gauss(0.0, pair_sd) for _ in range(n)]


def _alarms(design: Design, seqs) -> int:
    n = 0
    for ratios in seqs:
        lk = run_sequential(ratios, design)
        n += lk is not None and lk.decision == "change"
    return n


@pytest.mark.parametrize("tau,pair_sd", [(0.02, 0.03), (0.05, 0.07)])
def test_identical_stacks_on_two_processes_alarm_within_alpha_only_when_tau_is_carried(
        tau, pair_sd):
    # 400 seeded A/Bs between two processes of one stack, each process's level drawn from τ:
    # with τ carried the share that ever reads "beyond noise" stays ≤ α; without it (one
    # process per side taken for the stack) it is far above. No minimum-effect gate (0): the
    # raw error rate of the interval.
    reps = 400
    seqs = list(_sequences(11, reps, tau, pair_sd, th.AB_MAX_PAIRS))
    carried = _alarms(Design(min_effect=0.0, process_sd=tau), seqs)
    naive = _alarms(Design(min_effect=0.0), seqs)
    msg = (f"τ {tau:.0%}, pair sd {pair_sd:.0%}: false alarms with τ carried {carried}/{reps} "
           f"({carried / reps:.1%}), without {naive}/{reps} ({naive / reps:.1%})")
    print(msg)
    assert carried / reps <= th.AB_ALPHA, msg
    assert naive / reps >= 4 * th.AB_ALPHA and naive >= 5 * max(carried, 1), msg


def _carried_design(a: ps.Anova) -> Design:
    """The Design `ab` runs between two processes with τ learned by this ANOVA (the production
    path: ProcessSpread → Processes → Design)."""
    sp = ps.ProcessSpread(math.sqrt(a.tau2), math.sqrt(a.tau2_upper(0.95)), 0.95, a.groups,
                          a.n, a.df_between, a.df_within, a.ms_between, a.ms_within, a.n0,
                          den=4.0 * a.tau2_den())
    procs = ps.for_ab(fp(T0), fp(T0 + 60, pid=7), "http://a", "http://b", sp)
    from dataclasses import replace

    return replace(Design(), **procs.design_fields())


def _point_design(a: ps.Anova) -> Design:
    return Design(process_sd=math.sqrt(a.tau2))  # τ̂ taken as known: the pairs' df


def _within_alpha(count: int, reps: int) -> bool:
    """Not above α beyond its Monte Carlo error: a one-sided exact binomial test at 5 %."""
    from scipy.stats import binomtest

    return binomtest(count, reps, th.AB_ALPHA, alternative="greater").pvalue > 0.05


def _procedure(seed: int, reps: int, tau: float, pair_sd: float, g: int,
               shift: float, design=None) -> dict[str, int]:
    """Seeded end-to-end A/Bs: each learns τ from a fresh store of g processes × 3 runs (runs
    within a process 1 %), carries it as `ab` does, then runs the full sequential test between
    two new processes whose stacks differ by `shift` (log): verdict counts."""
    rng = random.Random(seed)
    out = {"REGRESSION": 0, "IMPROVEMENT": 0, "NO_CHANGE": 0, "INCONCLUSIVE": 0}
    for _ in range(reps):
        a = ps.anova(_groups(rng, tau, 0.01, g, 3))
        offset = rng.gauss(0.0, tau) - rng.gauss(0.0, tau)
        ratios = [shift + offset + rng.gauss(0.0, pair_sd) for _ in range(th.AB_MAX_PAIRS)]
        lk = run_sequential(ratios, (design or _carried_design)(a))
        assert lk is not None
        out[verdict_kind(lk)] += 1
    return out


# The cells of bench/bench_tau_carry.py's grid (docs/methodology.md §9, 1000 sequences each)
# where the generalized interval came closest to α (false alarm 4.8 %, false "no change"
# 3.0 %), and the one where τ̂ taken as known fails (14 % false "no change").
@pytest.mark.parametrize("tau,pair_sd,g", [(0.0, 0.07, 20), (0.01, 0.03, 3), (0.01, 0.01, 3)])
def test_tau_carried_by_its_generalized_interval_keeps_both_errors_end_to_end(tau, pair_sd, g):
    reps = 300
    zero = _procedure(36, reps, tau, pair_sd, g, 0.0)
    edge = _procedure(37, reps, tau, pair_sd, g, math.log1p(-th.MIN_EFFECT))
    alarms = zero["REGRESSION"] + zero["IMPROVEMENT"]
    msg = (f"τ {tau:.0%}, pair sd {pair_sd:.0%}, {g} processes: identical {zero}, changed by the "
           f"minimum effect {edge}")
    print(msg)
    assert _within_alpha(alarms, reps), msg  # false alarms
    assert _within_alpha(edge["NO_CHANGE"], reps), msg  # false "no change"
    if (tau, pair_sd, g) == (0.01, 0.01, 3):  # τ̂ taken as known fails here (grid: 14 %)
        point = _procedure(37, reps, tau, pair_sd, g, math.log1p(-th.MIN_EFFECT),
                           _point_design)
        assert not _within_alpha(point["NO_CHANGE"], reps), (point, msg)


def test_the_generalized_interval_decides_a_regression_the_upper_bound_misses():
    # The price the upper bound paid: at τ 1 %, pair sd 3 %, 10 processes a −5 % stack is a
    # REGRESSION far more often with the generalized interval (grid: 70 % against 33 %).
    rng = random.Random(5)
    hits_s = hits_u = 0
    reps = 150
    for _ in range(reps):
        a = ps.anova(_groups(rng, 0.01, 0.01, 10, 3))
        offset = rng.gauss(0.0, 0.01) - rng.gauss(0.0, 0.01)
        ratios = [math.log(0.95) + offset + rng.gauss(0.0, 0.03) for _ in range(th.AB_MAX_PAIRS)]
        for d, which in ((_carried_design(a), "s"),
                         (Design(process_sd=math.sqrt(a.tau2_upper(0.95))), "u")):
            lk = run_sequential(ratios, d)
            hit = lk is not None and verdict_kind(lk) == "REGRESSION"
            hits_s += hit and which == "s"
            hits_u += hit and which == "u"
    assert hits_s > 1.5 * hits_u and hits_s >= 0.5 * reps, (hits_s, hits_u)


def test_the_generalized_interval_by_its_limits():
    from decodescope.verdict.paired_test import gpq_half

    lev = 0.95
    z = statistics.NormalDist().inv_cdf(0.975)
    # all df huge: the pivots are 1, the interval is z·√(s²/n + 2τ²)
    tau2 = (9e-4 - 1e-4) / 4.0
    big = (9e-4, 1e-4, 10 ** 7, 10 ** 7, 4.0)
    assert gpq_half(lev, 1e-4, 10 ** 7, big) == pytest.approx(z * math.sqrt(1e-4 + 2 * tau2),
                                                               rel=0.04)
    # deterministic (one seed), and wider with fewer processes
    few = (9e-4, 1e-4, 2, 6, 4.0)
    assert gpq_half(lev, 1e-4, 20, few) == gpq_half(lev, 1e-4, 20, few)
    assert gpq_half(lev, 1e-4, 20, few) > gpq_half(lev, 1e-4, 20, (9e-4, 1e-4, 19, 40, 4.0))
    # τ̂ = 0 from 3 processes still widens it (τ² is not known to be 0); the floor alone > 0
    zero = (1e-4, 2e-4, 2, 6, 3.0)
    d = Design(process_sd=0.0, process_ms=zero)
    assert d.process_floor(lev) > 0.0 and d.carries_process
    assert gpq_half(lev, 1e-4, 39, zero) > gpq_half(lev, 1e-4, 39, (1e-4, 2e-4, 10 ** 7,
                                                                    10 ** 7, 3.0))
    with pytest.raises(ValueError, match="process_ms"):
        Design(process_ms=(1e-4, 2e-4, 0, 6, 3.0))


def test_satterthwaite_df_of_the_combined_variance():
    # Satterthwaite's df (measured in the grid, not what `ab` carries): by hand for one ANOVA
    # df_V = V²/((s²/n)²/df_pairs + 4·Σ(cᵢ·MSᵢ)²/dfᵢ)
    a = ps.Anova(5, 15, 4e-4, 1e-4, 3.0)
    tau2 = (4e-4 - 1e-4) / 3.0
    den = (4e-4 / 3.0) ** 2 / 4 + (1e-4 / 3.0) ** 2 / 10
    assert a.tau2_den() == pytest.approx(den) and a.tau2_df() == pytest.approx(tau2 ** 2 / den)
    d = Design(process_sd=math.sqrt(a.tau2), process_den=4.0 * a.tau2_den())
    se, df = d.combined(0.02 ** 2 / 30, 29)
    v = 0.02 ** 2 / 30 + 2 * tau2
    assert se == pytest.approx(math.sqrt(v))
    assert df == pytest.approx(v * v / ((0.02 ** 2 / 30) ** 2 / 29 + 4 * den))
    assert d.process_df() == pytest.approx(tau2_df := tau2 ** 2 / den) and tau2_df < 29
    # τ taken as known (process_den 0): the pairs' df
    assert Design(process_sd=0.01).combined(1e-4, 9) == (pytest.approx(math.sqrt(1e-4 + 2e-4)),
                                                        9)
    # τ̂ truncated at 0: its term still lowers the df (an estimate of 0 from few processes)
    z = ps.Anova(3, 9, 1e-4, 2e-4, 3.0)
    dz = Design(process_sd=0.0, process_den=4.0 * z.tau2_den())
    assert dz.combined(1e-4, 39)[1] < 39
    # the MLS bound of τ² is never below the χ² bound (it adds the within part's uncertainty)
    assert a.tau2_upper_mls(0.95) >= a.tau2_upper(0.95) >= a.tau2


@pytest.mark.parametrize("seed", range(30))
def test_tau_zero_leaves_todays_look_and_verdict_unchanged(seed):
    rng = random.Random(seed)
    ratios = [rng.gauss(rng.choice([0.0, -0.05]), 0.03) for _ in range(th.AB_MAX_PAIRS)]
    d0, dz = Design(), Design(process_sd=0.0)
    assert look(ratios[:9], d0) == look(ratios[:9], dz)
    lk = run_sequential(ratios, d0)
    assert lk is not None
    n = lk.pairs
    kw = dict(stopped="decided", run_a=1, run_b=2, urls=("http://a", "http://a"),
              fingerprints=(fp(T0), fp(T0)), runs_verdict=None)
    before = ab_verdict(ratios[:n], ["AB", "BA"] * 20, [lk], d0, **kw)  # type: ignore[arg-type]
    one = ps.for_ab(fp(T0), fp(T0), "http://a", "http://a", None)  # ab URL URL: one process
    after = ab_verdict(ratios[:n], ["AB", "BA"] * 20, [lk], dz, processes=one,
                       **kw)  # type: ignore[arg-type]
    assert (after.kind, after.cause, after.headline, after.lines, after.next_step) == \
        (before.kind, before.cause, before.headline, before.lines, before.next_step)
    assert after.to_dict()["processes"]["differ"] is False


def test_when_tau_alone_exceeds_the_minimum_effect_no_number_of_pairs_decides():
    # τ 4 %: z·√2·τ ≈ 12 % > 3 %. Identical servers with a tight pair sd: never NO_CHANGE
    # (the equivalence interval cannot fit), never "rerun with --max-pairs", but restarts.
    a = ps.Anova(4, 12, 1e-4 + 3.0 * 0.04 ** 2, 1e-4, 3.0)  # τ̂ 4 % from 4 processes × 3
    tau = math.sqrt(a.tau2)
    sp = ps.ProcessSpread(tau, math.sqrt(a.tau2_upper(0.95)), 0.95, 4, 12, 3, 8, a.ms_between,
                          a.ms_within, a.n0, metric="engine decode rate", den=4 * a.tau2_den())
    procs = ps.for_ab(fp(T0), fp(T0 + 60, pid=7), "http://a", "http://b", sp)
    d = Design(**procs.design_fields())
    assert tau == pytest.approx(0.04) and d.process_ms == (a.ms_between, a.ms_within, 3, 8, 3.0)
    assert d.undecidable_by_pairs() and not Design(process_sd=0.005).undecidable_by_pairs()
    # the floor: the generalized interval with the pairs' term 0, wider than z·√2·τ̂
    lev = d.equivalence_levels()[-1]
    from decodescope.verdict.paired_test import gpq_half

    assert d.process_floor(lev) == gpq_half(lev, 0.0, math.inf, d.process_ms)
    assert d.process_floor(lev) > statistics.NormalDist().inv_cdf(0.5 + lev / 2) * \
        math.sqrt(2) * tau
    rng = random.Random(5)
    ratios = [0.01 + rng.gauss(0.0, 0.01) for _ in range(d.max_pairs)]
    lk = run_sequential(ratios, d)
    assert lk is not None and lk.pairs == d.max_pairs and lk.decision == "undecided"
    assert math.expm1(lk.eq_hi) > d.min_effect  # the wider interval does not fit
    assert procs.carried == tau
    v = ab_verdict(ratios, ["AB", "BA"] * 20, [lk], d, stopped="max pairs", run_a=1, run_b=2,
                   urls=("http://a", "http://b"), fingerprints=(fp(T0), fp(T0 + 60, pid=7)),
                   runs_verdict=None, processes=procs)
    assert v.kind == "INCONCLUSIVE" and v.cause == "between-process spread" and v.exit_code == 3
    assert "no number of pairs" in v.headline
    text = render_ab(v)
    assert "--max-pairs" not in text and "--max-pairs" not in (v.next_step or "")
    k = restarts_needed(lk, d)
    assert k is not None and f"about {k} server restarts per side" in (v.next_step or "")
    # N honestly: z·√((2τ² + s²/max pairs)/N) ≤ ln(1 + min effect) − ln(1 + |change|), τ the
    # planning value: the floor's τ (its uncertainty from 4 processes) where it exceeds τ̂
    from decodescope.verdict.paired_test import planning_tau

    lev_eq = d.equivalence_levels()[-1]
    z = statistics.NormalDist().inv_cdf(0.5 + lev_eq / 2)
    plan = planning_tau(d, lev_eq)
    assert plan == pytest.approx(d.process_floor(lev_eq) / (z * math.sqrt(2))) and plan > tau
    var = 2 * plan ** 2 + lk.sd ** 2 / d.max_pairs
    target = math.log1p(d.min_effect) - math.log1p(abs(lk.rel))
    assert z * math.sqrt(var / k) <= target < z * math.sqrt(var / (k - 1))
    said = [x for x in v.lines if x.startswith("What would decide it:")]
    assert said and "cannot be told between two processes of this stack" in said[0]
    assert "learned from 4 processes" in said[0] and "more fresh processes" in said[0]
    assert any(x.startswith("Two server processes") and "carr" in x for x in v.lines)
    j = v.to_dict()["processes"]
    assert j["differ"] is True and j["tau_carried"] == tau == j["spread"]["tau"]
    assert j["carried"] == ps.CARRIED and j["spread"]["tau_df"] == pytest.approx(a.tau2_df())
    assert "generalized confidence interval" in v.headline
    # a large change is still decided with τ carried (speculation off: −33 %)
    big = [math.log(0.67) + rng.gauss(0.0, 0.02) for _ in range(d.max_pairs)]
    lk2 = run_sequential(big, d)
    assert lk2 is not None and lk2.decision == "change" and lk2.pairs == d.min_pairs


def test_tau_unknown_between_two_processes_keeps_the_test_and_says_what_it_speaks_of():
    rng = random.Random(9)
    ratios = [rng.gauss(0.0, 0.01) for _ in range(th.AB_MAX_PAIRS)]
    d = Design()
    lk = run_sequential(ratios, d)
    assert lk is not None
    unknown = ps.unknown("2 server processes with ≥ 2 usable runs of this caliber on this "
                         "stack, 3 needed")
    procs = ps.for_ab(fp(T0), fp(T0 + 60, pid=7), "http://a", "http://b", unknown)
    base = dict(stopped="decided", run_a=1, run_b=2, urls=("http://a", "http://b"),
                fingerprints=(fp(T0), fp(T0 + 60, pid=7)), runs_verdict=None)
    v = ab_verdict(ratios[:lk.pairs], ["AB"] * lk.pairs, [lk], d, processes=procs,
                   **base)  # type: ignore[arg-type]
    plain = ab_verdict(ratios[:lk.pairs], ["AB"] * lk.pairs, [lk], d,
                       **base)  # type: ignore[arg-type]
    assert (v.kind, v.headline) == (plain.kind, plain.headline)  # today's test
    said = [x for x in v.lines if x.startswith("Two server processes")]
    assert said and "speaks of these two server processes" in said[0]
    assert "exchangeable" in said[0] and "decodescope spread" in said[0]
    j = v.to_dict()["processes"]
    assert j["differ"] is True and j["tau_carried"] is None
    assert j["spread"]["tau"] is None and "3 needed" in j["spread"]["why"]


# -- two simulators through the CLI ----------------------------------------------------------
def test_ab_between_two_simulators_says_whether_one_process_and_what_tau_it_carries(
        tmp_path: Path, capsys):
    from test_ab import SHORT

    cal = tmp_path / "short.toml"
    cal.write_text(SHORT)
    a = SimServer(SimConfig(time_scale=0.1, seed=3)).start_in_thread()
    b = SimServer(SimConfig(time_scale=0.1, seed=3)).start_in_thread()
    try:
        capsys.readouterr()
        code = main(["ab", a.url, b.url, "--caliber", str(cal), "--store",
                     str(tmp_path / "s.sqlite"), "--no-scrape", "--no-fingerprint", "--json",
                     "--max-pairs", "6", "--looks", "1", "--min-effect", "10"])
        out = json.loads(capsys.readouterr().out)
    finally:
        a.stop()
        b.stop()
    assert code in (0, 3) and out["verdict"] in ("NO_CHANGE", "INCONCLUSIVE"), out["headline"]
    p = out["processes"]
    assert p["differ"] is True and p["known"] is False and p["tau_carried"] is None
    assert p["spread"]["tau"] is None and p["spread"]["why"]
    assert out["design"]["process_sd"] == 0.0
    assert any(x.startswith("Two server processes") for x in out["lines"])


def test_ab_between_two_simulator_processes_carries_tau_learned_from_three(tmp_path: Path,
                                                                           capsys):
    # Three `decodescope sim` processes of one launch (their port left out of the stack): two
    # probe runs each into the store, then `ab` between two of them learns τ of A's stack from
    # those runs (3 processes) and carries τ̂ with its Satterthwaite denominator.
    import subprocess
    import sys
    from contextlib import ExitStack

    from test_ab import SHORT

    cal = tmp_path / "short.toml"
    cal.write_text(SHORT)
    db = str(tmp_path / "s.sqlite")
    main_ = "import sys; from decodescope.sim.command import command; sys.exit(command())"
    urls: list[str] = []
    with ExitStack() as stack:
        for _ in range(3):
            proc = subprocess.Popen([sys.executable, "-c", main_, "--port", "0", "--json",
                                     "--time-scale", "0.1", "--seed", "3"],
                                    stdout=subprocess.PIPE, text=True)
            stack.callback(proc.wait, 10)
            stack.callback(proc.terminate)
            assert proc.stdout is not None
            stack.callback(proc.stdout.close)
            urls.append(json.loads(proc.stdout.readline())["url"])
            for _ in range(2):
                assert main(["probe", urls[-1], "--caliber", str(cal), "--trials", "3",
                             "--warmup", "0", "--no-scrape", "--store", db, "--json"]) == 0
        capsys.readouterr()
        code = main(["ab", urls[0], urls[1], "--caliber", str(cal), "--store", db,
                     "--no-scrape", "--json", "--max-pairs", "6", "--looks", "1",
                     "--min-effect", "10"])
        out = json.loads(capsys.readouterr().out)
    assert code in (0, 1, 3), out["headline"]
    p = out["processes"]
    print(out["headline"], *out["lines"], sep="\n")
    assert p["differ"] is True and p["known"] is True, p
    sp = p["spread"]
    assert sp["processes"] == 3 and sp["runs"] == 6 and sp["df_between"] == 2, sp
    assert p["tau_carried"] == sp["tau"] == out["design"]["process_sd"] >= 0
    assert sp["tau_upper"] >= sp["tau"] and p["carried"] == ps.CARRIED
    assert out["design"]["process_ms"] == [sp["ms_between"], sp["ms_within"], 2, 3, sp["n0"]]
