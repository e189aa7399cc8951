"""The learned between-run spread: stacks, the estimate and its interval, the prior, triage."""

from __future__ import annotations

import json
import math
import statistics

import pytest
from test_triage_support import store_run, trial

from decodescope.cli.main import main
from decodescope.fingerprint.stack import Fingerprint, Item
from decodescope.store import runs as sr
from decodescope.store.connect import open_store
from decodescope.verdict import run_spread as rs
from decodescope.verdict import stack
from decodescope.verdict import thresholds as th
from decodescope.verdict.stats import relative_change

CAL = "demo-code-rewrite"


def fp(threads: int = 2, port: int = 8181, host: str = "box-1", model: str = "gemma.gguf") -> dict:
    cmd = ["llama-server", "-m", model, "--port", str(port), "-t", str(threads)]
    return Fingerprint(taken_at="2026-12-02T06:00:00+00:00", url=f"http://127.0.0.1:{port}",
                       sections={
                           "host": {"hostname": Item.ok(host)},
                           "endpoint": {"engine": Item.ok("llamacpp"),
                                        "engine_version": Item.ok("b1"),
                                        "models": Item.ok(["gemma"])},
                           "process": {"cmdline": Item.ok(cmd)},
                       }).to_dict()


@pytest.fixture
def store(tmp_path):
    with open_store(tmp_path / "runs.sqlite") as st:
        yield st


# Run means spread by a known amount: run r's trials are its level × (1 ± 1 %)
LEVELS = (60.0, 63.0, 58.5, 61.8, 64.2, 59.1, 62.4)


def add_runs(store, levels, **kw) -> list[int]:
    return [store_run(store, CAL, [trial(level * f) for f in (0.99, 1.0, 1.01)], **kw)
            for level in levels]


def test_stack_key_ignores_the_port_and_nothing_else():
    assert stack.stack_key(fp(port=8181)) == stack.stack_key(fp(port=9999))
    assert stack.stack_key(fp(threads=2)) != stack.stack_key(fp(threads=1))
    assert stack.stack_key(fp(host="a")) != stack.stack_key(fp(host="b"))
    assert stack.stack_key(None) is None
    assert stack.strip_address(["x", "--port=1", "--host", "0.0.0.0", "-t", "2"]) == ["x", "-t", "2"]


def test_too_few_runs_fall_back_to_the_prior_and_say_so(store):
    ids = add_runs(store, LEVELS[: th.MIN_SPREAD_RUNS - 1], fingerprint=fp())
    run = sr.get_run(store, ids[-1], with_traces=False)
    s = rs.learn(sr.list_runs(store, caliber=run.caliber_identity, limit=100), run)
    assert s.source == "prior" and s.sd == th.PRIOR_RUN_SD and s.df is None
    assert s.runs == th.MIN_SPREAD_RUNS - 1
    text = s.text()
    assert "conservative prior" in text and f"{th.MIN_SPREAD_RUNS} needed" in text
    assert f"{th.MIN_SPREAD_RUNS - 1} runs of this caliber on this stack" in text


def test_a_run_without_fingerprint_gets_the_prior_with_its_reason(store):
    rid = add_runs(store, LEVELS, fingerprint=None)[0]
    run = sr.get_run(store, rid, with_traces=False)
    s = rs.learn(sr.list_runs(store, caliber=run.caliber_identity, limit=100), run)
    assert s.source == "prior" and "no stack fingerprint" in (s.why or "")


def test_learned_spread_is_the_method_of_moments_with_a_chi_square_interval(store):
    ids = add_runs(store, LEVELS, fingerprint=fp())
    add_runs(store, (30.0, 90.0), fingerprint=fp(threads=1))  # another stack: not counted
    run = sr.get_run(store, ids[0], with_traces=False)
    s = rs.learn(sr.list_runs(store, caliber=run.caliber_identity, limit=100), run)
    assert s.source == "learned" and s.runs == len(LEVELS) and s.df == len(LEVELS) - 1
    # derived: variance of the run means of log rates minus the mean within-run variance
    per = [[math.log(v * f) for f in (0.99, 1.0, 1.01)] for v in LEVELS]
    means = [statistics.fmean(x) for x in per]
    within = statistics.fmean(statistics.variance(x) / 3 for x in per)
    assert s.sd == pytest.approx(math.sqrt(statistics.variance(means) - within))
    assert s.lo is not None and s.hi is not None and s.lo <= s.sd <= s.hi
    assert f"from {len(LEVELS)} runs" in s.text() and "client decode rate" in s.text()


def test_a_learned_spread_carries_its_degrees_of_freedom_into_the_interval():
    xs, ys = [100.0, 101.0, 99.0], [95.0, 96.0, 94.0]
    exact = relative_change("d", xs, ys, run_sd=0.04)
    learned = relative_change("d", xs, ys, run_sd=0.04, run_sd_df=4.0)
    assert learned.df is not None and exact.df is not None and learned.df < exact.df
    assert learned.ci_lo is not None and exact.ci_lo is not None
    assert learned.ci_lo < exact.ci_lo  # fewer df: a wider interval, never a narrower one


def test_runs_needed_shrinks_with_the_spread_and_is_monotone():
    a = rs.runs_needed(0.07, 0.07, 0.05, 0.05, 5, 0.05)
    b = rs.runs_needed(0.02, 0.02, 0.05, 0.05, 5, 0.05)
    assert a is not None and b is not None and a > b >= 1
    assert rs.runs_needed(0.07, 0.07, 0.05, 0.05, 5, 0.10) <= a  # type: ignore[operator]


def _triage_json(store, cur, base, capsys, *extra):
    capsys.readouterr()
    code = main(["triage", str(cur), "--baseline", str(base), "--store", store.path, "--json",
                 *extra])
    return code, json.loads(capsys.readouterr().out)


def test_triage_says_which_spread_it_used(store, capsys):
    ids = add_runs(store, LEVELS, fingerprint=fp())
    code, out = _triage_json(store, ids[1], ids[0], capsys)
    line = next(n for n in out["notes"] if n.startswith("Between-run term"))
    assert f"from {len(LEVELS)} runs of this caliber" in line and "one stack" in line
    code, out = _triage_json(store, ids[1], ids[0], capsys, "--run-spread", "2.5")
    assert any("2.5 % (--run-spread)" in n for n in out["notes"])


def test_a_shared_prior_is_not_called_one_stack(store, capsys):
    # `-t 2` against `-t 1`, one run each: both sides get the prior, an equal record on two
    # stacks; the note says it is the same for both sides, never "one stack".
    (base,) = add_runs(store, (60.0,), fingerprint=fp(threads=2))
    (cur,) = add_runs(store, (57.0,), fingerprint=fp(threads=1))
    code, out = _triage_json(store, cur, base, capsys)
    line = next(n for n in out["notes"] if n.startswith("Between-run term"))
    assert "conservative prior" in line and "(the same for both sides)" in line
    assert "one stack" not in line
    decide = next(n for n in out["notes"] if n.startswith("What would decide it as separate"))
    assert "this stack" not in decide
    # the same two levels, both on one stack with its runs learned: "one stack" again
    ids = add_runs(store, LEVELS, fingerprint=fp(threads=4))
    code, out = _triage_json(store, ids[1], ids[0], capsys)
    assert any(n.startswith("Between-run term") and "one stack" in n for n in out["notes"])
    # the prior on one side only: the decide line names the other side's spread too
    code, out = _triage_json(store, ids[0], base, capsys)
    decide = next(n for n in out["notes"] if n.startswith("What would decide it as separate"))
    assert "the prior spread for the baseline, the current side's learned spread" in decide


def test_two_stacks_whose_spreads_read_alike_are_not_one_stack(store, capsys):
    # Two launches that differ only after the words a stack is shortened to (`-t 1` / `-t 2`
    # behind a long model path), each with five runs whose means lie closer together than
    # their trials: both learned spreads sit at the 0 floor and read alike. Still two stacks.
    model = "/models/gemma-3-12b-it-qat-q4_0-unquantized/gemma-3-12b-it-Q4_K_M.gguf"
    assert len(stack.describe_stack(stack.stack_key(fp(1, model=model)))) < 120
    base = add_runs(store, (60.02, 60.0, 60.04, 60.01, 60.03), fingerprint=fp(1, model=model))
    cur = add_runs(store, (45.02, 45.0, 45.04, 45.01, 45.03), fingerprint=fp(2, model=model))
    b, c = (rs.learn(sr.list_runs(store, caliber=sr.get_run(store, i).caliber_identity,
                                  limit=100), sr.get_run(store, i)) for i in (base[0], cur[0]))
    assert b.source == c.source == "learned" and b.sd == c.sd == 0.0 and b.stack == c.stack
    assert b != c and not rs.one_stack(b, c)  # the stack keys differ
    code, out = _triage_json(store, cur[0], base[0], capsys)
    assert not any("one stack" in n for n in out["notes"])
    assert any(n.startswith("Between-run term, baseline:") for n in out["notes"])


def test_one_stacks_spread_lent_to_both_sides_is_not_called_this_stacks(store):
    # `check`: the anchor's learned spread stands for both sides, whatever the probe's stack;
    # the notes say it is shared, never "one stack" or "this stack's spread".
    from decodescope.verdict.judge import judge
    from decodescope.verdict.side_from_runs import side_from_runs
    from decodescope.verdict.side_resolve import load_run

    ids = add_runs(store, LEVELS, fingerprint=fp(threads=2))
    (probe,) = add_runs(store, (52.0,), fingerprint=fp(threads=1))
    anchor = rs.for_side(store, side_from_runs([load_run(store, ids[0])]))
    assert anchor.source == "learned"
    base = side_from_runs([load_run(store, i) for i in ids], name="baseline")
    cur = side_from_runs([load_run(store, probe)], name="probe")
    v = judge(base, cur, store=store, spread=anchor)
    assert not any("one stack" in n or "this stack's spread" in n for n in v.notes), v.notes
    assert any(n.startswith("Between-run term") and "(the same for both sides)" in n
               for n in v.notes)
    # the same spread learned for both sides of one stack: "one stack"
    v = judge(side_from_runs([load_run(store, ids[0])]), side_from_runs([load_run(store, ids[1])]),
              store=store)
    assert any("(both sides: one stack)" in n for n in v.notes)


def test_triage_with_too_few_runs_uses_the_prior_and_says_what_would_decide(store, capsys):
    base, cur = add_runs(store, (60.0, 57.0), fingerprint=fp())
    code, out = _triage_json(store, cur, base, capsys)
    assert code == 3 and out["verdict"] == "INCONCLUSIVE"
    assert any("conservative prior" in n for n in out["notes"])
    decide = next(n for n in out["notes"] if n.startswith("What would decide it as separate"))
    assert "runs per side" in decide
    assert any(n.startswith("Interleaved: about") and "A/B pairs" in n for n in out["notes"])


def test_spread_command_stores_runs_and_reports_the_prior_until_enough(tmp_path, capsys):
    from decodescope.sim import SimConfig, SimServer

    sim = SimServer(SimConfig(time_scale=0.1, seed=3)).start_in_thread()
    try:
        capsys.readouterr()
        code = main(["spread", sim.url, "--caliber", CAL, "--runs", "2", "--trials", "2",
                     "--wait", "0", "--store", str(tmp_path / "s.sqlite"), "--json"])
        out = json.loads(capsys.readouterr().out)
    finally:
        sim.stop()
    assert code == 0 and len(out["runs"]) == 2
    assert out["spread"]["source"] == "prior" and out["spread"]["runs"] == 2
    assert "conservative prior" in out["spread"]["text"]
    with open_store(tmp_path / "s.sqlite", read_only=True) as st:
        runs = [sr.get_run(st, i, with_traces=False) for i in out["runs"]]
    assert all(r.labels.get("spread") == out["session"] for r in runs)
    assert stack.stack_key(runs[0].fingerprint) is not None
    assert stack.stack_key(runs[0].fingerprint) == stack.stack_key(runs[1].fingerprint)


# -- one spread, correctly kept (issue 36) -----------------------------------------------------
def test_ab_arms_never_count_as_runs_of_the_stack(store):
    ids = add_runs(store, LEVELS, fingerprint=fp())
    # single-trial-per-pair arms of an A/B session on the same stack, far from the runs
    for side, level in (("A", 30.0), ("B", 90.0), ("A", 31.0), ("B", 88.0)):
        store_run(store, CAL, [trial(level * f) for f in (0.99, 1.0, 1.01)], fingerprint=fp(),
                  labels={"ab": "20261206T040000", "side": side})
    run = sr.get_run(store, ids[0], with_traces=False)
    s = rs.learn(sr.list_runs(store, caliber=run.caliber_identity, limit=100), run)
    assert s.source == "learned" and s.runs == len(LEVELS)


def test_a_run_that_withheld_its_engine_rate_does_not_switch_the_spread_to_the_client_rate(store):
    ids = [store_run(store, CAL, [trial(level * f, mal=2.0, step=level * f / 2.0)
                                  for f in (0.99, 1.0, 1.01)], fingerprint=fp())
           for level in LEVELS]
    store_run(store, CAL, [trial(61.0), trial(60.0), trial(62.0)], fingerprint=fp())  # client only
    run = sr.get_run(store, ids[0], with_traces=False)
    s = rs.learn(sr.list_runs(store, caliber=run.caliber_identity, limit=100), run)
    assert s.metric == "engine decode rate" and s.runs == len(LEVELS)


def test_the_engine_environment_is_part_of_the_stack():
    def with_env(env: dict) -> dict:
        f = fp()
        f["sections"]["process"]["env"] = Item.ok(env).to_dict() if hasattr(Item, "to_dict") \
            else {"value": env, "status": "collected", "why": None}
        return f

    plain = with_env({"CUDA_VISIBLE_DEVICES": "0"})
    graphs_off = with_env({"CUDA_VISIBLE_DEVICES": "0", "GGML_CUDA_DISABLE_GRAPHS": "1"})
    assert stack.stack_key(plain) != stack.stack_key(graphs_off)
    # where files are found is not the stack; a redacted secret reads the same on both sides
    assert stack.stack_key(with_env({"CUDA_VISIBLE_DEVICES": "0", "HF_HOME": "/a"})) == \
        stack.stack_key(with_env({"CUDA_VISIBLE_DEVICES": "0", "HF_HOME": "/b"}))
    from decodescope.fingerprint.process import selected_env
    from decodescope.redact import redact_env

    kept = redact_env(selected_env({"GGML_CUDA_DISABLE_GRAPHS": "1", "HIP_VISIBLE_DEVICES": "0",
                         "ROCM_PATH": "/opt", "VLLM_API_KEY": "sk-secret-value-123456",
                         "HOME": "/root"}))  # as the process section stores it
    assert {"GGML_CUDA_DISABLE_GRAPHS", "HIP_VISIBLE_DEVICES", "ROCM_PATH"} <= set(kept)
    assert "HOME" not in kept and "sk-secret-value-123456" not in json.dumps(kept)
