"""History: change points over runs — each rule of verdict/history.py, deterministic seeds."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from test_triage_support import store_run, trial

from decodescope.fingerprint.stack import Fingerprint, Item
from decodescope.store import runs as sr
from decodescope.store.connect import open_store
from decodescope.verdict import history as hi
from decodescope.verdict import thresholds as th

A = ("box", "llamacpp", "b1", "gemma", "llama-server --draft-max 8")
B = ("box", "llamacpp", "b1", "gemma", "llama-server --draft-max 4")


def series(n: int, seed: int, *, sd: float = 0.07, step_at: int | None = None,
           step: float = 0.0, tps_at: int | None = None, tps: float = 0.0,
           stack_at: int | None = None, spikes: dict[int, float] | None = None) -> list[hi.Point]:
    """Run means: step rate 100 × e^(noise), tokens per step 6 (0.5 % noise)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ls = math.log(100.0) + rng.gauss(0.0, sd)
        lt = math.log(6.0) + rng.gauss(0.0, 0.005)
        if step_at is not None and i >= step_at:
            ls += math.log1p(step)
        if tps_at is not None and i >= tps_at:
            lt += math.log1p(tps)
        ls += math.log1p((spikes or {}).get(i, 0.0))
        out.append(hi.Point(key=f"run {i}", t=60.0 * i, decode=math.exp(ls + lt),
                            step_rate=math.exp(ls), tokens_per_step=math.exp(lt),
                            stack=B if stack_at is not None and i >= stack_at else A))
    return out


def test_stationary_noise_has_no_change_point():
    for seed in range(5):
        h = hi.detect(series(300, seed))
        assert h.changes == [], [c.to_dict() for c in h.changes]
        assert len(h.levels) == 1 and h.levels[0].runs + len(h.spikes) == 300
        assert h.levels[0].spread.source == "learned"
        assert h.levels[0].spread.sd == pytest.approx(0.07, rel=0.25)


def test_a_single_outlying_run_is_never_a_change_point():
    pts = series(60, 1, spikes={20: 0.6, 41: -0.45})
    h = hi.detect(pts)
    assert h.changes == []
    assert [pts[i].key for i in h.spikes] == ["run 20", "run 41"]
    assert any("outlying" in n for n in h.notes)
    # At either end a lone run has no second side to be judged against: still no change point.
    for at in (0, 59):
        assert hi.detect(series(60, 1, spikes={at: -0.5})).changes == []


def test_a_change_needs_a_minimum_segment_on_each_side():
    # The last two runs are 40 % lower: too short a stretch to be a level.
    pts = series(40, 2, sd=0.02, step_at=38, step=-0.4)
    assert hi.detect(pts).changes == []
    # Three runs make a segment.
    pts = series(40, 2, sd=0.02, step_at=37, step=-0.4)
    assert [c.index for c in hi.detect(pts).changes] == [37]


def test_a_stack_change_moving_the_step_rate_is_a_regression_at_the_restart():
    pts = series(80, 3, step_at=40, step=-0.12, stack_at=40)
    (c,) = hi.detect(pts).changes
    assert (c.index, c.word, c.carried_by, c.stack_changed) == (40, "REGRESSION", "step rate", True)
    assert (c.before, c.after) == ("run 39", "run 40")
    assert c.decode.rel is not None and c.decode.rel < -th.MIN_EFFECT
    assert c.decode.ci_hi is not None and c.decode.ci_hi < 0


def test_a_stack_change_without_a_rate_change_is_no_change_point():
    pts = series(80, 4, stack_at=40)
    assert hi.detect(pts).changes == []


def test_tokens_per_step_moving_without_a_stack_change_is_a_content_shift():
    pts = series(80, 5, tps_at=50, tps=-0.12)
    (c,) = hi.detect(pts).changes
    assert (c.index, c.word, c.carried_by, c.stack_changed) == (
        50, "CONTENT_SHIFT", "tokens per step", False)


def test_a_change_the_control_shows_at_the_same_time_is_environment():
    target = series(80, 6, step_at=40, step=-0.15)
    control = series(80, 7, step_at=40, step=-0.15)
    (c,) = hi.detect(target, control=control).changes
    assert c.word == "ENVIRONMENT" and c.control is not None
    # Without the control the same change is a SHIFT: no stack change seen, nothing to compare.
    (c,) = hi.detect(target).changes
    assert c.word == "SHIFT"
    # A control that moved at another time does not explain it.
    far = series(80, 7, step_at=15, step=-0.15)
    (c,) = hi.detect(target, control=far).changes
    assert c.word == "SHIFT"


def test_a_short_stretch_uses_the_prior_spread():
    pts = series(12, 8, sd=0.01, step_at=8, step=-0.5)
    h = hi.detect(pts)
    assert [c.index for c in h.changes] == [8]
    assert h.levels[1].runs == 4 and h.levels[1].spread.source == "prior"
    assert "needed to learn" in (h.levels[1].spread.why or "")


def test_too_few_runs_is_inconclusive():
    h = hi.detect(series(5, 9))
    assert h.status == "inconclusive" and "3 runs on each side" in (h.why or "")


def test_a_fleet_moving_at_once_is_named():
    hs = {f"gpu-{k}": hi.detect(series(60, 20 + k, step_at=30, step=-0.2)) for k in range(4)}
    (note,) = hi.fleet_note(hs)
    assert note.startswith("4 of 4 series moved down together")
    hs["gpu-0"] = hi.detect(series(60, 30))
    hs["gpu-1"] = hi.detect(series(60, 31))
    hs["gpu-2"] = hi.detect(series(60, 32))
    assert hi.fleet_note(hs) == []


def _fp(draft: int) -> dict:
    cmd = ["llama-server", "-m", "gemma.gguf", "--port", "8181", "--draft-max", str(draft)]
    return Fingerprint(taken_at="2026-12-02T06:00:00+00:00", url="http://127.0.0.1:8181",
                       sections={"host": {"hostname": Item.ok("box-1")},
                                 "endpoint": {"engine": Item.ok("llamacpp"),
                                              "engine_version": Item.ok("b1"),
                                              "models": Item.ok(["gemma"])},
                                 "process": {"cmdline": Item.ok(cmd)}}).to_dict()


def test_stored_runs_name_the_changed_flag(tmp_path):
    rng = random.Random(11)
    with open_store(tmp_path / "runs.sqlite") as st:
        for i in range(16):
            draft = 8 if i < 8 else 4
            mal = 6.0 if draft == 8 else 4.5
            trials = [trial(None, mal=mal * math.exp(rng.gauss(0, 0.005)),
                            step=20.0 * math.exp(rng.gauss(0, 0.03))) for _ in range(3)]
            store_run(st, "demo-code-rewrite", trials, fingerprint=_fp(draft),
                      labels={"check": "gpu-a"})
        runs = sr.list_runs(st, label=("check", "gpu-a"), limit=1000)
    pts = hi.points_from_runs(runs)
    assert len(pts) == 16 and pts[0].acceptance_metric == "MAL"
    (c,) = hi.detect(pts).changes
    assert c.index == 8 and c.word == "REGRESSION" and c.carried_by == "MAL"
    changed = " ".join(r["result"] + (r["detail"] or "") for r in c.fingerprint_changes)
    assert "--draft-max" in changed


def _window(t: float, step_hz: float, mal: float, flags: tuple[str, ...] = ()):
    from decodescope.records.window import EngineWindow

    steps = int(step_hz * 30)
    acc = int(round((mal - 1.0) * steps))
    return EngineWindow("prometheus", "vllm", t, t + 30.0, generation_tokens=steps + acc,
                        drafts=steps, draft_tokens=4 * steps, accepted_tokens=acc, running=1.0,
                        flags=flags)


def test_prometheus_windows_become_points_and_a_restart_is_a_known_place():
    from decodescope.verdict.history_store import points_from_windows

    rng = random.Random(12)
    ws = []
    for i in range(40):
        flags = ("reset",) if i == 20 else ()
        mal = (4.0 if i < 21 else 3.0) * math.exp(rng.gauss(0, 0.01))
        ws.append(_window(1000.0 + 30 * i, 40.0 * math.exp(rng.gauss(0, 0.03)), mal, flags))
    pts = points_from_windows(ws, engine="vllm", spec={"off": False, "k": 4})
    assert len(pts) == 39  # the reset window has no counts
    assert [p.restart for p in pts].index(True) == 20
    assert pts[0].decode == pytest.approx(pts[0].step_rate * pts[0].tokens_per_step, rel=0.02)
    (c,) = hi.detect(pts).changes
    assert c.index == 20 and c.carried_by in ("MAL", "tokens per step")
    assert c.origin == "restart" and c.stack_changed is None and c.word == "SHIFT"
    assert "restart" in c.label


def test_exporter_samples_and_the_tail_beyond_the_spread():
    pts = series(60, 13, step_at=30, step=-0.2, stack_at=30)
    samples = {(n, tuple(sorted(lb.items()))): v for n, lb, v in hi.change_samples(hi.detect(pts))}
    assert samples[("decodescope_change_points", ())] == 1.0
    key = (("carrier", "step rate"), ("word", "REGRESSION"))
    assert samples[("decodescope_change_regression", key)] == 1.0
    assert samples[("decodescope_change_last_ratio", key)] == pytest.approx(0.8, abs=0.05)
    assert samples[("decodescope_change_last_time_seconds", key)] == pts[30].t
    # Two newest runs 30 % down: too few for a change, a tail worth an alert; one is not.
    tail2 = series(40, 14, sd=0.03, step_at=38, step=-0.3)
    h = hi.detect(tail2)
    assert h.changes == [] and hi.tail_beyond_spread(h) == -2
    tail1 = series(40, 14, sd=0.03, step_at=39, step=-0.3)
    assert hi.tail_beyond_spread(hi.detect(tail1)) == 0


def test_a_fleet_of_stored_checks_moving_at_once_is_named_by_the_cli(tmp_path, capsys):
    import json

    from decodescope.cli.main import main

    rng = random.Random(15)
    path = tmp_path / "runs.sqlite"
    with open_store(path) as st:
        for i in range(24):
            for k in range(4):
                step = 20.0 * (0.8 if i >= 12 else 1.0) * math.exp(rng.gauss(0, 0.02))
                store_run(st, "demo-code-rewrite", [trial(None, mal=6.0, step=step * f)
                                                    for f in (0.99, 1.0, 1.01)],
                          labels={"check": f"gpu-{k}"})
    capsys.readouterr()
    code = main(["history", "check=*", "--store", str(path), "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert sorted(out["series"]) == [f"check=gpu-{k}" for k in range(4)]
    assert all(len(s["changes"]) == 1 and s["changes"][0]["word"] == "SHIFT"
               for s in out["series"].values())
    assert code == 0 and out["fleet"][0].startswith("4 of 4 series moved down together")
    # The same fleet with one of them as control: the others' change is the environment.
    code = main(["history", "check=*", "--control", "check=gpu-0", "--store", str(path)])
    text = capsys.readouterr().out
    assert code == 0 and text.count("ENVIRONMENT:") == 3 and "Fleet:" not in text
    assert main(["history", "check=*", "--store", str(path), "--format", "html",
                 "-o", str(tmp_path / "f.html")]) == 0
    page = (tmp_path / "f.html").read_text()
    assert page.count("class=\"plot-svg\"") == 4 and "moved down together" in page


def _stored(run_id: int, t: float, fingerprint: dict) -> Any:
    from decodescope.records.stored_run import StoredRun

    return StoredRun(id=run_id, created_at=t, finished_at=t + 1, kind="probe", status="complete",
                     url="http://127.0.0.1:8181", model="m", engine="llamacpp", simulated=False,
                     caliber_ref=None, caliber_identity=None, caliber=None, labels={},
                     warnings=[], fingerprint=fingerprint, result=None, meta={})


def test_prometheus_changes_take_the_stack_diff_from_stored_fingerprints():
    from dataclasses import replace

    pts = [replace(p, stack=None, restart=(i == 30))
           for i, p in enumerate(series(60, 16, tps_at=30, tps=-0.2))]
    h = hi.detect(pts)
    (c,) = h.changes
    assert c.word == "SHIFT" and c.origin == "restart" and c.stack_changed is None
    runs = [_stored(1, pts[10].t, _fp(8)), _stored(2, pts[29].t - 1, _fp(8)),
            _stored(3, pts[31].t, _fp(4)), _stored(4, pts[50].t, _fp(4))]
    (c,) = hi.with_fingerprints(h, runs).changes
    assert c.word == "REGRESSION" and c.stack_changed is True
    assert c.fingerprints_from == ("run 2", "run 3")
    assert "--draft-max" in " ".join(r["result"] + (r["detail"] or "")
                                     for r in c.fingerprint_changes)
    # The same launch on both sides: the restart changed nothing the fingerprint sees.
    same = [_stored(2, pts[29].t - 1, _fp(8)), _stored(3, pts[31].t, _fp(8))]
    (c,) = hi.with_fingerprints(h, same).changes
    assert c.stack_changed is False and c.word == "CONTENT_SHIFT"
