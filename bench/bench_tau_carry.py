"""How `ab` carries the uncertainty of the between-process spread τ: seeded error rates per method.

Each seeded sequence draws a store of g server processes × RUNS runs of A's stack (process
levels N(0, τ²), run means N(level, WITHIN²)), learns τ from it by the ANOVA of
verdict/process_spread.py, then runs the full sequential A/B (verdict/paired_test.py, default
design: Pocock spending, 6 looks 6 … 40 pairs, α 5 %, minimum effect 3 %) between two fresh
processes (offset N(0, 2τ²)) with pair log ratios N(Δ + offset, pair sd²). The same draws serve
every method and every true change Δ (common random numbers):

* Δ = 0 (identical stacks): false alarms (REGRESSION/IMPROVEMENT) ≤ α; NO_CHANGE is a decision;
* Δ = ln(1 − minimum effect): NO_CHANGE there is a false "no change" (≤ α);
* Δ = ln(0.95) (−5 %): REGRESSION is a decision.

Methods (what the A/B carries for τ):

* upper: the one-sided 95 % χ² upper bound of τ (MS_within at its estimate), the pairs' t df;
* mls: the modified large-sample (Graybill–Wang) 95 % upper bound of τ², the pairs' t df;
* satterthwaite: τ̂ (point) with Satterthwaite's effective df of s²/n + 2τ̂² (τ̂²'s term
  4·Σ(cᵢMSᵢ)²/dfᵢ, kept when τ̂² is truncated at 0);
* satt-literal: the same, but τ̂² = 0 adds nothing (the pairs' df);
* gpq: a generalized confidence interval (Weerahandi 1993; for the one-way random model
  Krishnamoorthy & Mathew 2004): the generalized pivotal quantity d̄ − Z·√(s²/n·df_p/U_p +
  2·max(0, (MS_b·df_b/U_b − MS_w·df_w/U_w)/n₀)), Z normal, U's χ² (paired_test.gpq_half,
  GPQ_DRAWS seeded draws) — what `ab` carries;
* point: τ̂ with the pairs' t df (τ taken as known: reference);
* none: τ not carried (reference).

    PYTHONPATH=src python bench/bench_tau_carry.py grid [--reps 400] [--jobs 2] [--json OUT]
        [--methods upper,gpq,...]
    PYTHONPATH=src python bench/bench_tau_carry.py table GRID.json [MORE.json ...]

bench/results/tau_carry_grid.{json,md}: `grid --reps 1000` (seed 36; 323 s on one core of the
dev box) and `grid --reps 1000 --methods gpq` (the same sequences; 580 s), merged by `table`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import statistics
import sys
import time
from functools import lru_cache
from multiprocessing import Pool
from typing import Any

from decodescope.verdict import paired_test as pt
from decodescope.verdict import process_spread as ps
from decodescope.verdict.paired_test import Design, run_sequential, verdict_kind

TAUS = (0.0, 0.01, 0.02, 0.05)
PAIR_SDS = (0.01, 0.03, 0.07)
GROUPS = (3, 5, 10, 20)
RUNS = 3  # runs per stored process
WITHIN = 0.01  # sd of a run's mean log rate within one process (issue 36's H100: ≈ 1.1–1.5 %)
METHODS = ("upper", "mls", "satterthwaite", "satt-literal", "gpq", "point", "none")
CONF = 0.95

_t = pt.t_crit


@lru_cache(maxsize=200_000)
def _t_cached(level: float, df: float) -> float:
    return _t(level, df)


class _FastStats:
    """statistics' fmean/stdev in floats (the module's exact Fractions are slow in a grid of
    millions of looks; equal to ~1e-15 here); NormalDist passed through."""

    NormalDist = statistics.NormalDist
    fmean = staticmethod(statistics.fmean)
    median = staticmethod(statistics.median)

    @staticmethod
    def stdev(xs: Any) -> float:
        x = list(xs)
        m = math.fsum(x) / len(x)
        return math.sqrt(math.fsum((v - m) ** 2 for v in x) / (len(x) - 1))




def carried(a: ps.Anova, method: str) -> tuple[float, float]:
    """(process_sd, process_den) of the Design for this method."""
    if method == "upper":
        return math.sqrt(a.tau2_upper(CONF)), 0.0
    if method == "mls":
        return math.sqrt(a.tau2_upper_mls(CONF)), 0.0
    if method == "satterthwaite":
        return math.sqrt(a.tau2), 4.0 * a.tau2_den()
    if method == "satt-literal":
        return math.sqrt(a.tau2), (4.0 * a.tau2_den() if a.tau2 > 0 else 0.0)
    if method in ("point", "gpq"):
        return math.sqrt(a.tau2), 0.0
    return 0.0, 0.0


def design_for(a: ps.Anova, method: str) -> Design:
    """The default design carrying τ of this ANOVA by this method (gpq: as `ab` does)."""
    sd, den = carried(a, method)
    if method == "gpq":
        return Design(process_sd=sd, process_ms=(a.ms_between, a.ms_within, a.df_between,
                                                 a.df_within, a.n0))
    return Design(process_sd=sd, process_den=den)


def cell(args: tuple[float, float, int, int, int, tuple[str, ...]]) -> dict[str, Any]:
    tau, pair_sd, g, reps, seed, methods = args
    pt.t_crit = _t_cached  # type: ignore[assignment]  # same function, memoised
    pt.statistics = _FastStats  # type: ignore[assignment]
    rng = random.Random(seed)
    base = Design()
    shifts = {"zero": 0.0, "edge": math.log1p(-base.min_effect), "minus5": math.log(0.95)}
    counts = {m: {k: {"REGRESSION": 0, "IMPROVEMENT": 0, "NO_CHANGE": 0, "INCONCLUSIVE": 0}
                  for k in shifts} for m in methods}
    for _ in range(reps):
        groups = []
        for _ in range(g):
            u = rng.gauss(0.0, tau)
            groups.append([u + rng.gauss(0.0, WITHIN) for _ in range(RUNS)])
        a = ps.anova(groups)
        offset = rng.gauss(0.0, tau) - rng.gauss(0.0, tau)
        noise = [rng.gauss(0.0, pair_sd) for _ in range(base.max_pairs)]
        for m in methods:
            d = design_for(a, m)
            for k, shift in shifts.items():
                lk = run_sequential([shift + offset + e for e in noise], d)
                assert lk is not None
                counts[m][k][verdict_kind(lk)] += 1
    return {"tau": tau, "pair_sd": pair_sd, "g": g, "reps": reps, "counts": counts}


def grid(reps: int, jobs: int, seed: int,
         methods: tuple[str, ...] = METHODS) -> list[dict[str, Any]]:
    cells = [(tau, sd, g, reps, seed + 1000 * i, methods)
             for i, (tau, sd, g) in enumerate(itertools.product(TAUS, PAIR_SDS, GROUPS))]
    if jobs > 1:
        with Pool(jobs) as pool:
            return pool.map(cell, cells)
    return [cell(c) for c in cells]


def rates(c: dict[str, Any], m: str) -> dict[str, float]:
    n = c["reps"]
    k = c["counts"][m]
    return {"false_alarm": (k["zero"]["REGRESSION"] + k["zero"]["IMPROVEMENT"]) / n,
            "no_change_at_0": k["zero"]["NO_CHANGE"] / n,
            "false_no_change": k["edge"]["NO_CHANGE"] / n,
            "regression_at_-5": k["minus5"]["REGRESSION"] / n}


def summary(cells: list[dict[str, Any]], alpha: float = 0.05) -> str:
    out = ["| method | worst false alarm (cell) | worst false NO_CHANGE (cell) | cells over α "
           "(alarm / no-change) | NO_CHANGE at Δ 0, mean | REGRESSION at −5 %, mean |",
           "|---|---|---|---|---|---|"]
    for m in [m for m in METHODS if m in cells[0]["counts"]]:
        rs = [(c, rates(c, m)) for c in cells]
        fa = max(rs, key=lambda x: x[1]["false_alarm"])
        fn = max(rs, key=lambda x: x[1]["false_no_change"])
        over_fa = sum(r["false_alarm"] > alpha for _, r in rs)
        over_fn = sum(r["false_no_change"] > alpha for _, r in rs)

        def where(c: dict[str, Any]) -> str:
            return f"τ {100 * c['tau']:g} %, sd {100 * c['pair_sd']:g} %, g {c['g']}"

        nc = sum(r["no_change_at_0"] for _, r in rs) / len(rs)
        rg = sum(r["regression_at_-5"] for _, r in rs) / len(rs)
        out.append(f"| {m} | {100 * fa[1]['false_alarm']:.1f} % ({where(fa[0])}) | "
                   f"{100 * fn[1]['false_no_change']:.1f} % ({where(fn[0])}) | "
                   f"{over_fa} / {over_fn} of {len(rs)} | {100 * nc:.1f} % | {100 * rg:.1f} % |")
    return "\n".join(out)


def by_cell(cells: list[dict[str, Any]], methods: tuple[str, ...]) -> str:
    head = "| τ | pair sd | g | " + " | ".join(
        f"{m}: alarm / false NC / NC@0 / REG@−5" for m in methods) + " |"
    out = [head, "|" + "---|" * (3 + len(methods))]
    for c in cells:
        cols = []
        for m in methods:
            r = rates(c, m)
            cols.append(f"{100 * r['false_alarm']:.1f} / {100 * r['false_no_change']:.1f} / "
                        f"{100 * r['no_change_at_0']:.0f} / {100 * r['regression_at_-5']:.0f}")
        out.append(f"| {100 * c['tau']:g} % | {100 * c['pair_sd']:g} % | {c['g']} | "
                   + " | ".join(cols) + " |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    gr = sub.add_parser("grid")
    gr.add_argument("--reps", type=int, default=400)
    gr.add_argument("--jobs", type=int, default=1)
    gr.add_argument("--seed", type=int, default=36)
    gr.add_argument("--json")
    gr.add_argument("--methods", default=",".join(METHODS))
    tb = sub.add_parser("table", help="the tables of grid JSON files (same seed and reps; "
                        "their methods merged)")
    tb.add_argument("files", nargs="+")
    args = ap.parse_args()
    if args.cmd == "grid":
        t0 = time.monotonic()
        cells = grid(args.reps, args.jobs, args.seed, tuple(args.methods.split(",")))
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"reps": args.reps, "seed": args.seed, "within": WITHIN, "runs": RUNS,
                           "cells": cells, "elapsed_s": time.monotonic() - t0}, f)
        print(f"{len(cells)} cells × {args.reps} sequences in {time.monotonic() - t0:.0f} s",
              file=sys.stderr)
    else:
        cells = []
        for f in args.files:
            with open(f) as fh:
                more = json.load(fh)["cells"]
            if not cells:
                cells = more
                continue
            for c, c2 in zip(cells, more, strict=True):
                assert (c["tau"], c["pair_sd"], c["g"], c["reps"]) == \
                    (c2["tau"], c2["pair_sd"], c2["g"], c2["reps"]), "not one grid"
                c["counts"].update(c2["counts"])
    print(summary(cells))
    print()
    print(by_cell(cells, tuple(m for m in METHODS if m in cells[0]["counts"])))


if __name__ == "__main__":
    main()
