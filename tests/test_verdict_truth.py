"""Verdict truth: simulator scenarios whose ground truth is known, one per root cause of
issue 11. Each asserts what must always hold (the verdict a person acts on, and engine numbers
against the simulator's truth), never a timing that depends on machine load. The power to say
NO_CHANGE, and the full table, are in bench/bench_verdicts.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from decodescope.cli.main import main
from decodescope.records.stored_run import StoredRun
from decodescope.sim import ACCEPTANCE_PROFILES, FaultSpec, SimConfig, SimServer
from decodescope.store import runs as sr
from decodescope.store.connect import open_store

pytestmark = pytest.mark.timeout(300)

CAL = "demo-code-rewrite"
WEAK_CODE = (0.75, 0.6, 0.5, 0.4)


@contextmanager
def sim(time_scale: float = 0.25, **kw: Any) -> Iterator[Any]:
    handle = SimServer(SimConfig(time_scale=time_scale, seed=7, **kw)).start_in_thread()
    try:
        yield handle
    finally:
        handle.stop()


def probe(url: str, store: str, label: str, *extra: str, trials: int = 4) -> int:
    return main(["probe", url, "--caliber", CAL, "--trials", str(trials), "--store", store,
                 "--label", f"side={label}", "--no-fingerprint", "--json", *extra])


def triage(store: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main(["triage", "side=current", "--baseline", "side=baseline", "--store", store,
                 "--json"])
    return code, json.loads(capsys.readouterr().out)


def last_run(store: str) -> StoredRun:
    st = open_store(store)
    try:
        return sr.get_run(st, sr.resolve_run_id(st, "last"))
    finally:
        st.close()


def truth_rates(url: str) -> list[float]:
    reqs = httpx.get(url + "/sim/truth", timeout=5.0).json()["requests"]
    return [r["decode_rate_real_tps"] for r in reqs if r.get("decode_rate_real_tps")]


# -- 1. per-trial engine numbers from the trial's own span ------------------------------------
@pytest.mark.parametrize("time_scale", [0.05, 0.25, 1.0])
def test_engine_decode_per_trial_matches_truth_or_is_withheld(tmp_path, capsys, time_scale):
    """1-s scrapes at most: the interval adapts to the trial; every per-trial engine decode rate
    is within 3% of the simulator's truth, and one that cannot be is withheld with a reason —
    never the 2x-too-high edge-window number."""
    store = str(tmp_path / "runs.sqlite")
    with sim(time_scale) as h:
        assert probe(h.url, store, "x", "--scrape-interval", "1", trials=3) == 0
        truth = truth_rates(h.url)
    run = last_run(store)
    trials = run.result["trials"]
    # one request per trial (c=1), after the warm-up: the trials' own truths, in order. Each
    # trial is compared with its own request, not the median of all: on a loaded machine the
    # simulator's real rate differs from request to request (CI: one trial's truth sat 3 %
    # under the median). The truth spans the whole output (first chunk to last), the engine
    # span the steady-state window only, so the bound is the span's 3 % plus that basis: 5 %.
    assert len(truth) >= len(trials)
    own = truth[-len(trials):]
    checked = 0
    for t, true_rate in zip(trials, own, strict=True):
        rate = t.get("engine_decode_rate")
        if rate is None:
            assert t.get("engine_withheld"), t
            continue
        checked += 1
        assert rate == pytest.approx(true_rate, rel=0.05), (t, truth)
        # tokens per step never above MAL, and never more steps than the engine can make
        if t.get("engine_mal") and t.get("engine_tokens_per_step"):
            assert t["engine_tokens_per_step"] <= t["engine_mal"] + 1e-9
    # How many trials get a number depends on the machine's load (scrape latency enters the
    # error bound): bench/bench_verdicts.py counts them; here only what always holds.
    assert checked + sum(1 for t in trials if t.get("engine_withheld")) == len(trials)
    intervals = run.series["prometheus"]["trial_intervals_s"]
    assert intervals and all(v <= 1.0 for v in intervals.values())


# -- 2. the headline is about the decode rate -------------------------------------------------
def test_unchanged_server_is_never_a_regression_or_improvement(tmp_path, capsys):
    store = str(tmp_path / "runs.sqlite")
    with sim() as h:
        assert probe(h.url, store, "baseline") == 0
        assert probe(h.url, store, "current") == 0
    code, out = triage(store, capsys)
    assert out["verdict"] in ("NO_CHANGE", "INCONCLUSIVE"), out["headline"]
    assert code in (0, 3)


def test_speculative_decoding_off_is_named_and_is_a_regression(tmp_path, capsys):
    """The H200 case: spec off cut decode by a third while the step rate rose."""
    store = str(tmp_path / "runs.sqlite")
    with sim() as h:
        assert probe(h.url, store, "baseline") == 0
    with sim(k=0, step_rate_hz=60.0) as h:
        assert probe(h.url, store, "current") == 0
    code, out = triage(store, capsys)
    assert out["verdict"] == "REGRESSION", out["headline"]
    assert out["cause"] == "speculative decoding off", out["headline"]
    assert code == 1


def test_step_rate_regression_still_named(tmp_path, capsys):
    store = str(tmp_path / "runs.sqlite")
    with sim(step_rate_hz=40.0) as h:
        assert probe(h.url, store, "baseline") == 0
    with sim(step_rate_hz=28.0) as h:
        assert probe(h.url, store, "current") == 0
    code, out = triage(store, capsys)
    assert out["label"] == "REGRESSION (step rate)", out["headline"]
    assert code == 1


def test_acceptance_regression_still_named(tmp_path, capsys):
    store = str(tmp_path / "runs.sqlite")
    with sim() as h:
        assert probe(h.url, store, "baseline") == 0
    with sim(acceptance={**ACCEPTANCE_PROFILES, "code": WEAK_CODE}) as h:
        assert probe(h.url, store, "current") == 0
    code, out = triage(store, capsys)
    assert out["label"] == "REGRESSION (acceptance)", out["headline"]
    assert code == 1


# -- 3. stalls --------------------------------------------------------------------------------
def test_a_stall_is_never_a_step_rate_regression(tmp_path, capsys):
    store = str(tmp_path / "runs.sqlite")
    with sim() as h:
        assert probe(h.url, store, "baseline") == 0
    with sim(faults=FaultSpec.parse("stall=2,stall_after=100")) as h:
        assert probe(h.url, store, "current") == 0
    run = last_run(store)
    assert run.result["stalls"]["count"] >= 4  # one per request
    assert any(f["code"] == "stalls" for f in run.result["findings"])
    code, out = triage(store, capsys)
    assert out["cause"] != "step rate", out["headline"]
    assert out["changes"]["step_rate"]["status"] not in ("down",), out["changes"]["step_rate"]
    assert "stall" in out["headline"].lower()


# -- 4. no usage in the stream ----------------------------------------------------------------
def test_no_usage_counts_tokens_exactly_with_the_servers_tokenizer(tmp_path):
    store = str(tmp_path / "runs.sqlite")
    with sim(faults=FaultSpec.parse("no_usage")) as h:
        assert probe(h.url, store, "x", trials=2) == 0
        truth = truth_rates(h.url)
    run = last_run(store)
    reqs = [r for t in run.result["trials"] for r in [t]]
    for t in reqs:
        assert t["tokens_per_chunk_source"] == "tokenized"
        assert t["decode_rate"] == pytest.approx(sorted(truth)[len(truth) // 2], rel=0.03)


def test_no_usage_and_no_tokenizer_leaves_the_rate_unknown():
    from decodescope.records.request_metrics import compute
    from decodescope.records.trace import Chunk, RequestTrace

    chunks = tuple(Chunk(0.1 * i, content="abc def ") for i in range(1, 20))
    tr = RequestTrace(0.0, 0.01, chunks, 200, None, None, None, "length")
    m = compute(tr)
    assert m.tokens_per_chunk_source == "unknown"
    assert m.decode_rate is None and m.mean_tokens_per_chunk is None


# -- 8. trial independence --------------------------------------------------------------------
def test_warmup_requests_are_not_counted_and_recorded(tmp_path):
    store = str(tmp_path / "runs.sqlite")
    with sim() as h:
        assert probe(h.url, store, "x", "--warmup", "2", trials=2) == 0
        n = len(httpx.get(h.url + "/sim/truth", timeout=5.0).json().get("requests", []))
    run = last_run(store)
    assert run.meta["warmup"] == 2
    assert len(run.trials) == 2
    assert n == 4
