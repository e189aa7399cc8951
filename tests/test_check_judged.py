"""`check` is judged against the anchor's stored runs under the anchor stack's run-to-run spread
(issue 32, item 2): the band carries the spread (learned or the prior, said), an improvement is
reported, never alarmed, a regression beyond the spread alarms, a user's floor is absolute."""

from __future__ import annotations

import json

import pytest
from test_run_spread import fp as fingerprint_of
from test_triage_support import store_run, trial

from decodescope.caliber.resolve import resolve
from decodescope.cli.main import main
from decodescope.store.connect import open_store
from decodescope.verdict import run_spread as rs
from decodescope.verdict import thresholds as th
from decodescope.verdict.anchor import check_against, judge_anchor
from decodescope.verdict.baseline import derive_band, get_baseline, make_baseline, save_baseline
from decodescope.verdict.side_from_runs import side_from_runs
from decodescope.verdict.side_resolve import load_run

ANCHOR = "anchor-c1-out1280"
# five anchor runs of three trials, run means within ±1 %: a learned spread of about 1 %
RUN_LEVELS = (100.0, 101.0, 99.0, 100.5, 99.5)


@pytest.fixture
def store(tmp_path):
    with open_store(tmp_path / "runs.sqlite") as st:
        yield st


def _runs(store, levels, fp=True) -> list[int]:
    return [store_run(store, ANCHOR, [trial(x * 0.995), trial(x), trial(x * 1.005)],
                      fingerprint=fingerprint_of() if fp else None) for x in levels]


def _set(store, ids, capsys, *extra) -> dict:
    capsys.readouterr()
    assert main(["baseline", "set", "anchor", "--caliber", ANCHOR, "--from-runs",
                 ",".join(map(str, ids)), "--store", store.path, "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def _check(store, level, fp=True):
    base = get_baseline(store, "anchor")
    assert base is not None
    rid = store_run(store, ANCHOR, [trial(level * 0.995), trial(level), trial(level * 1.005)],
                    fingerprint=fingerprint_of() if fp else None)
    side = side_from_runs([load_run(store, rid)])
    return check_against(base, side, judged=judge_anchor(store, base, side))


def test_the_band_carries_the_learned_spread_or_the_prior_and_says_which(store, capsys):
    learned = _set(store, _runs(store, RUN_LEVELS), capsys)
    assert learned["spread"]["source"] == "learned" and learned["spread"]["runs"] == 5
    lo, hi = learned["band"]
    # learned ≈ 1 %: a band of a few % — wider than the trials' own ±0.5 %, far narrower
    # than under the prior
    assert 0.90 < lo / 100.0 < 0.99 and 1.01 < hi / 100.0 < 1.10
    one = _set(store, _runs(store, (100.0,), fp=False), capsys)
    assert one["spread"]["source"] == "prior" and "conservative prior" in one["spread"]["text"]
    plo, phi = one["band"]
    # one run of three trials: the prior's between-run term, not ±2 % (issue 32)
    assert plo < 100.0 * (1 - th.PRIOR_RUN_SD) and phi > 100.0 * (1 + th.PRIOR_RUN_SD)
    assert (phi - plo) > 2 * (hi - lo)
    assert one["band"] == pytest.approx(list(derive_band(one["values"], rs.prior(0), 1)))
    assert main(["baseline", "show", "anchor", "--store", store.path]) == 0
    assert "conservative prior" in capsys.readouterr().out


def test_no_change_improvement_and_regression_under_a_learned_spread(store, capsys):
    _set(store, _runs(store, RUN_LEVELS), capsys)
    ok = _check(store, 100.2)
    assert (ok.status, ok.exit_code) == ("OK", 0), ok.headline
    assert ok.spread is not None and ok.spread.source == "learned"
    assert any("learned from the anchor stack" in n and "stored with the baseline" in n
               for n in ok.notes), ok.notes
    up = _check(store, 112.0)  # the anchor moved up: reported, never an alarm
    assert (up.status, up.exit_code) == ("ABOVE_BAND", 0), up.headline
    assert "re-baseline if intended" in up.headline and "not an alarm" in up.headline
    assert up.verdict is not None and up.verdict.kind == "IMPROVEMENT"
    down = _check(store, 92.0)  # 8 % down: beyond a 1 % spread
    assert down.exit_code == 1 and down.status in ("BELOW_BAND", "BELOW_FLOOR"), down.headline
    assert down.verdict is not None and down.verdict.kind == "REGRESSION"
    assert "REGRESSION against the anchor's runs" in down.headline
    far = _check(store, 70.0)
    assert (far.status, far.exit_code) == ("BELOW_FLOOR", 1)


def test_the_same_drop_is_not_an_alarm_under_the_prior(store, capsys):
    """8 % down against one anchor run (the prior, 7 %): not beyond noise — undecided, exit 3,
    with what would decide it; the issue's ±2 % band alarmed on less."""
    _set(store, _runs(store, (100.0,), fp=False), capsys)
    r = _check(store, 92.0, fp=False)
    assert (r.status, r.exit_code) == ("INCONCLUSIVE", 3), r.headline
    assert r.spread is not None and r.spread.source == "prior"
    assert any("runs per side" in n for n in r.notes), r.notes
    small_up = _check(store, 102.8, fp=False)  # the issue's +2.8 %: never an alarm
    assert small_up.exit_code != 1


def test_a_user_floor_is_absolute(store, capsys):
    _set(store, _runs(store, (100.0,), fp=False), capsys, "--floor", "95")
    base = get_baseline(store, "anchor")
    assert base is not None and base.floor_given and base.floor == 95.0
    r = _check(store, 94.0, fp=False)  # within noise for the judge, under the user's floor
    assert (r.status, r.exit_code) == ("BELOW_FLOOR", 1), r.headline
    assert r.verdict is not None and r.verdict.kind != "REGRESSION"
    assert "under the user's floor" in r.headline


def test_a_baseline_stored_before_spreads_learns_it_at_check_time(store, capsys):
    ids = _runs(store, RUN_LEVELS)
    runs = [load_run(store, i) for i in ids]
    b = make_baseline("anchor", resolve(ANCHOR), runs, band=None, floor=None)
    save_baseline(store, type(b)(**{**b.__dict__, "spread": None}))  # as an older store holds it
    r = _check(store, 100.0)
    assert r.spread is not None and r.spread.source == "learned"
    assert r.status == "OK", r.headline


def test_a_run_with_foreign_load_cannot_anchor(store):
    from decodescope.errors import UsageError

    rid = store_run(store, ANCHOR, [trial(100.0), trial(101.0)],
                    contamination={"flagged": True, "windows": 2, "of_windows": 2,
                                   "max_running": 2.0, "in_flight": 1})
    with pytest.raises(UsageError, match="foreign load"):
        make_baseline("x", resolve(ANCHOR), [load_run(store, rid)], band=None, floor=None)
