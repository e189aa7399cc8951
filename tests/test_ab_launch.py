"""`decodescope ab --launch-a CMD --launch-b CMD`: the A/B starts both servers itself, afresh
for each start, and tests the starts' mean changes (issue 36: two processes of one stack
differ in level; pairs between two processes never remove that). Simulators launched as the
user's commands; the statistics of starts are replayed with a between-process spread."""

from __future__ import annotations

import json
import random
import shlex
import statistics
import sys
from pathlib import Path

import psutil
import pytest
from test_ab import SHORT

from decodescope.cli.main import main
from decodescope.engines.launch import LaunchCommand
from decodescope.errors import UsageError
from decodescope.verdict.paired_test import (
    Design,
    ab_verdict,
    render_ab,
    run_sequential,
    run_sequential_starts,
    start_floor_var,
)

pytestmark = pytest.mark.timeout(300)



def _sim(*extra: str) -> str:
    return shlex.join([sys.executable, "-m", "decodescope.sim", "--time-scale", "0.05",
                       "--seed", "3", *extra]) + " --port {port}"


def _ab(tmp_path: Path, capsys, *args: str) -> tuple[int, dict]:
    cal = tmp_path / "short.toml"
    cal.write_text(SHORT)
    capsys.readouterr()
    code = main(["ab", *args, "--caliber", str(cal), "--store", str(tmp_path / "s.sqlite"),
                 "--json", "--no-fingerprint"])
    return code, json.loads(capsys.readouterr().out)


def test_a_launch_command_needs_its_port_and_never_shows_a_secret():
    with pytest.raises(UsageError, match=r"no \{port\}"):
        LaunchCommand("llama-server -m m.gguf", "A")
    with pytest.raises(UsageError, match="cannot be split into words"):
        LaunchCommand("llama-server -m 'm.gguf --port {port}", "B")
    cmd = LaunchCommand("vllm serve M --port {port} --api-key sk-live-abcdef123456", "A")
    assert cmd.argv(8123)[-3:] == ["8123", "--api-key", "sk-live-abcdef123456"]
    assert "sk-live-abcdef123456" not in cmd.shown() and "--port {port}" in cmd.shown()


@pytest.mark.parametrize(("args", "said"), [
    (["http://127.0.0.1:1", "--launch-a", "x {port}", "--launch-b", "x {port}"],
     "URLs and launch commands given together"),
    (["--launch-a", "x {port}"], "one launch command given"),
    (["--launch-a", "x {port}", "--launch-b", "x {port}", "--max-pairs", "20"],
     "--max-pairs count pairs between two running servers"),
    (["http://127.0.0.1:1", "http://127.0.0.1:2", "--pairs-per-start", "2"],
     "--pairs-per-start apply to servers the A/B starts itself"),
    ([], "two endpoints are needed"),
])
def test_the_two_ways_of_naming_the_sides_are_never_mixed(tmp_path, capsys, args, said):
    cal = tmp_path / "short.toml"
    cal.write_text(SHORT)
    code = main(["ab", *args, "--caliber", str(cal), "--store", str(tmp_path / "s.sqlite")])
    err = capsys.readouterr().err
    assert code == 2 and said in err and "Traceback" not in err, err


def test_a_server_that_exits_before_it_answers_is_named_with_its_code(tmp_path, capsys):
    dead = shlex.join([sys.executable, "-c", "import sys; print('bad flag'); sys.exit(3)"])
    code = main(["ab", "--launch-a", dead + " {port}", "--launch-b", dead + " {port}",
                 "--caliber", "demo-code-rewrite", "--store", str(tmp_path / "s.sqlite"),
                 "--no-fingerprint"])
    err = capsys.readouterr().err
    assert code == 7 and "side A's server exited with code 3" in err and "bad flag" in err, err
    assert "Traceback" not in err


def test_identical_launches_restart_per_start_and_never_alarm(tmp_path, capsys):
    # α 0.001 and a 5 % minimum effect: identical simulators under any CI load never alarm
    code, out = _ab(tmp_path, capsys, "--launch-a", _sim(), "--launch-b", _sim(),
                    "--pairs-per-start", "2", "--min-starts", "4", "--max-starts", "5",
                    "--looks", "2", "--alpha", "0.001", "--min-effect", "5")
    assert out["verdict"] in ("NO_CHANGE", "INCONCLUSIVE") and code in (0, 3), out["headline"]
    starts = out["starts"]
    assert out["unit"] == "starts" and len(starts) >= 4 and len(out["log_ratios"]) == len(starts)
    assert out["pairs"] == len(out["pair_log_ratios"]) == sum(s["pairs"] for s in starts)
    pids = [s[side]["pid"] for s in starts for side in ("A", "B")]
    assert len(set(pids)) == len(pids)  # a fresh process of each side per start
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                   for p in pids)  # every one ended
    for s in starts:  # a start's unit is its pairs' mean
        own = out["pair_log_ratios"][:s["pairs"]]
        out["pair_log_ratios"] = out["pair_log_ratios"][s["pairs"]:]
        assert s["mean"] == pytest.approx(sum(own) / len(own))
    assert "after" in out["headline"] and "start" in out["headline"]
    assert any("fresh server process of each side" in x for x in out["lines"])
    assert out["url_a"].startswith("started by: ") and "{port}" in out["url_a"]


def test_a_slower_launch_is_a_regression_over_starts(tmp_path, capsys):
    code, out = _ab(tmp_path, capsys, "--launch-a", _sim("--step-rate", "40"),
                    "--launch-b", _sim("--step-rate", "30"), "--pairs-per-start", "2",
                    "--max-starts", "6", "--looks", "2")
    assert out["verdict"] == "REGRESSION" and code == 1, out["headline"]
    assert out["look"]["pairs"] >= 4 and out["look"]["unit"] == "starts"
    assert out["look"]["rel_hi"] < 0


# -- the statistics of starts: replayed pair differences with a between-process spread --------
def _starts(rng: random.Random, n: int, tau: float, pair_sd: float, per: int,
            mu: float) -> list[float]:
    """Start means: each start's two fresh processes differ by N(0, 2τ²); its `per` pairs
    add N(0, pair_sd²) each."""
    out = []
    for _ in range(n):
        level = rng.gauss(0.0, tau) - rng.gauss(0.0, tau)
        out.append(mu + level + sum(rng.gauss(0.0, pair_sd) for _ in range(per)) / per)
    return out


def test_starts_keep_the_false_alarm_rate_where_pairs_of_two_processes_do_not():
    # τ 3 %, pair sd 2 %: pairs between two processes read the two levels' difference
    # (sd √2·τ ≈ 4.2 %) as a change; starts carry it in their spread.
    design = Design(min_pairs=4, max_pairs=12, unit="starts")
    pairs = Design()
    starts_alarms = pairs_alarms = 0
    for seed in range(400):
        rng = random.Random(seed)
        lk = run_sequential(_starts(rng, 12, 0.03, 0.02, 3, 0.0), design)
        starts_alarms += lk is not None and lk.decision == "change"
        level = rng.gauss(0.0, 0.03) - rng.gauss(0.0, 0.03)
        lk2 = run_sequential([level + rng.gauss(0.0, 0.02) for _ in range(40)], pairs)
        pairs_alarms += lk2 is not None and lk2.decision == "change"
    assert starts_alarms <= 0.05 * 400 + 2 * (0.05 * 0.95 * 400) ** 0.5  # α, 2 Monte Carlo sd
    assert pairs_alarms > 4 * starts_alarms + 20


def test_identical_stacks_over_starts_are_called_no_change():
    design = Design(min_pairs=4, max_pairs=12, unit="starts")
    calls = [run_sequential(_starts(random.Random(s), 12, 0.005, 0.03, 3, 0.0), design)
             for s in range(200)]
    no_change = sum(lk is not None and lk.decision == "equivalent" for lk in calls)
    assert no_change >= 0.9 * 200
    regress = [run_sequential(_starts(random.Random(s), 12, 0.005, 0.03, 3, -0.08), design)
               for s in range(200)]
    assert sum(lk is not None and lk.decision == "change" and lk.mean < 0
               for lk in regress) >= 0.9 * 200


def test_the_verdict_of_starts_speaks_of_starts():
    rng = random.Random(5)
    means = _starts(rng, 8, 0.01, 0.02, 3, 0.0)
    design = Design(min_pairs=4, max_pairs=8, unit="starts")
    lk = run_sequential(means, design)
    assert lk is not None
    starts = [{"start": i + 1, "pairs": 3, "mean": m, "A": {"pid": 10 + i},
               "B": {"pid": 20 + i}} for i, m in enumerate(means[:lk.pairs])]
    v = ab_verdict(means[:lk.pairs], ["AB"] * lk.pairs, [lk], design, stopped="decided",
                   run_a=1, run_b=2, urls=("started by: a {port}", "started by: b {port}"),
                   fingerprints=(None, None), runs_verdict=None,
                   pair_log_ratios=[0.0] * (3 * lk.pairs), starts=starts)
    text = render_ab(v)
    assert "starts" in text and "Looks (starts:" in text
    assert v.to_dict()["pairs"] == 3 * lk.pairs and v.to_dict()["unit"] == "starts"
    assert "Start mean log-ratio sd" in text


def test_the_progress_of_starts_counts_starts(tmp_path, capsys):
    """The looks are over starts, so the progress lines count starts (with the pairs they
    hold), never pairs alone."""
    cal = tmp_path / "short.toml"
    cal.write_text(SHORT)
    capsys.readouterr()
    code = main(["ab", "--launch-a", _sim("--step-rate", "40"), "--launch-b",
                 _sim("--step-rate", "30"), "--pairs-per-start", "2", "--max-starts", "4",
                 "--looks", "1", "--caliber", str(cal), "--store", str(tmp_path / "s.sqlite"),
                 "--no-fingerprint"])
    err = capsys.readouterr().err
    assert code == 1, err
    starts = [ln for ln in err.splitlines() if ln.startswith("start ")]
    assert [ln.split(" (")[0] for ln in starts] == [f"start {k}" for k in range(1, 5)], err
    assert starts[-1].startswith("start 4 (8 pairs)") and "after 4 starts" in starts[-1], err
    assert not any(ln.startswith("pair ") and "→" in ln for ln in err.splitlines()), err


def _start_pairs(rng: random.Random, n: int, tau: float, pair_sd: float, per: int,
                 mu: float) -> list[list[float]]:
    """Each start's pairs: the start's two fresh processes differ by N(0, 2τ²), each pair
    adds N(0, pair_sd²)."""
    out = []
    for _ in range(n):
        level = mu + rng.gauss(0.0, tau) - rng.gauss(0.0, tau)
        out.append([level + rng.gauss(0.0, pair_sd) for _ in range(per)])
    return out


def test_start_means_closer_than_their_pairs_allow_do_not_decide():
    """A start mean's variance is at least its pairs' spread over their count: four start means
    that sit closer by chance (an H100: start means of sd 1.2 % from pairs of sd 12.6 %, called
    IMPROVEMENT +3.8 % at 4 starts) are read with that floor."""
    starts = [[-0.017, 0.042, 0.041], [0.208, -0.049, -0.055], [-0.101, 0.014, 0.241],
              [-0.043, 0.024, 0.147]]  # the H100's pairs (ln B/A), bench/results/ab_gpu_9.json
    design = Design(min_pairs=4, max_pairs=12, unit="starts")
    means = [sum(g) / len(g) for g in starts]
    floor = start_floor_var(starts)
    assert floor is not None and floor > statistics.variance(means)
    lk = run_sequential_starts(starts, design)
    assert lk is not None and lk.floored and lk.decision == "continue", lk
    assert run_sequential(means, design).decision == "change"  # the t on 4 means alone


@pytest.mark.parametrize(("tau", "pair_sd"), [(0.0, 0.12), (0.01, 0.03), (0.03, 0.02)])
def test_the_floor_never_adds_an_alarm_and_keeps_the_power(tau, pair_sd):
    design = Design(min_pairs=4, max_pairs=12, unit="starts")
    floored = plain = 0
    for seed in range(300):
        groups = _start_pairs(random.Random(seed), 12, tau, pair_sd, 3, 0.0)
        a = run_sequential_starts(groups, design)
        b = run_sequential([sum(g) / 3 for g in groups], design)
        floored += a is not None and a.decision == "change"
        plain += b is not None and b.decision == "change"
    assert floored <= plain and floored <= 0.05 * 300 + 2 * (0.05 * 0.95 * 300) ** 0.5
    if pair_sd <= 0.03:  # a −8 % change is still found over starts
        found = sum(lk is not None and lk.decision == "change" and lk.mean < 0 for lk in (
            run_sequential_starts(_start_pairs(random.Random(s), 12, tau, pair_sd, 3, -0.08),
                                  design) for s in range(200)))
        assert found >= 0.9 * 200
