"""Triage of engine-log windows: unknown calibers, bands, concurrency, idle windows, mixing."""

from __future__ import annotations

import dataclasses

from test_triage_support import seed_windows

from decodescope.records.window import EngineWindow
from decodescope.verdict.bands import Band
from decodescope.verdict.side import Unit
from decodescope.verdict.side_from_windows import side_from_windows
from decodescope.verdict.triage import side_notes, triage

T0 = 1_789_000_000.0


def test_same_band_slower_steps_is_a_step_rate_regression_with_unknown_caliber():
    base = side_from_windows("a", seed_windows(T0, 40, 2.6, 3.0, seed=1))
    cur = side_from_windows("b", seed_windows(T0 + 1e5, 40, 2.6, 3.0, seed=2,
                                              step_lo=29.0, step_hi=31.0))
    v = triage(base, cur)
    assert v.label == "REGRESSION (step rate)" and v.exit_code == 1
    # MTP-like k=6 windows (every step drafts) in the same built-in band: content established
    assert v.caliber.same is True and "ordinary text on both sides" in v.caliber.text
    assert "(same MAL band; log windows)" in v.headline


def test_different_concurrency_is_a_caliber_mismatch():
    base = side_from_windows("a", seed_windows(T0, 30, 2.6, 3.0, seed=1))
    cur = side_from_windows("b", seed_windows(T0 + 1e5, 30, 2.6, 3.0, seed=2, running=2))
    v = triage(base, cur)
    assert v.kind == "CALIBER_MISMATCH"
    assert "running requests differ (1 → 2)" in v.caliber.text


def test_idle_and_reset_windows_are_skipped_and_counted():
    ws = seed_windows(T0, 5, 2.6, 3.0, seed=1)
    idle = EngineWindow("log", "vllm", T0 + 50, T0 + 60, generation_tokens=0, drafts=0,
                        accepted_tokens=0, running=0)
    reset = dataclasses.replace(ws[0], flags=("reset",))
    side = side_from_windows("a", [*ws, idle, reset])
    assert len(side.units) == 5
    assert side.notes[0] == "2 idle or reset window(s) skipped"
    assert side.window_s == 10.0



def test_each_side_note_says_whose_it_is():
    """Both sides skip idle windows: said once for both; a note of one side names it."""
    ws = seed_windows(T0, 8, 2.6, 3.0, seed=1)
    idle = EngineWindow("log", "vllm", T0 + 90, T0 + 100, generation_tokens=0, drafts=0,
                        accepted_tokens=0, running=0)
    ws2 = seed_windows(T0 + 1e5, 8, 2.6, 3.0, seed=2)
    idle2 = dataclasses.replace(idle, t_start_s=T0 + 1e5 + 90, t_end_s=T0 + 1e5 + 100)
    base = dataclasses.replace(side_from_windows("a", [*ws, idle]), notes=(
        "1 idle or reset window(s) skipped", "only the baseline says this"))
    cur = side_from_windows("b", [*ws2, idle2])
    assert cur.notes[0] == "1 idle or reset window(s) skipped"
    v = triage(base, cur)
    assert v.notes[:2] == ("both sides: 1 idle or reset window(s) skipped",
                           "baseline: only the baseline says this")
    assert sum("idle or reset" in n for n in v.notes) == 1
    assert all(n.startswith(("both sides: ", "baseline: ", "current: "))
               for n in v.notes[:len(cur.notes) + 1])
    assert side_notes(("x", "y"), ("y", "z")) == ("both sides: y", "baseline: x", "current: z")
    assert side_notes((), ()) == ()


def test_one_window_is_inconclusive():
    base = side_from_windows("a", seed_windows(T0, 1, 4.0, 5.0, seed=1))
    cur = side_from_windows("b", seed_windows(T0 + 1e5, 20, 2.6, 3.0, seed=2))
    v = triage(base, cur)
    assert v.kind == "INCONCLUSIVE" and "a has 1 window" in v.headline
    assert any("calibers differ too" in line for line in v.explanation)


def test_client_only_run_against_a_log_window_is_marked_mixed():
    log = side_from_windows("log", seed_windows(T0, 20, 2.6, 3.0, seed=1))
    run = dataclasses.replace(log, name="run 7", kind="run", unit_name="trial",
                              units=tuple(Unit(f"t{i}", decode_rate=95.0 + i) for i in range(3)),
                              pooled=None)
    v = triage(log, run)
    assert v.decode_source == "mixed (engine baseline, client current)"
    rows = {r.check: r for r in v.evidence}
    assert rows["same decode source?"].status == "changed"


def test_custom_bands_decide_log_window_content():
    bands = (Band("greedy rewrite", 6.0, None), Band("prose", None, 3.5))
    base = side_from_windows("a", seed_windows(T0, 20, 6.5, 7.5, seed=1))
    cur = side_from_windows("b", seed_windows(T0 + 1e5, 20, 2.2, 2.5, seed=2))
    v = triage(base, cur, bands=bands)
    assert v.kind == "CALIBER_MISMATCH"
    assert "greedy rewrite → prose" in v.caliber.text
    # a band gap: the caliber is not established — unknown is not same: INCONCLUSIVE, and
    # MAL 6.9 → 4.7 is named as a suspected mismatch
    mid = side_from_windows("c", seed_windows(T0 + 2e5, 20, 4.5, 5.0, seed=3))
    v2 = triage(base, mid, bands=bands)
    assert v2.caliber.same is None and v2.kind == "INCONCLUSIVE"
    assert v2.cause == "caliber unknown" and "mismatch suspected" in v2.caliber.text


def test_prometheus_windows_are_named_as_such_never_as_log_windows():
    """A Prometheus side's verdict words say Prometheus windows (the side's own kind)."""
    base = side_from_windows("prom:?job=vllm@23:00..23:30", seed_windows(T0, 20, 4.0, 5.0, seed=1))
    cur = side_from_windows("prom:?job=vllm@00:00..00:30",
                            seed_windows(T0 + 1e5, 20, 4.0, 5.0, seed=2, step_lo=27.0,
                                         step_hi=29.0))
    v = triage(base, cur)
    words = " ".join([v.headline, *v.explanation, *v.next_steps])
    assert v.kind == "REGRESSION" and "Prometheus windows" in words, words
    assert "log windows" not in words, words
