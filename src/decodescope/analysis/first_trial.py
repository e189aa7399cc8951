"""Is trial 1 unlike the rest? A finding whose cause and remedy hold for this run.

Speculators that learn from earlier outputs (n-gram, suffix caches) and cold starts (caches,
compiled graphs) make the first trial slower than the rest; then the trials are not
independent samples. The advice follows the facts of the run (issue 21): "use --warmup" only
when the run had no warm-up (more warm-up when it had some and a cold start remains), "a
speculator that learns" only when MAL moved, and when trial 1 is the *faster* one neither
applies — the later trials slowed, which a warm-up cannot change.
"""

from __future__ import annotations

from typing import Any

from decodescope.records.findings import Finding

# A first trial whose MAL / decode rate differs from the rest's median by at least this much
# (and by more than twice the rest's spread) is named: the trials are not independent.
FIRST_TRIAL_SHIFT = 0.10
# MAL values within this relative spread over all trials are "the same in every trial": the
# speculator drafted alike each time, so it did not learn from the earlier outputs.
SAME_MAL = 0.01
CODE = "trials.first_differs"


def _median(vals: list[float]) -> float:
    return sorted(vals)[len(vals) // 2]


def same_mal(ok: list[dict[str, Any]]) -> bool:
    """True when every trial has an engine MAL and they agree within SAME_MAL."""
    mals = [t.get("engine_mal") for t in ok]
    if not mals or any(m is None for m in mals):
        return False
    vals = [float(m) for m in mals if m is not None]
    return (max(vals) - min(vals)) <= SAME_MAL * max(vals)


def first_trial_shift(trials: list[dict[str, Any]], *, warmup: int | None,
                      greedy: bool | None) -> Finding | None:
    """The finding for a first trial unlike the rest (≥ 3 ok trials), or None.

    `warmup`: the run's uncounted warm-up requests (None: not recorded); `greedy`: whether
    sampling was greedy (temperature 0: every trial repeats the same output)."""
    ok = [t for t in trials if t.get("status") == "ok"]
    if len(ok) < 3:
        return None
    for key, name in (("engine_mal", "MAL"), ("decode_rate", "decode rate")):
        first, rest = ok[0].get(key), [t.get(key) for t in ok[1:]]
        vals = sorted(float(v) for v in rest if v is not None)
        if first is None or len(vals) < 2:
            continue
        med = _median(vals)
        if not med:
            continue
        spread, shift = (vals[-1] - vals[0]) / med, (first - med) / med
        if abs(shift) < FIRST_TRIAL_SHIFT or abs(shift) < 2 * spread:
            continue
        head = f"trial 1 {name} {first:.2f} vs {med:.2f} for the rest ({100 * shift:+.0f}%)"
        if shift > 0:
            return _later_slower(head, name)
        return _first_slower(head, name, warmup, greedy, same_mal(ok))
    return None


def _later_slower(head: str, name: str) -> Finding:
    what = "slower" if name == "decode rate" else "drafted worse"
    return Finding(
        CODE, f"{head}: the later trials were {what} than the first, so the trials are not "
        "alike; a warm-up would not change this (it helps only a first trial that is the slow "
        "one)", "Look at what changed during the run: GPU clocks and temperature (the "
        "fingerprint's sampled clocks), other load on the host or the engine; then re-run")


def _first_slower(head: str, name: str, warmup: int | None, greedy: bool | None,
                  mal_same: bool) -> Finding:
    learner = name == "MAL"
    if learner:
        why = "a speculator that learns from earlier outputs (n-gram, suffix caches)"
        if greedy:
            why += "; with greedy sampling every trial repeats the same output"
    elif mal_same:
        why = ("a cold start (caches, compiled graphs, memory) — not the speculator: MAL is "
               "the same in every trial")
    else:
        why = "a speculator that learns from earlier outputs, or a cold start"
    remedies = []
    if warmup is None or warmup < 1:
        none = "the run had no warm-up" if warmup == 0 else "warm-up not recorded"
        remedies.append(f"Use --warmup 1 or more ({none}; uncounted requests before the trials)")
    elif not learner:
        remedies.append(f"The run already had {warmup} warm-up request"
                        f"{'' if warmup == 1 else 's'}: use more (--warmup {warmup + 2})")
    if learner or not mal_same:
        remedies.append("use a caliber whose requests vary (a dataset, or temperature > 0 with a "
                        "seed) so that no trial replays an earlier output")
    remedy = "; ".join(remedies)
    return Finding(CODE, f"{head}: the trials are not independent ({why})",
                   remedy[:1].upper() + remedy[1:])
