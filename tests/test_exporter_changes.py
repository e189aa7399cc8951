"""The exporter runs the change-point detector over each check's stored runs and serves
`decodescope_change_*`: a stack change that moves the decode rate is a confirmed REGRESSION
(with its carrier); a single slow run is no change (no series that an alert could fire on)."""

from __future__ import annotations

import math
import random
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from test_triage_support import store_run, trial

from decodescope.caliber.resolve import resolve
from decodescope.exporter import Exporter, Outcome, parse_config
from decodescope.exporter.changes import stored_changes
from decodescope.fingerprint.stack import Fingerprint, Item
from decodescope.store import runs as sr
from decodescope.store.connect import open_store

CAL = "demo-code-rewrite"


def _fp(draft: int) -> dict[str, Any]:
    cmd = ["llama-server", "-m", "gemma.gguf", "--port", "8181", "--draft-max", str(draft)]
    return Fingerprint(taken_at="2026-12-02T06:00:00+00:00", url="http://127.0.0.1:8181",
                       sections={"endpoint": {"engine": Item.ok("llamacpp"),
                                              "engine_version": Item.ok("b1")},
                                 "process": {"cmdline": Item.ok(cmd)}}).to_dict()


def _history(st: Any, check: str, n: int, seed: int, *, step_at: int | None = None,
             slow_at: int | None = None) -> None:
    """n stored runs of `check`: MAL 6 (step change: draft 8 -> 4 and MAL 4.5 from step_at
    on), step rate 20/s with 3 % noise; `slow_at`: one run 35 % slower, nothing else changed."""
    rng = random.Random(seed)
    for i in range(n):
        changed = step_at is not None and i >= step_at
        mal = 4.5 if changed else 6.0
        f = 0.65 if i == slow_at else 1.0
        trials = [trial(None, mal=mal * math.exp(rng.gauss(0, 0.005)),
                        step=20.0 * f * math.exp(rng.gauss(0, 0.03))) for _ in range(3)]
        store_run(st, CAL, trials, fingerprint=_fp(4 if changed else 8), labels={"check": check})


def _metrics(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.startswith("decodescope_change_"):
                out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def _one(m: dict[str, list[tuple[dict[str, str], float]]], name: str,
         check: str) -> tuple[dict[str, str], float] | None:
    rows = [(lb, v) for lb, v in m.get(name, []) if lb["check"] == check]
    assert len(rows) <= 1
    return rows[0] if rows else None


def test_a_stored_step_change_is_served_and_a_single_slow_run_is_not(tmp_path):
    path = str(tmp_path / "runs.sqlite")
    with open_store(path) as st:
        _history(st, "gpu-a", 20, 1, step_at=10)
        _history(st, "gpu-b", 20, 2, slow_at=19)  # the newest run is the slow one
        _history(st, "gpu-c", 20, 3, slow_at=9)
        newest = {c: sr.list_runs(st, label=("check", c), limit=1)[0] for c in
                  ("gpu-a", "gpu-b", "gpu-c")}
        t_change = sorted(sr.list_runs(st, label=("check", "gpu-a"), limit=100),
                          key=lambda r: r.id)[10].created_at
    ident = resolve(CAL).identity
    cfg = parse_config({"exporter": {"listen": "127.0.0.1:0", "store": path},
                        "check": [{"name": c, "baseline": "anchor", "url": f"http://{c}:8000"}
                                  for c in newest]})

    def runner(spec: Any, store: str | None) -> Outcome:
        # the worker's side of it: the run is stored, the outcome names it
        assert store == path
        return Outcome(1.0e9, 1.0, verdict="OK", exit_code=0, decode_rate=100.0,
                       source="engine", run_id=newest[spec.name].id, caliber_identity=ident)

    log: list[str] = []
    exp = Exporter(cfg, runner=runner, log=log.append)
    exp.run_once()
    assert not any("detection failed" in line for line in log), log
    m = _metrics(exp.metrics_text())

    # the step change: one confirmed change, a REGRESSION of the stack carried by MAL
    assert _one(m, "decodescope_change_history_runs", "gpu-a")[1] == 20.0  # type: ignore[index]
    assert _one(m, "decodescope_change_points", "gpu-a")[1] == 1.0  # type: ignore[index]
    lab, v = _one(m, "decodescope_change_regression", "gpu-a")  # type: ignore[misc]
    assert v == 1.0 and lab["word"] == "REGRESSION" and lab["carrier"] == "MAL"
    lab, t = _one(m, "decodescope_change_last_time_seconds", "gpu-a")  # type: ignore[misc]
    assert t == t_change and lab["baseline"] == "anchor" and lab["url"] == "http://gpu-a:8000"
    _, ratio = _one(m, "decodescope_change_last_ratio", "gpu-a")  # type: ignore[misc]
    assert 0.7 < ratio < 0.8  # MAL 6 -> 4.5

    # one slow run (newest, or in the middle): no change point, no tail, nothing to alert on
    for check in ("gpu-b", "gpu-c"):
        assert _one(m, "decodescope_change_history_runs", check)[1] == 20.0  # type: ignore[index]
        assert _one(m, "decodescope_change_points", check)[1] == 0.0  # type: ignore[index]
        assert _one(m, "decodescope_change_tail_runs", check)[1] == 0.0  # type: ignore[index]
        for name in ("regression", "last_time_seconds", "last_ratio"):
            assert _one(m, "decodescope_change_" + name, check) is None


def test_no_stored_run_no_detection_and_a_short_history_is_no_data(tmp_path):
    path = str(tmp_path / "runs.sqlite")
    with open_store(path) as st:
        _history(st, "gpu-a", 4, 4)
        rid = sr.list_runs(st, label=("check", "gpu-a"), limit=1)[0].id
    ident = resolve(CAL).identity
    cfg = parse_config({"exporter": {"listen": "127.0.0.1:0", "store": path},
                        "check": [{"name": "gpu-a", "baseline": "anchor",
                                   "url": "http://a:8000"}]})
    # a run that stored nothing (no run id): the detector does not run
    exp = Exporter(cfg, runner=lambda spec, st: Outcome(1.0e9, 1.0, verdict="OK", exit_code=0))
    exp.run_once()
    assert _metrics(exp.metrics_text()) == {}
    # four runs: too few for a change (3 on each side): the run count, no zero change points
    exp = Exporter(cfg, runner=lambda spec, st: Outcome(1.0e9, 1.0, verdict="OK", exit_code=0,
                                                        run_id=rid, caliber_identity=ident))
    exp.run_once()
    m = _metrics(exp.metrics_text())
    assert list(m) == ["decodescope_change_history_runs"]
    assert m["decodescope_change_history_runs"][0][1] == 4.0
    ch = stored_changes(path, "gpu-a", ident)
    assert ch.status == "inconclusive" and ch.runs == 4


def test_a_label_filter_reads_the_newest_runs_of_that_label_only(tmp_path):
    with open_store(tmp_path / "runs.sqlite") as st:
        _history(st, "gpu-a", 8, 5)
        _history(st, "gpu-b", 8, 6)
        store_run(st, CAL, [trial(90.0)], labels={"team.name": "x", "check": "gpu-a"})
        all_a = [r.id for r in sr.list_runs(st, label=("check", "gpu-a"), limit=100)]
        newest = [r.id for r in sr.list_runs(st, label=("check", "gpu-a"), limit=3)]
        dotted = sr.list_runs(st, label=("team.name", "x"), limit=100)  # not a SQL word: Python
        ident = resolve(CAL).identity
        at_cal = sr.list_runs(st, caliber=ident, label=("check", "gpu-b"), limit=100)
    assert len(all_a) == 9 and all_a == sorted(all_a, reverse=True)
    assert newest == all_a[:3]
    assert [r.labels["check"] for r in dotted] == ["gpu-a"]
    assert len(at_cal) == 8 and all(r.labels["check"] == "gpu-b" for r in at_cal)
