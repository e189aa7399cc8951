"""LogSummary pieces: the fast summary, time bins, estimated-step MAL, notes."""

from __future__ import annotations

import random
from array import array
from pathlib import Path

import pytest

from decodescope.records.summary import Summary
from decodescope.records.window import EngineWindow
from decodescope.telemetry.logs import LogAccumulator, ParseCounts, analyze_log
from decodescope.telemetry.logs.bins import MAX_BINS, Binner
from decodescope.telemetry.logs.figures import FAST_SUMMARY_MIN_N, summary_of
from decodescope.telemetry.logs.synth import engine_line, spec_line


def test_fast_summary_matches_summary_of():
    rng = random.Random(7)
    xs = array("d", (rng.lognormvariate(5, 0.5) for _ in range(FAST_SUMMARY_MIN_N + 11)))
    fast, ref = summary_of(xs), Summary.of(xs)
    assert fast is not None and ref is not None
    for name, v in ref.to_dict().items():
        assert getattr(fast, name) == pytest.approx(v, rel=1e-12), name
    assert summary_of(array("d")) is None


def test_bins_merge_pairwise_and_keep_totals():
    b = Binner()
    for i in range(1000):
        b.add(float(i), float(i + 1), "Engine 000", 100.0 + i % 7, 2.0, 1.0, 5.0, 1.0, ())
    bins = b.bins()
    assert MAX_BINS // 2 <= len(bins) <= MAX_BINS
    assert sum(x.windows for x in bins) == 1000
    assert bins[0].t_start_s == 0.0 and bins[-1].t_end_s == 1000.0
    assert all(x.mal == pytest.approx(3.0) and x.engine_id == "Engine 000" for x in bins)
    assert max(x.decode_peak or 0 for x in bins) == 106.0
    assert b.bins() == bins  # reading the bins does not change them


def test_small_logs_get_one_row_per_window(tmp_path: Path):
    t0 = 1_790_000_000.0
    p = tmp_path / "e.log"
    p.write_text("".join(engine_line(t0 + 10 * i, 14.0) + "\n" + spec_line(t0 + 10 * i, 50, [40, 30, 20])
                         + "\n" for i in range(1, 6)))
    s = analyze_log(str(p))
    assert len(s.bins) == 5 and all(b.windows == 1 for b in s.bins)
    assert s.bins[2].mal == pytest.approx(2.8) and s.bins[2].step_rate_mean == pytest.approx(5.0)


def test_overall_mal_weights_printed_mal_by_estimated_steps():
    acc = LogAccumulator()
    # SGLang-like windows: printed MAL, 40 batch steps x running requests
    acc.add(EngineWindow("log", "sglang", 0.0, 1.0, running=1,
                         printed={"mal_reported": 2.0, "decode_steps": 40.0,
                                  "generation_throughput": 80.0}))
    acc.add(EngineWindow("log", "sglang", 1.0, 2.0, running=3,
                         printed={"mal_reported": 4.0, "decode_steps": 40.0,
                                  "generation_throughput": 480.0}))
    s = acc.finish("x.log", "sglang", ParseCounts())
    assert s.mal_overall == pytest.approx((40 * 2.0 + 120 * 4.0) / 160)
    assert s.mal_overall_estimated
    assert any(n.code == "logs.mal_printed" for n in s.notes)


def test_max_windows_keeps_the_most_recent():
    acc = LogAccumulator(max_windows=3)
    for i in range(10):
        acc.add(EngineWindow("log", "vllm", float(i), float(i + 1), generation_tokens=10,
                             running=1))
    s = acc.finish("x.log", "vllm", ParseCounts())
    assert s.windows_total == 10 and [w.t_end_s for w in s.windows] == [8.0, 9.0, 10.0]
    assert s.to_dict()["windows_listed"] == 3
