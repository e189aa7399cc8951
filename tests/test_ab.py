"""Interleaved A/B: the sequential design's looks and error control, its words, and two
simulators through `decodescope ab`. Power and speed are in bench/bench_decisive.py."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from decodescope.cli.main import main
from decodescope.sim import SimConfig, SimServer
from decodescope.verdict import thresholds as th
from decodescope.verdict.ab import (
    Design,
    ab_verdict,
    look,
    pairs_needed,
    run_sequential,
    same_host,
    step,
    t_crit,
)

pytestmark = pytest.mark.timeout(300)


def test_looks_are_planned_from_min_to_max_and_never_before_the_minimum():
    d = Design()
    looks = d.looks()
    assert looks[0] == th.AB_MIN_PAIRS and looks[-1] == th.AB_MAX_PAIRS
    assert looks == sorted(set(looks)) and len(looks) <= th.AB_LOOKS
    # Lan–DeMets spending: every look stricter than an unadjusted α, and together they spend
    # at least α (the looks are correlated: less conservative than Bonferroni's α/K each)
    nominal = [1 - lv for lv in d.change_levels()]
    assert len(nominal) == len(looks) and all(0 < p < th.AB_ALPHA for p in nominal)
    assert sum(nominal) >= th.AB_ALPHA
    assert d.level == pytest.approx(d.change_levels()[-1])
    for n in range(2, d.min_pairs):
        assert step([0.2] * n, d) is None  # no look: keep going
        assert look([0.2 + 0.01 * i for i in range(n)], d).decision == "continue"


@pytest.mark.parametrize("seed", range(20))
def test_the_stop_never_decides_on_fewer_pairs_than_its_minimum(seed):
    rng = random.Random(seed)
    d = Design(min_pairs=rng.randint(3, 12), max_pairs=40, n_looks=rng.randint(1, 8))
    # huge effects, no noise, heavy tails: whatever the data, nothing before min_pairs
    ratios = [rng.choice([-0.5, 0.5, rng.gauss(-0.3, 0.01), rng.gauss(0, 0.2)])
              for _ in range(40)]
    for n in range(1, 41):
        lk = step(ratios[:n], d)
        if lk is not None:
            assert n >= d.min_pairs
    final = run_sequential(ratios, d)
    assert final is not None and final.pairs >= d.min_pairs


def test_false_alarms_stay_within_alpha_under_the_design_on_identical_sides():
    # A and B identical: each pair's log ratio is the difference of two equal-distribution
    # noises. Over 400 seeded sequences the share that ever reads a change (any look) must be
    # ≤ α: the union bound over K looks of intervals at 1 − α/K each.
    rng = random.Random(25)
    d = Design(alpha=0.05, min_effect=0.0)  # no minimum-effect gate: the raw error rate
    alarms = 0
    for _ in range(400):
        ratios = [rng.gauss(0.0, 0.08) for _ in range(d.max_pairs)]
        lk = run_sequential(ratios, d)
        alarms += lk is not None and lk.decision == "change"
    assert alarms / 400 <= d.alpha


def test_pairs_needed_reaches_its_target_and_grows_with_the_spread():
    d = Design()
    n = pairs_needed(0.08, 0.05, d)
    assert n is not None and n >= d.min_pairs
    assert t_crit(d.level, n - 1) * 0.08 / math.sqrt(n) <= math.log1p(0.05)
    assert t_crit(d.level, n - 2) * 0.08 / math.sqrt(n - 1) > math.log1p(0.05) or \
        n == d.min_pairs
    assert pairs_needed(0.04, 0.05, d) <= n  # type: ignore[operator]


def _fp(host: str, local: bool = True) -> dict:
    secs = {"host": {"hostname": {"value": host, "status": "collected", "why": None}}}
    if local:
        secs["process"] = {"pid": {"value": 1234, "status": "collected", "why": None}}
    return {"schema_version": 1, "taken_at": "", "url": None, "sections": secs}


def test_shared_host_is_said_only_when_both_processes_are_local_to_one_host():
    assert same_host(_fp("box"), _fp("box")) == "box"
    assert same_host(_fp("box"), _fp("other")) is None
    assert same_host(_fp("box"), _fp("box", local=False)) is None
    assert same_host(None, _fp("box")) is None
    rng = random.Random(1)
    ratios = [rng.gauss(0.0, 0.3) for _ in range(9)]
    d = Design(max_pairs=9)
    lk = run_sequential(ratios, d)
    assert lk is not None
    v = ab_verdict(ratios, ["AB", "BA"] * 5, [lk], d, stopped="max pairs", run_a=1, run_b=2,
                   urls=("a", "b"), fingerprints=(_fp("box"), _fp("box")), runs_verdict=None)
    assert v.kind == "INCONCLUSIVE" and v.exit_code == 3
    assert any(x.startswith("Shared host:") and "box" in x for x in v.lines)
    assert any(x.startswith("What would decide it:") and "pairs" in x for x in v.lines)


# -- two simulators through the CLI --------------------------------------------------------
SHORT = """name = "ab-test"
version = 1
description = "short greedy rewrite"
task_class = "rewrite"
thinking = false
endpoint = "chat"
concurrency = 1
[prompt]
content_class = "code"
material = "code"
material_seed = 7
blocks = 1
task = "Rewrite the code above exactly."
[output]
max_tokens = 96
min_tokens = 96
ignore_eos = true
steady_state_start = 16
[sampling]
temperature = 0.0
top_p = 1.0
seed = 7
"""


@contextmanager
def sims(step_b: float) -> Iterator[tuple[str, str]]:
    a = SimServer(SimConfig(time_scale=0.1, seed=3)).start_in_thread()
    b = SimServer(SimConfig(time_scale=0.1, seed=3, step_rate_hz=step_b)).start_in_thread()
    try:
        yield a.url, b.url
    finally:
        a.stop()
        b.stop()


def _ab(tmp_path: Path, a: str, b: str, capsys, *extra: str) -> tuple[int, dict]:
    cal = tmp_path / "short.toml"
    cal.write_text(SHORT)
    capsys.readouterr()
    code = main(["ab", a, b, "--caliber", str(cal), "--store", str(tmp_path / "s.sqlite"),
                 "--no-scrape", "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


def test_identical_simulators_never_raise_an_alarm(tmp_path, capsys):
    # Same config and seed: the same tokens at the same simulated speed; only the host's
    # timing differs. α = 0.001 over all looks (Bonferroni) and a 5 % minimum effect: an alarm
    # needs an interval at 99.98 % to exclude 0 AND the estimate to pass 5 % — for timing
    # noise of a few % per trial, essentially never.
    with sims(40.0) as (a, b):
        code, out = _ab(tmp_path, a, b, capsys, "--alpha", "0.001", "--min-effect", "5",
                        "--max-pairs", "13", "--looks", "3")
    assert out["verdict"] in ("NO_CHANGE", "INCONCLUSIVE"), out["headline"]
    assert code in (0, 3)
    assert out["pairs"] >= 6 and out["run_a"] != out["run_b"]


def test_a_slower_step_rate_is_decided_and_never_before_the_minimum(tmp_path, capsys):
    with sims(40.0 * 0.75) as (a, b):  # −25 %: far outside any timing noise
        code, out = _ab(tmp_path, a, b, capsys, "--min-pairs", "5", "--max-pairs", "20",
                        "--no-fingerprint")
    assert out["pairs"] >= 5
    assert all(lk["pairs"] >= 5 for lk in out["looks"])
    assert out["verdict"] == "REGRESSION" and code == 1, out["headline"]
    assert out["look"]["rel_hi"] < 0
    assert [o for o in out["orders"][:4]] == ["AB", "BA", "AB", "BA"]
    # One decode rate, decided once: the evidence's decode row is the headline's paired
    # statistic with the headline's numbers, never the runs' unpaired comparison beside it.
    from decodescope.verdict.stats import pct

    rows = [r for r in out["evidence"] if r["check"].startswith("decode rate changed?")]
    assert len(rows) == 1 and "paired" in rows[0]["check"], rows
    shown = pct(out["look"]["rel"])
    assert shown in rows[0]["result"] and shown in out["headline"], (rows, out["headline"])
    assert not any(r["check"].startswith("did the server restart?") for r in out["evidence"])
