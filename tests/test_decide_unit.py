"""The decision and the per-trial span, as pure functions (verdict/decide.py, analysis/span.py)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from decodescope.analysis.span import MAX_SPAN_ERROR, trial_span
from decodescope.telemetry.prometheus import Scrape
from decodescope.verdict.side import Side, Unit
from decodescope.verdict.stats import holm
from decodescope.verdict.triage import triage


def side(name: str, decode: list[float], mal: list[float | None] | None = None,
         step: list[float | None] | None = None, tps: list[float | None] | None = None) -> Side:
    n = len(decode)
    mal = mal or [None] * n
    step = step or [None] * n
    tps = tps or [None] * n
    units = tuple(Unit(f"t{i}", decode_rate=decode[i], engine_decode_rate=decode[i], mal=mal[i],
                       step_rate=step[i], tokens_per_step=tps[i] if tps[i] else mal[i])
                  for i in range(n))
    return Side(name, "run", "trial", units, name, caliber_ref="c@1", caliber_identity="abc",
                concurrency=1)


def test_mal_alone_moving_is_a_note_under_no_change():
    """The unchanged-server case: MAL +4 % beyond noise, decode not significant."""
    b = side("b", [100.0, 103.0, 97.0, 101.0], mal=[3.00, 3.01, 2.99, 3.00],
             step=[33.3, 34.2, 32.4, 33.7])
    c = side("c", [101.0, 98.0, 102.0, 99.0], mal=[3.12, 3.13, 3.11, 3.12],
             step=[32.4, 31.3, 32.8, 31.7])
    v = triage(b, c)
    assert v.kind == "NO_CHANGE", v.headline
    assert any("a component moved, decode did not" in n for n in v.notes)
    assert v.exit_code == 0


def test_speculation_off_with_faster_steps_is_a_regression_named_so():
    """The H200 case: 862 → 542 tok/s, step rate up, MAL gone."""
    b = side("b", [860.0, 865.0, 858.0], mal=[3.0, 3.01, 2.99], step=[287.0, 288.0, 286.0])
    c = side("c", [540.0, 545.0, 541.0], step=[540.0, 545.0, 541.0], tps=[1.0, 1.0, 1.0])
    v = triage(b, c)
    assert v.label == "REGRESSION (speculative decoding off)", v.headline
    assert v.exit_code == 1
    assert "MAL is 1 by definition" in v.headline


def test_a_component_against_the_decode_direction_does_not_name_it():
    # decode down, step rate up a lot, tokens per step down more: acceptance carries it
    b = side("b", [100.0, 101.0, 99.0], mal=[4.0, 4.02, 3.98], step=[25.0, 25.1, 24.9])
    c = side("c", [70.0, 71.0, 69.5], mal=[2.0, 2.01, 1.99], step=[35.0, 35.3, 34.9])
    v = triage(b, c)
    assert v.label == "REGRESSION (acceptance)"


def test_unmeasured_step_rate_is_named_by_the_identity():
    b = side("b", [100.0, 101.0, 99.0], mal=[4.0, 4.02, 3.98])
    c = side("c", [70.0, 71.0, 69.5], mal=[4.01, 3.99, 4.0])
    v = triage(b, c)
    assert v.label == "REGRESSION (step rate)", v.headline


def test_holm_step_down():
    assert holm([0.01, 0.04]) == [True, True]
    assert holm([0.03, 0.04]) == [False, False]  # 0.03 > 0.05 / 2
    assert holm([0.001, None]) == [True, False]


def _scrapes(rate_tps: float, tps: float, t0: float, t1: float, dt: float,
             latency: float = 0.002) -> list[Scrape]:
    """An engine generating `rate_tps` tokens/s from t0 to t1, in steps of `tps` tokens,
    scraped every dt with the given latency (counters read at the midpoint)."""
    out = []
    t = t0 - 0.5
    step_s = tps / rate_tps
    while t < t1 + 0.5:
        mid = t + latency / 2
        steps = math.floor(max(0.0, min(mid, t1) - t0) / step_s)
        gen = steps * tps
        acc = steps * (tps - 1)
        out.append(Scrape(t, t, "vllm", {"generation_tokens": gen, "accepted_tokens": acc,
                                         "drafts": steps, "draft_tokens": 3 * steps},
                          {"running": 1.0 if t0 <= mid <= t1 else 0.0}, t_done_s=t + latency))
        t += dt
    return out


def test_span_divides_by_own_requests_not_the_gauge():
    sc = _scrapes(400.0, 4.0, 10.0, 14.0, 0.1)
    sp = trial_span(sc, (10.05, 13.95), [(10.0, 14.0)])
    assert sp is not None and sp.withheld is None
    assert sp.decode_rate == pytest.approx(400.0, rel=0.01)
    assert sp.step_rate == pytest.approx(100.0, rel=0.01)
    assert sp.mal == pytest.approx(4.0) and sp.tokens_per_step == pytest.approx(4.0)


def test_a_span_too_coarse_is_withheld_not_scaled():
    sc = _scrapes(400.0, 4.0, 10.0, 10.5, 1.0)
    sp = trial_span(sc, (10.02, 10.48), [(10.0, 10.5)])
    assert sp is not None and sp.decode_rate is None and sp.withheld
    assert "too coarse" in sp.withheld


def test_a_slow_scrape_bounds_the_error_and_withholds():
    sc = _scrapes(400.0, 4.0, 10.0, 11.0, 0.1, latency=0.05)
    sp = trial_span(sc, (10.0, 11.0), [(10.0, 11.0)])
    assert sp is not None and sp.error_bound is not None
    assert sp.error_bound > MAX_SPAN_ERROR and sp.decode_rate is None


def test_stalls_are_cut_out_of_the_span():
    # 400 tok/s from 10 to 12 and from 14 to 16, a 2 s stall in between
    a = _scrapes(400.0, 4.0, 10.0, 12.0, 0.1)
    b = _scrapes(400.0, 4.0, 14.0, 16.0, 0.1)
    base = a[-1].counters
    merged = [s for s in a if s.t_s < 13.0] + [
        Scrape(s.t_s, s.t_s, "vllm", {k: v + base[k] for k, v in s.counters.items()},
               s.gauges, t_done_s=s.t_done_s) for s in b if s.t_s >= 13.0]
    sp = trial_span(merged, (10.05, 15.95), [(10.0, 16.0)], stalls=[(12.0, 14.0)])
    assert sp is not None and sp.runs == 2
    assert sp.decode_rate == pytest.approx(400.0, rel=0.02)


def test_bursts_of_one_token_chunks_are_not_stalls():
    """llama.cpp with speculation streams a step's tokens as one chunk each, microseconds
    apart, then waits a step: the steps are not stalls; a 2 s pause is."""
    from decodescope.records.request_metrics import stall_gaps

    pts, t = [], 0.0
    for step in range(60):
        for _ in range(6):
            pts.append((t, 1, False))
            t += 0.00002
        t += 0.13 if step != 30 else 2.0
    stalls = stall_gaps(pts)
    assert len(stalls) == 1 and stalls[0][1] - stalls[0][0] > 1.9


def test_a_too_wide_engine_interval_yields_to_the_client_it_contains():
    """Spec off on vLLM: one side kept two engine spans far apart (one coarse), so the
    engine's interval is too wide to decide; the client's three trials agree with it and
    decide. An engine interval that does not hold the client's estimate keeps the engine."""
    import dataclasses

    from decodescope.verdict.triage import CLIENT_NARROWER

    b = side("b", [144.0, 146.0, 143.0], mal=[3.2, 3.21, 3.19], step=[45.0, 45.5, 44.8])
    c = side("c", [52.0, 52.5, 51.8], step=[52.0, 52.5, 51.8], tps=[1.0, 1.0, 1.0])
    wild = (30.0, 150.0, None)  # two engine spans, far apart; the third withheld
    units = tuple(dataclasses.replace(u, engine_decode_rate=e) for u, e in zip(c.units, wild, strict=True))
    c = dataclasses.replace(c, units=units)
    v = triage(b, c)
    assert v.decode_source == CLIENT_NARROWER
    assert v.kind == "REGRESSION" and v.changes["decode"].status == "down", v.headline
    # the client's estimate outside the engine's (narrow-enough) interval: the engine stands
    far = tuple(dataclasses.replace(u, engine_decode_rate=e)
                for u, e in zip(c.units, (140.0, 141.0, 139.0), strict=True))
    v2 = triage(b, dataclasses.replace(c, units=far))
    assert v2.decode_source == "engine"


def _with_stalls(s: Side, shares: list[float]) -> Side:
    units = tuple(dataclasses.replace(u, stall_time_share=v) for u, v in zip(s.units, shares,
                                                                            strict=True))
    hit = [v for v in shares if v > 0]
    return dataclasses.replace(s, units=units, stalls={
        "count": len(hit), "requests": len(shares), "min_s": 0.08, "max_s": 0.08,
        "time_share": sum(shares) / len(shares)})


def test_a_pause_in_one_trial_is_a_note_not_a_regression():
    """What a busy host did to an unchanged simulator: one trial of four paused 80 ms (8 % of
    that side's steady state on average) while the decode rate between stalls held."""
    decode = [100.0, 100.5, 99.5, 100.2]
    b = _with_stalls(side("b", decode), [0.0, 0.0, 0.0, 0.0])
    c = _with_stalls(side("c", decode), [0.32, 0.0, 0.0, 0.0])
    v = triage(b, c)
    assert v.kind == "NO_CHANGE", v.headline
    assert any("stalls in 1 of 4 trials of c" in n and "rerun" in n for n in v.notes), v.notes


def test_stalls_that_recur_are_a_regression_named_stalls():
    decode = [100.0, 100.5, 99.5, 100.2]
    b = _with_stalls(side("b", decode), [0.0, 0.0, 0.0, 0.0])
    c = _with_stalls(side("c", decode), [0.08, 0.07, 0.09, 0.08])
    v = triage(b, c)
    assert (v.kind, v.cause) == ("REGRESSION", "stalls"), v.headline
    # ... even when the rate between stalls is too noisy to decide: the pauses are certain
    noisy = side("c", [60.0, 140.0, 80.0, 120.0])
    v = triage(b, _with_stalls(noisy, [0.08, 0.07, 0.09, 0.08]))
    assert (v.kind, v.cause) == ("REGRESSION", "stalls"), v.headline
    assert any("could not be decided" in n for n in v.notes), v.notes


def test_stalls_in_most_trials_but_uneven_are_inconclusive():
    decode = [100.0, 100.5, 99.5, 100.2]
    b = _with_stalls(side("b", decode), [0.0, 0.0, 0.0, 0.0])
    v = triage(b, _with_stalls(side("c", decode), [0.08, 0.07, 0.0, 0.09]))
    assert (v.kind, v.cause) == ("INCONCLUSIVE", "stalls within noise"), v.headline
    assert "paused" in v.headline and v.exit_code == 3
    # two of four is not most: a one-off, a note under NO_CHANGE
    v2 = triage(b, _with_stalls(side("c", decode), [0.16, 0.0, 0.0, 0.16]))
    assert v2.kind == "NO_CHANGE" and any("rerun" in n for n in v2.notes), v2.notes
