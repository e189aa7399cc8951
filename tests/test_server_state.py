"""Server state: a fresh server's warm-up is said, never read as a stack's change or spread."""

from __future__ import annotations

import json
import math
import random
import statistics

import pytest
from test_triage_support import process_fingerprint, store_run, trial

from decodescope.cli.main import main
from decodescope.store import runs as sr
from decodescope.store.connect import open_store
from decodescope.verdict import run_spread as rs
from decodescope.verdict import server_state as ss
from decodescope.verdict import thresholds as th
from decodescope.verdict.paired_test import Design, run_sequential

CAL = "demo-code-rewrite"
T0 = 1_790_000_000.0  # the server's process start (epoch)


def fp(start: float | None = T0, pid: int = 4242) -> dict:
    return process_fingerprint(start, pid=pid)


@pytest.fixture
def store(tmp_path):
    with open_store(tmp_path / "runs.sqlite") as st:
        yield st


def add(store, level: float, at: float, start: float | None = T0) -> int:
    """One run of 3 trials at `level` (± 0.5 %), started `at` seconds after T0."""
    rid = store_run(store, CAL, [trial(level * f) for f in (0.995, 1.0, 1.005)],
                    fingerprint=fp(start))
    with store.tx() as c:
        c.execute("UPDATE runs SET created_at = ? WHERE id = ?", (T0 + at, rid))
    return rid


# a server warming up over its first 4 runs (−17 % … −3 %), then level at 60 ± 0.5 %
WARMUP = (50.0, 53.0, 56.0, 58.2)
LATE = (60.0, 60.3, 59.8, 60.2, 59.9, 60.1, 60.25, 59.85)


def history(store, start: float | None = T0) -> list[int]:
    ids = [add(store, v, 30 + 40 * i, start) for i, v in enumerate(WARMUP)]
    return ids + [add(store, v, 900 + 60 * i, start) for i, v in enumerate(LATE)]


def triage_json(store, cur, base, capsys):
    capsys.readouterr()
    code = main(["triage", str(cur), "--baseline", str(base), "--store", store.path, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_a_fresh_servers_first_run_against_a_late_run_is_not_a_stack_verdict(store, capsys):
    ids = history(store)
    first, late = ids[0], ids[-1]
    for cur, base in ((first, late), (late, first)):
        code, out = triage_json(store, cur, base, capsys)
        assert (code, out["verdict"], out["cause"]) == (3, "INCONCLUSIVE", "server warm-up")
        assert f"run {first}" in out["headline"] and "warming up" in out["headline"]
        said = [n for n in out["notes"] if "Server state" in n]
        assert said and f"Server state of run {first}:" in said[0] and "fresh server" in said[0]
        assert "warm-up (faster run by run)" in said[0]
        assert any("--warmup" in s for s in out["next_steps"])
    # two late runs of the same server: no warm-up said
    code, out = triage_json(store, ids[-1], ids[-2], capsys)
    assert out["cause"] != "server warm-up" and not any("Server state" in n for n in out["notes"])


def test_the_same_runs_without_a_known_server_start_read_as_a_stack_change(store, capsys):
    ids = history(store, start=None)
    code, out = triage_json(store, ids[0], ids[-1], capsys)
    assert (code, out["verdict"]) == (1, "REGRESSION")  # nothing tells the server's state
    assert not any("Server state" in n for n in out["notes"])


def test_server_state_places_a_run_in_its_servers_warm_up(store):
    ids = history(store)
    cands = sr.list_runs(store, caliber=sr.get_run(store, ids[0]).caliber_identity, limit=100)
    first = ss.server_state(sr.get_run(store, ids[0], with_traces=False), cands)
    last = ss.server_state(sr.get_run(store, ids[-1], with_traces=False), cands)
    assert first.fresh and first.in_warmup and first.position == 1
    assert first.of_runs == len(ids) and first.warmup is not None
    assert first.warmup.direction == "up" and first.warmup.end == len(WARMUP)
    assert not last.fresh and not last.in_warmup and last.warming is False


def test_no_false_warm_up_on_stationary_histories():
    """Stationary servers (iid run levels) read a warm-up at most alpha of the time."""
    rng = random.Random(36)
    n_hist, hits_up, hits_any = 2000, 0, 0
    for _ in range(n_hist):
        levels = [math.log(60.0) + rng.gauss(0.0, 0.03) for _ in range(rng.randint(4, 14))]
        hits_up += ss.trend(levels, alternative="greater") is not None
        hits_any += ss.trend(levels) is not None
    assert hits_up / n_hist <= th.TREND_ALPHA
    assert hits_any / n_hist <= th.TREND_ALPHA


def test_a_stationary_stack_says_no_warm_up(store, capsys):
    ids = [add(store, v, 900 + 60 * i) for i, v in enumerate(LATE)]
    code, out = triage_json(store, ids[-1], ids[0], capsys)
    assert out["verdict"] == "NO_CHANGE"
    assert not any("Server state" in n or "left out" in n for n in out["notes"])


def test_spread_leaves_the_runs_of_a_trend_out_and_says_so(store):
    ids = history(store)
    run = sr.get_run(store, ids[-1], with_traces=False)
    cands = sr.list_runs(store, caliber=run.caliber_identity, limit=100)
    s = rs.learn(cands, run)
    assert s.source == "learned" and s.runs == len(LATE) and s.left_out == len(WARMUP)
    assert "4 runs of a trend left out" in s.text() and "after a server start" in s.text()
    flat = rs.estimate([r for r in cands if r.id in ids[len(WARMUP):]])
    assert math.isclose(s.sd, flat.sd) and flat.left_out == 0
    # learned over the trend, the spread would be several times larger
    with_trend = rs._estimate(cands)
    assert with_trend.sd > 3 * s.sd


def test_a_trend_that_does_not_end_leaves_every_run_out_and_falls_back_to_the_prior(store):
    ids = [add(store, 50.0 + 1.5 * i, 30 + 40 * i) for i in range(7)]
    run = sr.get_run(store, ids[-1], with_traces=False)
    s = rs.learn(sr.list_runs(store, caliber=run.caliber_identity, limit=100), run)
    assert s.source == "prior" and s.left_out == 7 and "not over at the last run" in s.text()


def test_predicted_pairs_match_what_ab_takes():
    """The pairs triage predicts for `ab` (from the trial-to-trial sds) against ab's own
    sequential test on pairs drawn with that sd: the median pairs it takes to call an
    unchanged stack unchanged is the predicted look, or a neighbouring one."""
    sd_trial = 0.012
    pred = rs.ab_prediction(sd_trial, 5, sd_trial, 5, th.MIN_EFFECT)
    assert pred is not None and pred.same[0] is not None
    assert pred.sd_lo < pred.sd < pred.sd_hi
    looks = Design().looks()
    rng = random.Random(7)
    taken = []
    for _ in range(300):
        d = [rng.gauss(0.0, pred.sd) for _ in range(th.AB_MAX_PAIRS)]
        lk = run_sequential(d, Design())
        assert lk is not None
        taken.append(lk.pairs if lk.decision == "equivalent" else th.AB_MAX_PAIRS + 1)
    med = statistics.median(taken)
    i = looks.index(pred.same[0])
    assert looks[max(0, i - 1)] <= med <= looks[min(len(looks) - 1, i + 1)]
    # its interval's ends bracket the prediction; a larger sd never needs fewer pairs
    lo, hi = pred.same[1], pred.same[2]
    assert lo is not None and lo <= pred.same[0] and (hi is None or hi >= pred.same[0])
    assert "to call it unchanged" in pred.text() and "pair sd" in pred.text()


def test_spread_command_says_the_warm_up_it_discarded(tmp_path, capsys):
    """`decodescope spread` on a server whose stored runs began with a warm-up: the trend's
    runs are discarded from the spread, and the command says so and how many."""
    from decodescope.sim import SimConfig, SimServer

    path = str(tmp_path / "s.sqlite")
    # Near real time (time scale 0.3): the two real runs are compared with the stored level, and a
    # loaded CI host's scheduling delays are then a small share of each token's time.
    sim = SimServer(SimConfig(time_scale=0.3, seed=3)).start_in_thread()
    try:
        capsys.readouterr()
        main(["spread", sim.url, "--caliber", CAL, "--runs", "1", "--trials", "2", "--wait",
              "0", "--store", path, "--json"])
        first = json.loads(capsys.readouterr().out)["runs"][0]
        with open_store(path) as st:
            run = sr.get_run(st, first, with_traces=False)
            level = statistics.fmean(t["decode_rate"] for t in run.result["trials"])
            # this server's earlier runs, stored before: a warm-up of 4 runs, then 6 level
            for i, f in enumerate((0.80, 0.85, 0.90, 0.95, 1.0, 1.004, 0.997, 1.002, 0.999,
                                   1.001)):
                rid = store_run(st, CAL, [trial(level * f * g) for g in (0.998, 1.002)],
                                fingerprint=run.fingerprint)
                with st.tx() as c:
                    c.execute("UPDATE runs SET created_at = ? WHERE id = ?",
                              (run.created_at - 100 + i, rid))
        code = main(["spread", sim.url, "--caliber", CAL, "--runs", "1", "--trials", "2",
                     "--wait", "0", "--store", path])
        text = capsys.readouterr().out
    finally:
        sim.stop()
    assert code == 0
    line = next(x for x in text.splitlines() if x.startswith("Trend detected:"))
    assert "warm-up (faster run by run)" in line and "4 runs discarded" in line
