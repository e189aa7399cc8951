"""History: change points in a synthetic history built from measured noise.

Each run is 5 trials of a step rate × tokens per step; trials inside a run are correlated
(AR(1), r = 0.68, within-run sd 4.5 %) and each run has its own level, so the sd of the run
means is the 7.1 % between-run spread measured on an NVIDIA H200 (/shared run-noise
measurements); tokens per step is greedy (MAL 6.14, 0.5 % noise). Injected into the target:

* stack  — at N/4, the step rate −8 % and the stack fingerprint changes (a restart under
           another launch): expected REGRESSION, carried by the step rate;
* content — at N/2, tokens per step −12 %, no fingerprint change: expected CONTENT_SHIFT;
* env    — at 3N/4, the step rate −12 % on the target and the control alike: ENVIRONMENT;
* spikes — max(2, N/50) single runs ±35 % away from the events: never a change point.

A second, stationary target of N runs (with a restart under another launch at N/2 that
changes nothing) counts false change points per 1,000 runs. Each
detector method (the libraries' candidates, then the same confirmation) runs on the same
seeds; one table: events found within 2 runs with the right word and carrier, false change
points per
1,000 stationary runs, spikes reported, seconds per history (detection and attribution of
the target with its control).

    python bench/bench_history.py [--sizes 100,1000,10000] [--seeds 3] [--methods kernel,...]

Methods: kernel (the default: ruptures KernelCPD, linear kernel), binseg, pelt (ruptures,
pure Python: slow beyond a few hundred runs), otava (Apache Otava's E-Divisive; it pins older
numpy/scipy, so install it only for the measurement: `pip install --no-deps apache-otava`).
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

from decodescope.verdict import history as hi

WITHIN_SD = 0.045
TRIAL_R = 0.68
RUN_SD = 0.071  # sd of the run means (H200, demo-code-rewrite)
TRIALS = 5
TPS = 6.14
TPS_SD = 0.005
STEP = 120.0
STACK_STEP = math.log(0.92)
CONTENT_TPS = math.log(0.88)
ENV_STEP = math.log(0.88)
SPIKE = math.log(1.35)
STACK_A = ("box", "llamacpp", "b1", "gemma", "llama-server --draft-max 8")
STACK_B = ("box", "llamacpp", "b1", "gemma", "llama-server --draft-max 4")


def _between_sd() -> float:
    """The run-level sd that makes the sd of a run's mean RUN_SD, given correlated trials."""
    s = sum(TRIAL_R ** abs(i - j) for i in range(TRIALS) for j in range(TRIALS))
    within_mean_var = WITHIN_SD ** 2 * s / TRIALS ** 2
    return math.sqrt(max(0.0, RUN_SD ** 2 - within_mean_var))


@dataclass
class Truth:
    stack: int
    content: int
    env: int
    spikes: list[int]


def series(n: int, rng: random.Random, *, events: bool, control: bool = False
           ) -> tuple[list[hi.Point], Truth]:
    b = _between_sd()
    stack_at, content_at, env_at = n // 4, n // 2, 3 * n // 4
    spikes: list[int] = []
    if events and not control:
        k = max(2, n // 50)
        avoid = {e + d for e in (stack_at, content_at, env_at) for d in range(-5, 6)}
        pool = [i for i in range(8, n - 8) if i not in avoid]
        spikes = sorted(rng.sample(pool, k))
        # spikes never adjacent: a spike is one run
        spikes = [s for j, s in enumerate(spikes) if j == 0 or s - spikes[j - 1] > 4]
    pts = []
    for i in range(n):
        ls, lt = math.log(STEP) + rng.gauss(0.0, b), math.log(TPS)
        stack = STACK_A
        if not events and i >= n // 2:
            stack = STACK_B  # a restart under another launch that changes nothing
        if events:
            if not control and i >= stack_at:
                ls += STACK_STEP
                stack = STACK_B
            if not control and i >= content_at:
                lt += CONTENT_TPS
            if i >= env_at:
                ls += ENV_STEP
        if i in spikes:
            ls += SPIKE if rng.random() < 0.5 else -SPIKE
        e, trials_s, trials_t = 0.0, [], []
        for _ in range(TRIALS):
            e = TRIAL_R * e + math.sqrt(1 - TRIAL_R ** 2) * rng.gauss(0.0, WITHIN_SD)
            trials_s.append(ls + e)
            trials_t.append(lt + rng.gauss(0.0, TPS_SD))
        d = [s + t for s, t in zip(trials_s, trials_t, strict=True)]
        pts.append(hi.Point(key=f"run {i}", t=600.0 * i, decode=math.exp(statistics.fmean(d)),
                            step_rate=math.exp(statistics.fmean(trials_s)),
                            tokens_per_step=math.exp(statistics.fmean(trials_t)),
                            within_var=statistics.variance(d) / TRIALS, stack=stack))
    return pts, Truth(stack_at, content_at, env_at, spikes)


KINDS = ("stack", "content", "env")


def score(h: hi.History, truth: Truth) -> tuple[dict[str, int], int, int]:
    """(per event kind: found within 2 runs with the right word; change points not at an
    event; spikes reported as change points)."""
    want = {truth.stack: ("stack", "REGRESSION", "step rate"),
            truth.content: ("content", "CONTENT_SHIFT", "tokens per step"),
            truth.env: ("env", "ENVIRONMENT", "step rate")}
    found = dict.fromkeys(KINDS, 0)
    extra = 0
    for c in h.changes:
        hit = [e for e in want if abs(c.index - e) <= 2]
        if hit and (c.word, c.carried_by) == want[hit[0]][1:]:
            found[want[hit[0]][0]] = 1
        else:
            extra += 1
    spikes = sum(1 for c in h.changes if any(abs(c.index - s) <= 1 for s in truth.spikes))
    return found, extra, spikes


def run(sizes: Sequence[int], seeds: int, methods: Sequence[str]) -> None:
    print(f"{'method':<8}{'runs':>7}{'seeds':>6}{'stack':>7}{'content':>9}{'env':>6}"
          f"{'wrong/extra':>13}{'false/1k stat.':>16}{'spikes rep.':>13}{'s/history':>11}")
    for m in methods:
        for n in sizes:
            ns = seeds if n <= 1000 else max(1, seeds // 3)
            found = dict.fromkeys(KINDS, 0)
            extra = spk = false = 0
            secs = []
            for seed in range(ns):
                rng = random.Random(1000 * n + seed)
                pts, truth = series(n, rng, events=True)
                ctl, _ = series(n, rng, events=True, control=True)
                t0 = time.perf_counter()
                h = hi.detect(pts, control=ctl, method=m)  # type: ignore[arg-type]
                secs.append(time.perf_counter() - t0)
                f, e, s = score(h, truth)
                found = {k: found[k] + f[k] for k in KINDS}
                extra, spk = extra + e, spk + s
                stat, _ = series(n, rng, events=False)
                false += len(hi.detect(stat, method=m).changes)  # type: ignore[arg-type]
            got = "".join(f"{f'{found[k]}/{ns}':>{w}}" for k, w in zip(KINDS, (7, 9, 6),
                                                                       strict=True))
            print(f"{m:<8}{n:>7}{ns:>6}{got}{extra:>13}"
                  f"{1000 * false / (n * ns):>16.2f}{spk:>13}{statistics.median(secs):>11.3f}",
                  flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="100,1000,10000")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--methods", default=hi.DEFAULT_METHOD)
    a = ap.parse_args()
    run([int(s) for s in a.sizes.split(",")], a.seeds, a.methods.split(","))


if __name__ == "__main__":
    main()
