"""Decomposition, reconciliation, contamination and length decay on synthetic runs."""

from __future__ import annotations

import math

import pytest

from decodescope.analysis.contamination import contamination, flag_contaminated
from decodescope.analysis.decay import length_decay, linear_fit
from decodescope.analysis.decompose import pool, request_windows, select
from decodescope.analysis.run_result import analyze_run
from decodescope.records.stored_run import StoredRun, StoredTrial
from decodescope.records.trace import Chunk, RequestTrace
from decodescope.records.window import EngineWindow

ANCHOR = 1_700_000_000.0  # epoch = perf_counter + ANCHOR


def trace(t_send: float, ttft: float, n: int, rate: float, *, per_chunk: int = 1,
          decay_per_1k: float = 0.0, timings: dict | None = None) -> RequestTrace:
    """n output tokens, the first after ttft, then `rate` tok/s (slowing by decay_per_1k)."""
    chunks, t, sent = [], t_send + ttft, 0
    while sent < n:
        k = min(per_chunk, n - sent)
        if sent:
            r = rate * (1 - decay_per_1k * sent / 1000)
            t += k / r
        chunks.append(Chunk(t, content="x" * k, tokens=k))
        sent += k
    chunks.append(Chunk(t + 0.001, tokens=0, finish_reason="length"))
    return RequestTrace(t_send_s=t_send, t_headers_s=t_send + 0.001, chunks=tuple(chunks),
                        status_code=200, prompt_tokens=100, completion_tokens=n,
                        reasoning_tokens=None, finish_reason="length", timings=timings,
                        t_done_s=t + 0.002)


def run_of(trials: list[list[RequestTrace]], windows: list[EngineWindow] = (),  # type: ignore[assignment]
           concurrency: int = 1, engine: str = "vllm") -> StoredRun:
    return StoredRun(
        id=1, created_at=ANCHOR, finished_at=None, kind="probe", status="complete", url=None,
        model="m", engine=engine, simulated=False, caliber_ref="c@1", caliber_identity="x",
        caliber={"concurrency": concurrency, "output": {"steady_state_start": 16}}, labels={},
        warnings=[], fingerprint=None, result=None, meta={},
        trials=[StoredTrial(i, "ok", ANCHOR, ANCHOR, None, reqs) for i, reqs in enumerate(trials)],
        windows=list(windows))


def win(t0: float, t1: float, gen: int, drafts: int, acc: int, running: float = 1.0,
        dtok: int | None = None, **kw: object) -> EngineWindow:
    return EngineWindow("prometheus", "vllm", ANCHOR + t0, ANCHOR + t1, generation_tokens=gen,
                        drafts=drafts, draft_tokens=dtok if dtok is not None else drafts * 4,
                        accepted_tokens=acc, running=running, **kw)  # type: ignore[arg-type]


def test_pool_sums_counts_and_splits_the_identity() -> None:
    # 2 windows of 1 s each, 1 request running, every step drafts: steps = gen − accepted.
    p = pool([win(0, 1, 100, 25, 75), win(1, 2, 100, 25, 75)])
    assert p is not None
    assert p["mal"] == pytest.approx(4.0)
    assert p["steps"] == 50 and p["draft_coverage"] == pytest.approx(1.0)
    assert p["step_rate"] == pytest.approx(25.0)
    assert p["decode_rate_per_request"] == pytest.approx(100.0)
    assert p["step_rate"] * p["tokens_per_step"] == pytest.approx(p["decode_rate_per_request"])


def test_pool_ngram_steps_without_drafts() -> None:
    """N-gram: 60 steps, only 20 drafted; MAL counts drafted steps, tokens per step all."""
    p = pool([win(0, 2, 120, 20, 60)])
    assert p is not None
    assert p["mal"] == pytest.approx(4.0)
    assert p["steps"] == 60 and p["draft_coverage"] == pytest.approx(1 / 3)
    assert p["tokens_per_step"] == pytest.approx(2.0)
    assert p["step_rate"] == pytest.approx(30.0)
    assert p["draft_step_rate"] == pytest.approx(10.0)


def test_pool_skips_reset_and_gap_windows() -> None:
    reset = EngineWindow("prometheus", "vllm", ANCHOR + 1, ANCHOR + 2, flags=("reset",))
    p = pool([win(0, 1, 100, 25, 75), reset])
    assert p is not None and p["windows"] == 1 and p["generation_tokens"] == 100
    assert pool([reset]) is None


def test_pool_uses_engine_decode_seconds() -> None:
    """llama.cpp: tokens_predicted_seconds is per-request decode time (no prefill inside)."""
    w = EngineWindow("prometheus", "llamacpp", ANCHOR, ANCHOR + 10, generation_tokens=384,
                     drafts=58, draft_tokens=461, accepted_tokens=323, running=0.0,
                     printed={"decode_s": 5.0}, flags=("trial",))
    p = pool([w])
    assert p is not None
    assert p["decode_rate_per_request"] == pytest.approx(384 / 5.0)
    assert p["step_rate"] == pytest.approx((384 - 323) / 5.0)
    assert p["mal"] == pytest.approx(1 + 323 / 58)


def test_select_keeps_windows_inside_the_steady_span() -> None:
    ws = [win(0, 1, 10, 1, 1), win(1, 2, 10, 1, 1), win(2, 3, 10, 1, 1), win(3, 4, 10, 1, 1)]
    picked = select(ws, [[ANCHOR + 1.2, ANCHOR + 3.1]])
    assert [w.t_start_s - ANCHOR for w in picked] == [2]  # wholly inside: 2-3 only
    short = select(ws, [[ANCHOR + 1.2, ANCHOR + 1.9]])
    assert [w.t_start_s - ANCHOR for w in short] == [1]  # none inside: 70 % of 1-2 is
    long = [win(0, 10, 10, 1, 1)]
    assert select(long, [[ANCHOR + 4, ANCHOR + 5]]) == long  # a window containing the span
    reset = EngineWindow("prometheus", "vllm", ANCHOR + 2, ANCHOR + 3, flags=("reset",))
    assert select([ws[1], reset], [[ANCHOR + 1.2, ANCHOR + 3.1]]) == [ws[1]]


def test_request_windows_from_timings() -> None:
    tm = {"predicted_n": 384, "predicted_ms": 5000.0, "draft_n": 461, "draft_n_accepted": 323,
          "prompt_n": 100}
    tr = trace(0.0, 0.5, 384, 80.0, timings=tm)
    (w,) = request_windows([tr], ANCHOR, "llamacpp")
    assert w.source == "request" and w.duration_s == pytest.approx(5.0)
    assert w.acceptance_rate == pytest.approx(323 / 461)
    assert w.decode_rate_per_request == pytest.approx(384 / 5.0)
    no_spec = trace(0.0, 0.5, 10, 80.0, timings={"predicted_n": 10, "predicted_ms": 100.0})
    (w2,) = request_windows([no_spec], ANCHOR, "llamacpp")
    assert w2.draft_tokens == 0 and w2.accepted_tokens == 0  # omitted by llama.cpp when 0


def test_analyze_run_decomposes_and_reconciles() -> None:
    # 2 trials, 1 request each, 200 tok/s after a 0.5 s TTFT; a scrape every 0.5 s.
    trials = [[trace(0.0, 0.5, 400, 200.0)], [trace(10.0, 0.5, 400, 200.0)]]
    ws = [win(t, t + 0.5, 100, 25, 75) for t in (0.5, 1.0, 1.5, 2.0, 10.5, 11, 11.5, 12)]
    ws.append(win(0, 0.5, 1, 0, 0, running=1.0))  # prefill: outside the steady state
    ws.append(win(5, 6, 0, 0, 0, running=0.0))  # idle between trials
    res = analyze_run(run_of(trials, ws))
    eng = res["engine"]["prometheus"]
    assert eng["windows"] == 4  # wholly inside the steady states: 1.0-2.0, 11.0-12.0
    assert eng["decode_rate_per_request"] == pytest.approx(200.0)
    assert eng["mal"] == pytest.approx(4.0)
    dec = res["decomposition"]
    assert dec["source"] == "prometheus"
    assert dec["step_rate"] == pytest.approx(50.0)
    assert dec["identity_gap_pct"] == pytest.approx(0.0, abs=1e-9)
    rec = res["reconciliation"]
    assert rec["deciding"] == "engine"
    assert rec["client"] == pytest.approx(200.0, rel=1e-6)
    assert abs(rec["gap_pct"]) < 1
    assert "agree" in rec["text"]
    causes = {c["cause"]: c for c in rec["explained_by"]}
    assert causes["ttft"]["pct"] < -15  # 400 tokens in 2.5 s wall vs 200 tok/s decode
    for t in res["trials"]:
        assert t["engine_mal"] == pytest.approx(4.0)
        assert t["engine_step_rate"] == pytest.approx(50.0)
        assert t["engine_decode_rate"] == pytest.approx(200.0)
    assert res["contamination"]["flagged"] is False
    assert res["client"]["decode_rate"]["median"] == pytest.approx(200.0, rel=1e-6)
    assert res["caliber_status"] == "ok"


def test_gap_is_named_when_chunks_carry_several_tokens() -> None:
    trials = [[trace(0.0, 0.2, 400, 200.0, per_chunk=4)]]
    ws = [win(t, t + 1, 150, 40, 110) for t in (0, 1)]  # engine says 150 tok/s
    rec = analyze_run(run_of(trials, ws))["reconciliation"]
    assert rec["gap_pct"] == pytest.approx(100 * (200 - 150) / 150, rel=0.02)
    assert "gap" in rec["text"]
    assert "chunking" in [c["cause"] for c in rec["explained_by"]]


def test_foreign_load_is_flagged() -> None:
    trials = [[trace(0.0, 0.2, 400, 200.0)]]
    ws = [win(0, 1, 400, 100, 300, running=2.0), win(1, 2, 400, 100, 300, running=3.0)]
    res = analyze_run(run_of(trials, ws))
    c = res["contamination"]
    assert c == {"flagged": True, "windows": 2, "of_windows": 2, "max_running": 3.0,
                 "in_flight": 1, "sources": ["prometheus"]}
    assert "contamination" in [f["code"] for f in res["findings"]]
    assert "foreign_load" in [x["cause"] for x in res["reconciliation"]["explained_by"]]


def test_contamination_margin_tolerates_one_late_gauge() -> None:
    w = win(0, 1, 100, 25, 75, running=1.5)  # one end still counts our previous request
    assert flag_contaminated([w], 1)[0].flags == ()
    summary, finding = contamination([w], 1)
    assert summary is not None and summary["flagged"] is False and finding is None
    queued = win(0, 1, 100, 25, 75, running=1.0, waiting=1.0)  # llama.cpp -np 1: deferred
    assert flag_contaminated([queued], 1)[0].flags == ("contaminated",)


def test_counter_reset_window_gives_a_finding_and_no_rate() -> None:
    trials = [[trace(0.0, 0.2, 400, 200.0)]]
    ws = [win(0, 1, 200, 50, 150),
          EngineWindow("prometheus", "vllm", ANCHOR + 1, ANCHOR + 2, running=1.0,
                       flags=("reset",))]
    res = analyze_run(run_of(trials, ws))
    assert res["engine"]["prometheus"]["windows"] == 1
    assert res["engine"]["prometheus"]["decode_rate_per_request"] == pytest.approx(200.0)
    assert "telemetry.counter_reset" in [f["code"] for f in res["findings"]]


def test_request_source_decides_without_scrapes() -> None:
    tm = {"predicted_n": 400, "predicted_ms": 2000.0, "draft_n": 300, "draft_n_accepted": 150}
    res = analyze_run(run_of([[trace(0.0, 0.2, 400, 200.0, timings=tm)]], engine="llamacpp"))
    assert res["decomposition"]["source"] == "request"
    assert res["engine"]["request"]["acceptance_rate"] == pytest.approx(0.5)
    assert res["trials"][0]["engine_decode_rate"] == pytest.approx(200.0)
    assert res["trials"][0]["engine_step_rate"] == pytest.approx((400 - 150) / 2.0)


def test_no_engine_data_is_none_not_zero() -> None:
    res = analyze_run(run_of([[trace(0.0, 0.2, 100, 100.0)]]))
    assert res["engine"] == {}
    assert res["decomposition"] is None
    assert res["trials"][0]["engine_mal"] is None
    assert res["contamination"] is None
    assert "no engine number" in res["reconciliation"]["text"]


def test_length_decay_recovers_a_known_slope() -> None:
    trs = [trace(0.0, 0.1, 2048, 100.0, decay_per_1k=0.2) for _ in range(2)]
    d = length_decay(trs)
    assert d is not None and d["bucket_tokens"] == 256
    # the rate falls ~20 % per 1K tokens relative to the start
    assert -24 < d["per_1k_pct"] < -16
    assert d["r2"] > 0.95
    flat = length_decay([trace(0.0, 0.1, 2048, 100.0)])
    assert flat is not None and abs(flat["per_1k_pct"]) < 1


def test_length_decay_needs_positions() -> None:
    d = length_decay([trace(0.0, 0.1, 20, 100.0)])
    assert d is not None and d["per_1k_pct"] is None and "reason" in d
    assert length_decay([]) is None


def test_linear_fit() -> None:
    b, a, r2 = linear_fit([(0, 1), (1, 3), (2, 5)])  # type: ignore[misc]
    assert (b, a) == (pytest.approx(2.0), pytest.approx(1.0)) and r2 == pytest.approx(1.0)
    assert linear_fit([(1, 1), (1, 2)]) is None
    assert not math.isnan(linear_fit([(0, 1), (1, 1)])[0])  # type: ignore[index]
