"""Anchor baselines: set / list / show / rm, derived bands, and the check against them."""

from __future__ import annotations

import json

import pytest
from test_triage_support import store_run, trial

from decodescope.caliber.resolve import resolve
from decodescope.cli.main import main
from decodescope.errors import UsageError
from decodescope.store.connect import open_store
from decodescope.verdict import run_spread as rs
from decodescope.verdict import thresholds as th
from decodescope.verdict.anchor import check_against
from decodescope.verdict.baseline import (
    derive_band,
    get_baseline,
    make_baseline,
    parse_band,
    save_baseline,
)
from decodescope.verdict.side_from_runs import side_from_runs
from decodescope.verdict.side_resolve import load_run

ANCHOR = "anchor-c1-out1280"


@pytest.fixture
def store(tmp_path):
    with open_store(tmp_path / "runs.sqlite") as st:
        yield st


@pytest.mark.parametrize(("text", "band"), [("96-107", (96.0, 107.0)), ("96–107", (96.0, 107.0)),
                                            ("96..107.5", (96.0, 107.5))])
def test_parse_band(text, band):
    assert parse_band(text) == band


@pytest.mark.parametrize("text", ["107-96", "x-y", "96", "0-5", "-5-5"])
def test_bad_bands_are_usage_errors(text):
    with pytest.raises(UsageError):
        parse_band(text)


def test_band_and_floor_derived_from_runs_engine_first(store):
    a = store_run(store, ANCHOR, [trial(95.0, 2.5, 40.0), trial(97.0, 2.5, 41.0)], length_decay_pct=-0.5)
    b = store_run(store, ANCHOR, [trial(99.0, 2.5, 42.0)], length_decay_pct=-1.5)
    base = make_baseline("h200", resolve(ANCHOR), [load_run(store, a), load_run(store, b)],
                         band=None, floor=None, now=1.0)
    assert base.source == "engine" and base.derived
    assert base.values == (100.0, 102.5, 105.0)
    # no store consulted: the prior run-to-run spread, said so and stored with the baseline
    assert base.spread is not None and base.spread["source"] == "prior"
    assert base.band is not None and base.band == pytest.approx(
        derive_band([100.0, 102.5, 105.0], rs.prior(0), 2))
    # the band carries the between-run term: far wider than the trials' own min..max ±2 %
    assert base.band[0] < 100.0 * (1 - th.PRIOR_RUN_SD) and base.band[1] > 105.0 * (1 + th.PRIOR_RUN_SD)
    assert base.floor == pytest.approx(base.band[0] * (1 - th.FLOOR_BELOW_BAND))
    assert base.length_decay_pct == pytest.approx(-1.0)
    assert base.run_ids == (a, b)


def test_seed_anchor_given_band_and_floor():
    base = make_baseline("seed", resolve(ANCHOR), [], band=(96.0, 107.0), floor=90.0)
    assert base.band_text() == "band 96.0–107.0, floor 90.0 tok/s (client decode rate)"
    derived_floor = make_baseline("seed", resolve(ANCHOR), [], band=(96.0, 107.0), floor=None)
    assert derived_floor.floor == pytest.approx(90.24)  # the seed's "below 90"


@pytest.mark.parametrize(("kw", "message"), [
    ({"band": None, "floor": None}, "needs --from-runs, --band or --floor"),
    ({"band": (96.0, 107.0), "floor": 100.0}, "above the band"),
])
def test_make_baseline_refuses_bad_input(kw, message):
    with pytest.raises(UsageError, match=message):
        make_baseline("x", resolve(ANCHOR), [], **kw)


def test_runs_of_another_caliber_are_refused(store):
    rid = store_run(store, "demo-code-rewrite", [trial(80.0), trial(81.0)])
    with pytest.raises(UsageError, match="not anchor-c1-out1280"):
        make_baseline("x", resolve(ANCHOR), [load_run(store, rid)], band=None, floor=None)
    missed = store_run(store, ANCHOR, [trial(80.0), trial(81.0)], caliber_status="missed")
    with pytest.raises(UsageError, match="missed its caliber"):
        make_baseline("x", resolve(ANCHOR), [load_run(store, missed)], band=None, floor=None)
    with pytest.raises(UsageError, match="bad baseline name"):
        make_baseline("42", resolve(ANCHOR), [], band=(1.0, 2.0), floor=None)


def test_cli_set_list_show_rm(store, capsys):
    r1 = store_run(store, ANCHOR, [trial(98.0), trial(101.0), trial(104.0)])
    assert main(["baseline", "set", "h200", "--caliber", ANCHOR, "--from-runs", f"{r1}",
                 "--store", store.path]) == 0
    assert "baseline h200 set: anchor-c1-out1280@1" in capsys.readouterr().out
    assert main(["baseline", "set", "seed", "--caliber", ANCHOR, "--band", "96-107", "--floor",
                 "90", "--store", store.path]) == 0
    capsys.readouterr()
    assert main(["baseline", "list", "--store", store.path, "--json"]) == 0
    names = [b["name"] for b in json.loads(capsys.readouterr().out)]
    assert names == ["h200", "seed"]
    assert main(["baseline", "show", "h200", "--store", store.path]) == 0
    shown = capsys.readouterr().out
    assert "derived from runs" in shown and "98.0, 101.0, 104.0" in shown
    assert main(["baseline", "rm", "seed", "--store", store.path]) == 0
    assert main(["baseline", "show", "seed", "--store", store.path]) == 2
    assert "no baseline named 'seed'" in capsys.readouterr().err
    assert main(["baseline", "set", "x", "--caliber", ANCHOR, "--from-runs", "a,b",
                 "--store", store.path]) == 2
    capsys.readouterr()


def _check(store, base, trials, **kw):
    rid = store_run(store, ANCHOR, trials, **kw)
    return check_against(base, side_from_runs([load_run(store, rid)]))


@pytest.mark.parametrize(("values", "status", "code"), [
    ((100.0, 101.0, 102.0), "OK", 0),
    ((93.0, 94.0, 95.0), "BELOW_BAND", 1),
    ((85.0, 86.0, 88.0), "BELOW_FLOOR", 1),
    ((115.0, 116.0, 117.0), "ABOVE_BAND", 0),  # reported, never an alarm (issue 32)
])
def test_check_statuses_and_exit_codes(store, values, status, code):
    base = make_baseline("seed", resolve(ANCHOR), [], band=(96.0, 107.0), floor=90.0)
    r = _check(store, base, [trial(v) for v in values])
    assert (r.status, r.exit_code) == (status, code)
    assert r.value == values[1]
    assert r.headline.startswith(status.replace("_", " "))


def test_check_not_comparable_cases(store):
    base = make_baseline("seed", resolve(ANCHOR), [], band=(96.0, 107.0), floor=90.0)
    r = _check(store, base, [trial(100.0), trial(101.0)],
               contamination={"flagged": True, "windows": 2, "of_windows": 2, "max_running": 2.0,
                              "in_flight": 1})
    assert (r.status, r.exit_code) == ("CONTAMINATED", 3)
    r = _check(store, base, [trial(None), trial(None)])
    assert (r.status, r.exit_code) == ("INCONCLUSIVE", 3)


def test_check_compares_length_decay_with_the_baseline_runs(store):
    base_run = store_run(store, ANCHOR, [trial(100.0), trial(102.0)], length_decay_pct=-0.4)
    base = make_baseline("b", resolve(ANCHOR), [load_run(store, base_run)], band=None, floor=None)
    same = _check(store, base, [trial(101.0), trial(100.5)], length_decay_pct=-0.9)
    row = {r.check: r for r in same.evidence}["length decay (per 1K output tokens)"]
    assert row.status == "same"
    worse = _check(store, base, [trial(101.0), trial(100.5)], length_decay_pct=-8.0)
    row = {r.check: r for r in worse.evidence}["length decay (per 1K output tokens)"]
    assert row.status == "changed" and "-8.0%" in row.result


def test_check_falls_back_to_the_other_decode_source_and_says_so(store):
    base_run = store_run(store, ANCHOR, [trial(100.0, 2.5, 40.0), trial(102.0, 2.5, 40.8)])
    base = make_baseline("b", resolve(ANCHOR), [load_run(store, base_run)], band=None, floor=None)
    assert base.source == "engine"
    r = _check(store, base, [trial(101.0), trial(101.5)])
    assert r.source == "client"
    assert {e.check for e in r.evidence} >= {"same decode source as the baseline?"}


def test_baseline_name_as_a_triage_side(store, capsys):
    r1 = store_run(store, ANCHOR, [trial(100.0, 2.5, 40.0), trial(102.0, 2.5, 40.8)])
    r2 = store_run(store, ANCHOR, [trial(101.0, 2.5, 40.4), trial(100.0, 2.5, 40.0)])
    base = make_baseline("anchor", resolve(ANCHOR), [load_run(store, r1), load_run(store, r2)],
                         band=None, floor=None)
    save_baseline(store, base)
    assert get_baseline(store, "anchor") == base
    cur = store_run(store, ANCHOR, [trial(70.0, 2.5, 28.0), trial(71.0, 2.5, 28.4)])
    code = main(["triage", str(cur), "--baseline", "anchor", "--store", store.path, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and out["label"] == "REGRESSION (step rate)"
    assert out["baseline"]["name"] == "baseline anchor" and out["baseline"]["run_ids"] == [r1, r2]
