"""Issue 21, class 4: advice that fits the facts and the engine.

Each piece of advice is shown when its premise holds and absent when it does not: the
warm-up advice (trial 1 unlike the rest), the engine's own speculative-decoding flags in next
steps, the split of a speculation-off change (known: tokens per step), and the restart row of
the fingerprint diff ("compare windows from one launch" is never said; whether the restart is
the change under test is).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from test_decompose_unit import run_of, trace
from test_triage_support import fingerprint, store_run, trial

from decodescope.analysis.first_trial import first_trial_shift
from decodescope.analysis.run_result import analyze_run
from decodescope.fingerprint.diff import diff_fingerprints
from decodescope.fingerprint.stack import Fingerprint, Item
from decodescope.store.connect import open_store
from decodescope.verdict.advice import (
    METRICS_HOW,
    NEUTRAL_SPEC,
    all_spec_flags,
    engine_kind,
    spec_flags,
)
from decodescope.verdict.side_resolve import resolve_side
from decodescope.verdict.triage import Verdict, triage


def trials(decode: list[float], mal: list[float | None] | None = None) -> list[dict[str, Any]]:
    mal = mal or [None] * len(decode)
    return [{"status": "ok", "decode_rate": d, "engine_mal": m} for d, m in zip(decode, mal,
                                                                                strict=True)]


# -- trial 1 unlike the rest ------------------------------------------------------------------
def test_warmup_advice_when_the_run_had_none_and_trial_1_is_slow() -> None:
    f = first_trial_shift(trials([80.0, 100.0, 101.0, 99.5]), warmup=0, greedy=False)
    assert f is not None and f.remedy is not None
    assert "--warmup 1 or more" in f.remedy and "no warm-up" in f.remedy


def test_no_warmup_advice_when_trial_1_is_the_faster_one() -> None:
    """The H200 case: warm-up 1, greedy, identical MAL in every trial, trial 1 the faster."""
    f = first_trial_shift(trials([120.0, 100.0, 101.0, 99.5], [5.0, 5.0, 5.0, 5.0]),
                          warmup=1, greedy=True)
    assert f is not None and f.remedy is not None
    assert "--warmup" not in f.remedy and "not independent" not in f.cause
    assert "later trials were slower" in f.cause and "warm-up would not change" in f.cause
    assert "speculator" not in f.cause


def test_warmup_already_used_asks_for_more_not_for_one() -> None:
    f = first_trial_shift(trials([80.0, 100.0, 101.0, 99.5], [5.0, 5.0, 5.0, 5.0]),
                          warmup=1, greedy=True)
    assert f is not None and f.remedy is not None
    assert "--warmup 1 or more" not in f.remedy and "already had 1 warm-up" in f.remedy
    # identical MAL in every trial: not a learning speculator, and no "vary the requests"
    assert "not the speculator" in f.cause and "vary" not in f.remedy


def test_a_learning_speculator_is_named_only_when_mal_moved() -> None:
    f = first_trial_shift(trials([80.0, 100.0, 101.0, 99.5], [2.0, 3.0, 3.02, 2.98]),
                          warmup=1, greedy=True)
    assert f is not None and f.remedy is not None
    assert "trial 1 MAL" in f.cause and "learns from earlier outputs" in f.cause
    assert "greedy sampling" in f.cause and "--warmup" not in f.remedy
    assert "requests vary" in f.remedy


def test_alike_trials_give_no_finding() -> None:
    assert first_trial_shift(trials([100.0, 101.0, 99.0, 100.5]), warmup=0, greedy=None) is None
    assert first_trial_shift(trials([80.0, 100.0]), warmup=0, greedy=None) is None


def test_the_stored_run_passes_its_warmup_and_sampling() -> None:
    """analyze_run reads meta.warmup and the caliber's temperature: trial 1 faster on a run
    with warm-up 1 gets no warm-up advice; the same shape without warm-up gets it only when
    trial 1 is the slow one."""
    fast_first = run_of([[trace(0.0, 0.1, 200, r)] for r in (130.0, 100.0, 100.0, 100.0)])
    fast_first = dataclasses.replace(fast_first, meta={"warmup": 1},
                                     caliber={**(fast_first.caliber or {}),
                                              "sampling": {"temperature": 0.0}})
    found = [f for f in analyze_run(fast_first)["findings"] if f["code"] == "trials.first_differs"]
    assert found and "--warmup" not in (found[0]["remedy"] or "")
    slow_first = run_of([[trace(0.0, 0.1, 200, r)] for r in (70.0, 100.0, 100.0, 100.0)])
    slow_first = dataclasses.replace(slow_first, meta={"warmup": 0})
    found = [f for f in analyze_run(slow_first)["findings"] if f["code"] == "trials.first_differs"]
    assert found and "--warmup 1 or more" in found[0]["remedy"]


# -- the engine's own flags -------------------------------------------------------------------
FLAGS = all_spec_flags()


@pytest.mark.parametrize("engine, own", [("vllm", "--speculative-config"),
                                         ("sglang", "--speculative-algorithm"),
                                         ("llamacpp", "--spec-type"),
                                         ("openai", None), (None, None)])
def test_spec_flags_are_the_detected_engines(engine: str | None, own: str | None) -> None:
    text = spec_flags([engine_kind(engine)])
    if own is None:
        assert text == NEUTRAL_SPEC
    else:
        assert own in text
    others = [f for k, fl in FLAGS.items() if k != engine for f in fl if f.startswith("--")]
    assert not [f for f in others if f in text], text


def test_engine_names_as_written_by_runs_logs_and_fingerprints() -> None:
    assert engine_kind("llama.cpp") == engine_kind("llamacpp") == "llamacpp"
    assert engine_kind("sim-vllm") == "vllm" and engine_kind("SGLang") == "sglang"
    assert engine_kind("openai") is None and engine_kind(None) is None


def _spec_off_verdict(tmp_path: Path, engine: str, fp: bool = False) -> Verdict:
    store = open_store(tmp_path / f"{engine}.sqlite")
    kw: dict[str, Any] = {"engine": engine}
    try:
        base = store_run(store, "demo-code-rewrite",
                         [trial(100 + d, 4.0, 25.0 + d / 4, engine_tokens_per_step=4.0)
                          for d in (0, 0.6, -0.5, 0.3)],
                         fingerprint=fingerprint(4) if fp else None, **kw)
        cur = store_run(store, "demo-code-rewrite",
                        [trial(40 + d, None, 40.0 + d, engine_tokens_per_step=1.0,
                               engine_decode_rate=40 + d) for d in (0, 0.3, -0.2, 0.1)],
                        fingerprint=fingerprint(4) if fp else None, **kw)
        return triage(resolve_side(str(base), store=store), resolve_side(str(cur), store=store))
    finally:
        store.close()


def _all_text(v: Verdict) -> str:
    return "\n".join([v.headline, *v.explanation, *v.next_steps,
                      *(f"{r.check} {r.result} {r.detail or ''}" for r in v.evidence)])


@pytest.mark.parametrize("engine, own", [("vllm", "--speculative-config"),
                                         ("sglang", "--speculative-num-draft-tokens"),
                                         ("llamacpp", "--spec-draft-n-max"),
                                         ("openai", None)])
def test_spec_off_next_step_names_only_the_engines_flags(tmp_path: Path, engine: str,
                                                         own: str | None) -> None:
    v = _spec_off_verdict(tmp_path, engine)
    assert v.cause == "speculative decoding off", v.headline
    steps = "\n".join(v.next_steps)
    if own is not None:
        assert own in steps
    else:
        assert NEUTRAL_SPEC in steps
    others = [f for k, fl in FLAGS.items() if k != engine for f in fl if f.startswith("--")]
    assert not [f for f in others if f in steps], steps
    # no fingerprint stored: the advice does not point at a fingerprint diff that is not there
    assert "fingerprint diff" not in steps and "no fingerprint stored" in steps


def test_spec_off_with_fingerprints_points_at_the_cmdline_row(tmp_path: Path) -> None:
    v = _spec_off_verdict(tmp_path, "llamacpp", fp=True)
    steps = "\n".join(v.next_steps)
    assert "launch cmdline row" in steps and "--spec-type" in steps


def test_spec_off_split_is_known_from_tokens_per_step(tmp_path: Path) -> None:
    """MAL is 1 by definition without drafts: the split is tokens per step × step rate, never
    'split unknown: needs engine MAL'."""
    v = _spec_off_verdict(tmp_path, "vllm")
    text = _all_text(v)
    assert "1 by definition" in v.headline
    assert "split unknown" not in text and "needs engine MAL" not in text
    assert v.decomposition is not None and v.decomposition.split_known
    assert v.decomposition.acceptance_metric == "tokens per step"


# -- the restart row --------------------------------------------------------------------------
def _fp(pid: int, start: float, cmd: list[str], version: str = "1.0") -> Fingerprint:
    return Fingerprint(taken_at="2026-12-01T00:00:00+00:00", url="http://127.0.0.1:8000",
                       sections={"process": {"pid": Item.ok(pid),
                                             "create_time": Item.ok({"epoch": start,
                                                                     "iso": "2026-12-01T00:00"}),
                                             "cmdline": Item.ok(cmd), "env": Item.ok({})},
                                 "endpoint": {"engine_version": Item.ok(version)}})


def _restart_row(a: Fingerprint, b: Fingerprint) -> Any:
    return next(r for r in diff_fingerprints(a, b) if r.check == "did the server restart?")


def test_a_restart_that_is_the_change_under_test_is_said_so() -> None:
    a = _fp(1, 1000.0, ["vllm", "serve", "m", "--speculative-config", "{}"])
    b = _fp(2, 5000.0, ["vllm", "serve", "m"])
    row = _restart_row(a, b)
    assert row.status == "changed"
    assert "compare windows from one launch" not in (row.detail or "")
    assert "part of the change under test" in (row.detail or "")
    assert "launch command line" in (row.detail or "")


def test_a_restart_alone_suggests_two_probes_within_one_launch() -> None:
    cmd = ["vllm", "serve", "m"]
    row = _restart_row(_fp(1, 1000.0, cmd), _fp(2, 5000.0, cmd))
    assert "change under test" not in (row.detail or "")
    assert "within one launch" in (row.detail or "")


def test_no_restart_no_advice() -> None:
    cmd = ["vllm", "serve", "m"]
    row = _restart_row(_fp(1, 1000.0, cmd), _fp(1, 1000.0, cmd))
    assert row.status == "same" and not row.detail


def test_caliber_matrix_of_a_server_without_drafts_splits_by_tokens_per_step(
        tmp_path: Path) -> None:
    from decodescope.verdict.matrix import caliber_matrix

    store = open_store(tmp_path / "m.sqlite")
    try:
        ids = [store_run(store, cal, [trial(rate + d, None, rate + d, engine_tokens_per_step=1.0,
                                            engine_decode_rate=rate + d) for d in (0, 0.4, -0.3)])
               for cal, rate in (("demo-code-rewrite", 60.0), ("demo-varied-prose", 45.0))]
        sides = [resolve_side(str(i), store=store) for i in ids]
    finally:
        store.close()
    m = caliber_matrix(sides)
    assert "split unknown" not in m.summary and "tokens per step explains 0%" in m.summary
    assert m.acceptance_metric == "tokens per step"


@pytest.mark.parametrize("engine, how", [("llamacpp", "llama-server needs --metrics"),
                                         ("sglang", "SGLang needs --enable-metrics"),
                                         ("openai", None)])
def test_metrics_advice_names_the_engines_switch(tmp_path: Path, engine: str,
                                                 how: str | None) -> None:
    """Client numbers only: the split needs engine numbers, and how to get them is the
    detected engine's switch (none named for an unknown engine)."""
    store = open_store(tmp_path / "c.sqlite")
    try:
        b = store_run(store, "demo-code-rewrite", [trial(100 + d) for d in (0, 0.5, -0.4)],
                      engine=engine)
        c = store_run(store, "demo-code-rewrite", [trial(70 + d) for d in (0, 0.3, -0.2)],
                      engine=engine)
        v = triage(resolve_side(str(b), store=store), resolve_side(str(c), store=store))
    finally:
        store.close()
    assert v.cause == "decode rate", v.headline
    steps = "\n".join(v.next_steps)
    assert "Engine numbers would split this" in steps
    if how:
        assert how in steps
    assert not [o for o in METRICS_HOW.values() if o != how and o in steps], steps
