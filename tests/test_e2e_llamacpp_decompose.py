"""End to end on the real llama.cpp engine with n-gram speculation, reported by
`decodescope probe` itself: /metrics deltas, per-request timings, the log tail, and the
content effect (code rewrite vs varied prose). The engine and the two runs are the session's
(tests/llamacpp_pair.py): tests/test_report_browser.py renders the same runs.

Needs the embedded engine (`decodescope engine install`); skipped without it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from coherence_checks import check_stored_verdict
from llamacpp_pair import CALIBERS, INSTALL, Pair

from decodescope.telemetry.prometheus import Scrape

pytestmark = pytest.mark.e2e

needs_engine = pytest.mark.skipif(
    INSTALL is None,
    reason="llama-server binary / Gemma GGUF not installed: run `decodescope engine install`")


@pytest.fixture(scope="module")
def pair(llamacpp_pair: Pair) -> Iterator[Pair]:
    """The session's n-gram engine and its two probes (tests/llamacpp_pair.py, shared with
    tests/test_report_browser.py); the engine does not outlive this module."""
    try:
        yield llamacpp_pair
    finally:
        llamacpp_pair.stop()


@pytest.fixture(scope="module")
def store(pair: Pair) -> Path:
    return pair.store


@pytest.fixture(params=CALIBERS)
def run(request: pytest.FixtureRequest, pair: Pair) -> dict[str, Any]:
    return pair.run(request.param)


@pytest.fixture
def runs(pair: Pair) -> dict[str, dict[str, Any]]:
    return {cal: pair.run(cal) for cal in CALIBERS}


def _deltas(run: dict[str, Any]) -> dict[str, float]:
    """Σ over trials of (trial_end − trial_start) counters, straight from the raw scrapes."""
    scrapes = [Scrape.from_dict(s) for s in run["series"]["prometheus"]["scrapes"]]
    by_mark = {s.mark: s for s in scrapes if s.mark}
    tot: dict[str, float] = {}
    for t in run["trials"]:
        a, b = by_mark[f"trial_start:{t['idx']}"], by_mark[f"trial_end:{t['idx']}"]
        for k, v in b.counters.items():
            tot[k] = tot.get(k, 0.0) + v - a.counters[k]
    return tot


@needs_engine
@pytest.mark.timeout(900)  # the first test per caliber runs its probe (≈30 s on a quiet CPU)
def test_mal_is_one_plus_accepted_over_drafts(run: dict[str, Any]) -> None:
    d = _deltas(run)
    eng = run["result"]["engine"]["prometheus"]
    assert d["drafts"] > 0
    assert eng["mal"] == pytest.approx(1 + d["accepted_tokens"] / d["drafts"], rel=1e-12)
    assert eng["generation_tokens"] == d["generation_tokens"] == 2 * 384
    assert run["result"]["decomposition"]["source"] == "prometheus"
    assert all(w["source"] in ("prometheus", "log") for w in run["windows"])
    assert all("trial" in w["flags"] for w in run["windows"] if w["source"] == "prometheus")


@needs_engine
@pytest.mark.timeout(900)
def test_metrics_agree_with_per_request_timings(run: dict[str, Any]) -> None:
    tm = [r["timings"] for t in run["trials"] for r in t["requests"]]
    d = _deltas(run)
    acc_timings = sum(x.get("draft_n_accepted", 0) for x in tm) / sum(x.get("draft_n", 0)
                                                                      for x in tm)
    assert acc_timings == pytest.approx(d["accepted_tokens"] / d["draft_tokens"], rel=1e-9)
    eng = run["result"]["engine"]
    assert eng["request"]["acceptance_rate"] == pytest.approx(
        eng["prometheus"]["acceptance_rate"], rel=1e-9)
    assert eng["request"]["decode_rate_per_request"] == pytest.approx(
        eng["prometheus"]["decode_rate_per_request"], rel=0.01)
    rec = run["result"]["reconciliation"]
    # one decision, said the same everywhere; the engine decides unless too few of its
    # per-trial rates survive (stalls on a loaded host withhold them), and the reason says why
    decision = run["result"]["deciding"]
    assert rec["deciding"] == decision["source"] and rec["engine"] is not None
    assert decision["source"] == "engine" or "engine" in decision["reason"], decision


@needs_engine
@pytest.mark.timeout(900)
def test_code_rewrite_emits_more_tokens_per_step_than_varied_prose(
        runs: dict[str, dict[str, Any]]) -> None:
    code = runs["demo-code-rewrite"]["result"]["decomposition"]
    prose = runs["demo-varied-prose"]["result"]["decomposition"]
    print("\ncode ", json.dumps({k: code[k] for k in ("mal", "tokens_per_step", "step_rate",
                                                     "draft_coverage", "engine_decode_rate")}))
    print("prose", json.dumps({k: prose[k] for k in ("mal", "tokens_per_step", "step_rate",
                                                     "draft_coverage", "engine_decode_rate")}))
    # N-gram drafts only where the text repeats: nearly every step of a code rewrite, a
    # quarter or less of varied prose. Tokens per step (every step, drafted or not) carries
    # the content effect; MAL (drafted steps only) is high for both — when prose repeats
    # itself the draft is accepted too (measured 5.97 vs 6.02, docs/telemetry.md).
    assert code["draft_coverage"] > 0.9 > 0.5 > prose["draft_coverage"]
    assert code["tokens_per_step"] > 1.8 * prose["tokens_per_step"]
    assert code["mal"] > 4 and prose["mal"] > 1
    for res in (code, prose):  # decode rate = step rate × tokens per step
        assert res["step_rate"] * res["tokens_per_step"] == pytest.approx(
            res["engine_decode_rate"], rel=1e-9)


@needs_engine
@pytest.mark.timeout(900)
def test_every_output_of_the_pair_tells_one_story(runs: dict[str, dict[str, Any]],
                                                  store: Path) -> None:
    """Issue 21's invariants over the real engine's outputs: prose vs code (triage JSON,
    text, Markdown) and each run (runs show JSON and text, report Markdown and HTML)."""
    doc = check_stored_verdict(str(store), str(runs["demo-varied-prose"]["id"]),
                               str(runs["demo-code-rewrite"]["id"]))
    assert doc["verdict"] == "CALIBER_MISMATCH", doc["headline"]


@needs_engine
@pytest.mark.timeout(900)
def test_log_tail_attaches_log_windows(run: dict[str, Any]) -> None:
    logs = [w for w in run["windows"] if w["source"] == "log"]
    # one per request (llama.cpp), the uncounted warm-up request included
    assert len(logs) == 2 + run["meta"]["warmup"], run["result"]["findings"]
    # llama.cpp's eval time starts after the first token: the window generates n − 1 of the
    # printed n (telemetry/logs/llamacpp.py), and keeps the printed n
    assert all(w["printed"]["predicted_n"] == 384 for w in logs)
    assert all(w["generation_tokens"] == 383 for w in logs)
