"""Golden tests on real engine log lines (tests/data/real-logs, copied verbatim from public
issues/PRs; SOURCES.json names each source). Every file parses with zero unread stats lines,
the numbers parsed are the numbers printed, and the README's arithmetic identities hold."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from decodescope.telemetry.logs import ParseCounts, analyze_log, iter_windows
from decodescope.telemetry.logs.clock import Clock
from decodescope.telemetry.logs.parse_counts import Unparsed
from decodescope.telemetry.logs.sglang import SDecode
from decodescope.telemetry.logs.sglang import parse as parse_sglang
from decodescope.telemetry.logs.vllm import VSpec, VStats
from decodescope.telemetry.logs.vllm import parse as parse_vllm

DATA = Path(__file__).parent / "data" / "real-logs"
LOGS = sorted(DATA.glob("*.log"))
NUM = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?")


def windows(name: str) -> list:
    return list(iter_windows(str(DATA / name), year=2026))


def ts(month: int, day: int, h: int, m: int, s: int, year: int = 2026) -> float:
    return datetime(year, month, day, h, m, s).timestamp()


def test_corpus_is_complete():
    sources = json.loads((DATA / "SOURCES.json").read_text())
    assert sorted(s["file"] for s in sources) == [p.name for p in LOGS]
    assert len(LOGS) == 10


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.name)
def test_every_file_parses_without_errors(path: Path):
    s = analyze_log(str(path), year=2026)
    assert s.windows_total > 0
    assert s.lines["lines_unparsed"] == 0, s.lines["unparsed"]
    assert s.lines["unknown_fields"] == {}
    assert s.lines["lines_parsed"] == s.lines["lines_matched"]
    assert not [n for n in s.notes if n.severity != "info"]


def _stats_lines(path: Path) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    counts = ParseCounts()
    for line in path.read_text().splitlines():
        parse = parse_sglang if "Decode batch" in line else parse_vllm
        rec = parse(line, Clock(2026), counts)
        if rec is not None:
            out.append((line, rec))
    return out


VLLM_SGLANG = [p for p in LOGS if not p.name.startswith("llamacpp")]


@pytest.mark.parametrize("path", VLLM_SGLANG, ids=lambda p: p.name)
def test_numbers_parsed_are_numbers_printed(path: Path):
    """Every number in a stats message comes back in the record (none dropped or altered)."""
    recs = _stats_lines(path)
    assert recs
    for line, rec in recs:
        assert not isinstance(rec, Unparsed)
        assert isinstance(rec, (VStats, VSpec, SDecode))
        parsed = {round(v, 6) for v in rec.printed.values()}
        if isinstance(rec, VSpec):
            parsed |= {float(rec.accepted), float(rec.drafted), *(rec.per_pos or ())}
            parsed |= {float(rec.k)} if rec.k else set()
            parsed |= {float(rec.emitted)} if rec.emitted is not None else set()
        key = next(k for k in ("Avg prompt", "metrics: ", "Decode batch") if k in line)
        message = line[line.index(key):]
        message = re.sub(r"\(token/s\)|Decode batch[.,]", "", message)
        printed = {round(float(x), 6) for x in NUM.findall(message)}
        assert printed <= parsed, (printed - parsed, line)


def test_vllm_v1_43295_windows_and_identity():
    w = windows("vllm_issue_43295.log")
    assert [x.t_end_s for x in w] == [ts(5, 19, 10, 30, 33), ts(5, 19, 10, 30, 43),
                                      ts(5, 19, 10, 30, 53)]
    orphan, paired, last = w
    assert orphan.flags[0] == "spec_line_only" and orphan.engine_id is None
    assert (orphan.accepted_tokens, orphan.draft_tokens, orphan.drafts) == (5533, 7214, 3607)
    assert paired.engine_id == "Engine 000" and paired.t_start_s == ts(5, 19, 10, 30, 33)
    assert (paired.generation_tokens, paired.prompt_tokens) == (10044, 32790)
    assert (paired.running, paired.waiting) == (8, 7)
    assert (paired.accepted_tokens, paired.draft_tokens, paired.drafts) == (6418, 7254, 3627)
    assert paired.accepted_per_pos == (round(0.929 * 3627), round(0.840 * 3627))
    assert paired.printed["kv_cache_usage_pct"] == 82.5
    # Identity: generation_tokens ≈ Accepted + Drafted/k (1004.4 logged vs 1004.5 rebuilt).
    rebuilt = (paired.accepted_tokens + paired.draft_tokens / 2) / 10.0
    assert rebuilt == pytest.approx(1004.5)
    assert paired.decode_rate == pytest.approx(rebuilt, abs=0.15)
    assert paired.mal == pytest.approx(paired.printed["mean_acceptance_length"], abs=0.005)
    assert paired.step_rate == pytest.approx(3627 / 10 / 8)
    assert last.generation_tokens == 10248 and last.drafts is None and last.running == 9


@pytest.mark.parametrize("name", ["vllm_issue_43295.log", "vllm-ascend_issue_13640.log",
                                  "AEON-7-Qwen3.6-27B-DFlash_issue_6.log"])
def test_vllm_v1_spec_identities(name: str):
    specs = [r for _, r in _stats_lines(DATA / name) if isinstance(r, VSpec)]
    assert specs and all(r.variant == "v1-d" for r in specs)
    for r in specs:
        assert r.per_pos is not None and r.mal_printed is not None
        assert r.mal_printed == pytest.approx(1 + sum(r.per_pos), abs=0.01)
        assert r.printed["avg_draft_acceptance_rate_pct"] == pytest.approx(
            100 * r.accepted / r.drafted, abs=0.05)
    for w in windows(name):
        if w.drafts:
            assert w.mal == pytest.approx(w.printed["mean_acceptance_length"], abs=0.006)
            assert w.printed["spec_k"] == len(w.accepted_per_pos or ())


def test_vllm_ascend_k7_and_aeon_k15():
    a = windows("vllm-ascend_issue_13640.log")
    assert [(x.drafts, x.accepted_tokens) for x in a] == [(23, 44), (55, 106)]
    assert a[1].t_start_s == a[0].t_end_s  # the 10 s interval comes from the spacing
    (b,) = windows("AEON-7-Qwen3.6-27B-DFlash_issue_6.log")
    assert b.printed["spec_k"] == 15 and b.drafts == 65 and b.accepted_tokens == 89
    assert b.mal == pytest.approx(2.37, abs=0.005)


def test_vllm_v0_9539_identities():
    (rec,) = [r for _, r in _stats_lines(DATA / "vllm_issue_9539.log")]
    assert isinstance(rec, VSpec) and rec.variant == "v0" and rec.k == 3
    assert rec.printed["draft_acceptance_rate"] == pytest.approx(rec.accepted / rec.drafted, abs=5e-4)
    assert rec.emitted is not None
    eff = rec.emitted / ((rec.drafted / rec.k) * (rec.k + 1))
    assert rec.printed["system_efficiency"] == pytest.approx(eff, abs=5e-4)
    (w,) = windows("vllm_issue_9539.log")
    assert w.mal == pytest.approx(rec.printed["system_efficiency"] * (rec.k + 1), abs=0.003)
    assert w.mal == pytest.approx(rec.emitted * rec.k / rec.drafted)
    assert w.printed["v0_accepted_tokens"] == 8547  # V0 counts accepted tokens at any position


def test_vllm_v0_7301_cumulative_counts_are_diffed():
    recs = [r for _, r in _stats_lines(DATA / "vllm_issue_7301.log")]
    for r in recs:
        assert isinstance(r, VSpec) and r.k == 5 and r.emitted is not None
        assert r.printed["draft_acceptance_rate"] == pytest.approx(r.accepted / r.drafted, abs=5e-4)
        eff = r.emitted / ((r.drafted / r.k) * (r.k + 1))
        assert r.printed["system_efficiency"] == pytest.approx(eff, abs=5e-4)
    first, second = windows("vllm_issue_7301.log")
    assert "v0_first_spec_line" in first.flags
    assert "v0_cumulative_diff" in second.flags
    assert (second.draft_tokens, second.drafts, second.printed["emitted_tokens"]) == (10, 2, 2)
    assert second.mal == pytest.approx(1.0)


def test_vllm_v0_16258_stats_line():
    (w,) = windows("vllm_issue_16258.log")
    assert w.printed["generation_throughput"] == 238.0 and w.running == 4 and w.waiting == 0
    assert w.printed["swapped"] == 0 and w.printed["cpu_kv_cache_usage_pct"] == 0.0
    assert w.generation_tokens == 238 * 5  # V0 default 5 s interval for a lone line
    assert "interval_default" in w.flags


def test_sglang_11948_accept_len_and_rate():
    w = windows("sglang_issue_11948.log")
    assert [x.printed["mal_reported"] for x in w] == [2.17, 1.95, 1.80, 2.05, 1.80]
    assert [x.printed["generation_throughput"] for x in w] == [0.39, 178.86, 165.41, 188.68, 165.59]
    assert all(x.engine_id == "TP0" and x.running == 1 and x.waiting == 0 for x in w)
    assert "may_include_idle" in w[0].flags and not w[1].flags
    for x in w:  # SGLang accept rate = accept len / num_draft_tokens (= 4 here)
        assert x.printed["accept_rate"] == pytest.approx(x.printed["mal_reported"] / 4, abs=0.006)
    assert w[1].step_rate == pytest.approx(178.86 / 1.95)
    s = analyze_log(str(DATA / "sglang_issue_11948.log"), year=2026)
    assert s.decode is not None and s.decode.n == 4  # the idle-spanning window is left out
    assert s.mal_overall == pytest.approx(sum([2.17, 1.95, 1.80, 2.05, 1.80]) / 5)


@pytest.mark.parametrize("name,n,running", [("sglang_issue_3909.log", 9, 8),
                                             ("sglang_pr_22331.log", 8, 5)])
def test_sglang_without_spec(name: str, n: int, running: int):
    w = windows(name)
    assert len(w) == n and all(x.running == running and "spec_off" in x.flags for x in w)
    assert all(x.mal is None for x in w)
    s = analyze_log(str(DATA / name), year=2026)
    assert s.step_rate is not None and s.decode is not None
    assert s.step_rate.median == pytest.approx(s.decode.median / running, rel=0.02)


def test_llamacpp_24536_request_window():
    (w,) = windows("llamacpp_pr_24536.log")
    # the eval time excludes the first token: 256 printed, 255 generated in it (issue 22)
    assert (w.generation_tokens, w.prompt_tokens) == (256 - 1, 20)
    assert w.printed["predicted_n"] == 256
    assert (w.accepted_tokens, w.draft_tokens, w.drafts) == (167, 259, 87)
    assert w.mal == pytest.approx(2.92, abs=0.005)
    assert w.acceptance_rate == pytest.approx(0.64479, abs=5e-6)
    assert w.accepted_per_pos == (70, 55, 42)
    assert w.printed["tokens_per_second_printed"] == pytest.approx(111.46, abs=0.01)
    assert w.decode_rate == pytest.approx(255 / 2.29672)
    assert w.printed["t_elapsed_s"] == pytest.approx(6.895998)
    assert w.t_end_s is None and w.engine_id == "slot 1" and "no_clock_time" in w.flags
    s = analyze_log(str(DATA / "llamacpp_pr_24536.log"))
    # exact counts: steps = (256 − 1) − 167 = 88 (87 of them drafted) in 2296.72 ms
    assert s.step_rate is not None and s.step_rate.median == pytest.approx(88 / 2.29672, rel=1e-3)
    assert s.draft_coverage == pytest.approx(87 / 88)
