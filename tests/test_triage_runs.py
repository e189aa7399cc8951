"""Triage between stored runs: every verdict, its cause, evidence, next step and exit code."""

from __future__ import annotations

import json

import pytest
from test_triage_support import fingerprint, store_run, trial

from decodescope.cli.main import main
from decodescope.exitcodes import ExitCode
from decodescope.store.connect import open_store
from decodescope.verdict import EXIT_CODES, for_verdict
from decodescope.verdict.side_resolve import resolve_side
from decodescope.verdict.triage import triage

CAL = "demo-code-rewrite"


@pytest.fixture
def store(tmp_path):
    with open_store(tmp_path / "runs.sqlite") as st:
        yield st


def _triage(store, cur: int, base: int, *extra: str):
    # These runs stand alone in their store: a declared dedicated-server spread (1 %) instead
    # of the conservative prior the store would give (tests/test_run_spread.py covers that)
    return main(["triage", str(cur), "--baseline", str(base), "--store", store.path,
                 "--run-spread", "1", *extra])


def _json(store, cur, base, capsys, *extra):
    code = _triage(store, cur, base, "--json", *extra)
    return code, json.loads(capsys.readouterr().out)


def test_exit_codes_per_verdict_are_the_documented_api():
    assert {k: int(v) for k, v in EXIT_CODES.items()} == {
        "NO_CHANGE": 0, "IMPROVEMENT": 0, "REGRESSION": 1, "CALIBER_MISMATCH": 3,
        "INCONCLUSIVE": 3, "CONTAMINATED": 3}
    assert for_verdict("REGRESSION") is ExitCode.REGRESSION
    with pytest.raises(ValueError):
        for_verdict("MAYBE")


def test_step_rate_regression_with_cmdline_in_evidence(store, capsys):
    base = store_run(store, CAL, [trial(86 + d, 7.0, 12.3 + d / 7) for d in (0, 0.5, -0.4)],
                     fingerprint=fingerprint(threads=2))
    cur = store_run(store, CAL, [trial(52 + d, 7.0, 7.4 + d / 7) for d in (0, 0.3, -0.2)],
                    fingerprint=fingerprint(threads=1))
    code, out = _json(store, cur, base, capsys)
    assert code == 1
    assert out["label"] == "REGRESSION (step rate)"
    assert out["changes"]["step_rate"]["status"] == "down"
    assert out["changes"]["mal"]["status"] == "not_significant"
    rows = {r["check"]: r for r in out["evidence"]}
    assert rows["same launch cmdline?"]["status"] == "changed"
    assert "-t 2 → -t 1" in rows["same launch cmdline?"]["result"]
    assert rows["same caliber?"]["status"] == "same"
    assert out["decomposition"]["share_step"] > 0.9


def test_acceptance_regression(store, capsys):
    base = store_run(store, CAL, [trial(None, 3.0, 20.0 + d) for d in (0, 0.2, -0.2)])
    cur = store_run(store, CAL, [trial(None, 2.0, 22.0 + d) for d in (0, 0.2, -0.2)])
    code, out = _json(store, cur, base, capsys)
    assert code == 1 and out["label"] == "REGRESSION (acceptance)"
    assert out["changes"]["mal"]["rel"] == pytest.approx(-1 / 3)
    assert out["changes"]["step_rate"]["status"] == "up"  # shorter drafts verify faster
    assert any("speculative" in s for s in out["next_steps"])


def test_improvement_exits_zero(store, capsys):
    base = store_run(store, CAL, [trial(None, 3.0, 20.0 + d) for d in (0, 0.2, -0.2)])
    cur = store_run(store, CAL, [trial(None, 3.0, 26.0 + d) for d in (0, 0.2, -0.2)])
    code, out = _json(store, cur, base, capsys)
    assert code == 0 and out["label"] == "IMPROVEMENT (step rate)"


def test_no_change_says_not_significant(store, capsys):
    base = store_run(store, CAL, [trial(86 + d, 7.0 + d / 50, 12.3 + d / 9) for d in (0, 0.6, -0.5)])
    cur = store_run(store, CAL, [trial(86 + d, 7.0 + d / 50, 12.3 + d / 9) for d in (0.3, -0.4, 0.1)])
    code = _triage(store, cur, base)
    text = capsys.readouterr().out
    assert code == 0
    assert text.startswith("NO CHANGE") and "not significant" in text.splitlines()[0]
    assert "exit 0" in text.splitlines()[0]


def test_caliber_mismatch_lists_elements_and_decomposes(store, capsys):
    base = store_run(store, "demo-code-rewrite", [trial(87 + d, 7.0 + d / 10, 12.4) for d in (0, 1, -1)])
    cur = store_run(store, "demo-varied-prose", [trial(60 + d, 2.3 + d / 30, 26.0) for d in (0, 1, -1)])
    code, out = _json(store, cur, base, capsys)
    assert code == 3 and out["verdict"] == "CALIBER_MISMATCH"
    diff = {r["element"]: r for r in out["caliber"]["rows"] if not r["same"]}
    assert diff["content class"]["baseline"] == "code" and diff["content class"]["current"] == "text"
    assert "temperature" in diff and "caliber" in diff
    assert out["decomposition"]["share_mal"] > 1.0  # MAL more than explains it; step rate rose
    assert "--caliber demo-code-rewrite@1" in "\n".join(out["next_steps"])
    _triage(store, cur, base)
    text = capsys.readouterr().out
    assert "Caliber, element by element" in text and "≠ content class" in text


def test_one_trial_is_inconclusive_and_says_what_would_decide(store, capsys):
    base = store_run(store, CAL, [trial(86.0, 7.0, 12.3)])
    cur = store_run(store, CAL, [trial(50.0, 7.0, 7.1), trial(51.0, 7.0, 7.3)])
    code, out = _json(store, cur, base, capsys)
    assert code == 3 and out["verdict"] == "INCONCLUSIVE"
    assert "has 1 trial" in out["headline"] and "≥ 2 per side" in out["headline"]
    assert any("--trials 3" in s for s in out["next_steps"])


def test_noisy_runs_are_inconclusive_with_trials_needed(store, capsys):
    base = store_run(store, CAL, [trial(v) for v in (80.0, 50.0, 110.0)])
    cur = store_run(store, CAL, [trial(v) for v in (100.0, 60.0, 75.0)])
    code, out = _json(store, cur, base, capsys)
    assert code == 3 and out["verdict"] == "INCONCLUSIVE" and out["cause"] == "noise"
    assert out["trials_needed"] is not None and out["trials_needed"] > 3
    assert f"≥ {out['trials_needed']} trials per side" in " ".join(out["explanation"])
    assert any(f"--trials {out['trials_needed']}" in s for s in out["next_steps"])


def test_client_only_regression_says_the_split_is_unknown(store, capsys):
    base = store_run(store, CAL, [trial(v) for v in (86.0, 86.5, 85.7)])
    cur = store_run(store, CAL, [trial(v) for v in (70.0, 70.4, 69.8)])
    code, out = _json(store, cur, base, capsys)
    assert code == 1 and out["label"] == "REGRESSION (decode rate)"
    assert out["decode_source"] == "client"
    assert "unknown" in out["headline"]
    rows = {r["check"]: r for r in out["evidence"]}
    assert rows["MAL changed?"]["status"] == "unknown"
    assert any("/metrics" in s for s in out["next_steps"])


def test_contaminated_run(store, capsys):
    base = store_run(store, CAL, [trial(86 + d, 7.0, 12.3) for d in (0, 1, -1)])
    cur = store_run(store, CAL, [trial(40 + d, 7.0, 5.7) for d in (0, 1, -1)],
                    contamination={"flagged": True, "windows": 3, "of_windows": 4,
                                   "max_running": 3.0, "in_flight": 1})
    code, out = _json(store, cur, base, capsys)
    assert code == 3 and out["verdict"] == "CONTAMINATED"
    assert "3.0 requests running or queued" in out["headline"]


def test_labels_last_and_markdown(store, capsys):
    base = store_run(store, CAL, [trial(86 + d, 7.0, 12.3 + d / 7) for d in (0, 0.5, -0.4)],
                     labels={"tag": "before"})
    store_run(store, CAL, [trial(52 + d, 7.0, 7.4 + d / 7) for d in (0, 0.3, -0.2)],
              labels={"tag": "after"})
    code = main(["triage", "last", "--baseline", "tag=before", "--store", store.path,
                 "--format", "md"])
    md = capsys.readouterr().out
    assert code == 1
    assert md.startswith("## REGRESSION (step rate)")
    assert "| caliber | decode tokens/s | MAL | source |" in md
    assert f"run {base}: probe" in md and "label tag=before" in md


def test_min_effect_option_changes_the_verdict(store, capsys):
    base = store_run(store, CAL, [trial(None, 7.0, 12.0 + d) for d in (0, 0.01, -0.01)])
    cur = store_run(store, CAL, [trial(None, 7.0, 11.7 + d) for d in (0, 0.01, -0.01)])  # −2.5 %
    assert _triage(store, cur, base) == 0
    # tight trials, but the default between-run spread (1 %) makes ±2.8 % the floor of the
    # interval: −2.5 % is not beyond noise; with no between-run term it is
    assert _triage(store, cur, base, "--min-effect", "1") == 0
    assert _triage(store, cur, base, "--min-effect", "1", "--run-spread", "0") == 1
    capsys.readouterr()


def test_bad_selectors_are_usage_errors(store, capsys, tmp_path):
    store_run(store, CAL, [trial(86.0), trial(86.0)])
    assert main(["triage", "99", "--baseline", "1", "--store", store.path]) == 2
    assert "no run 99" in capsys.readouterr().err
    assert main(["triage", "nonsense", "--baseline", "1", "--store", store.path]) == 2
    assert "not a run, baseline or log window" in capsys.readouterr().err
    f = tmp_path / "engine.log"
    f.write_text("")
    assert main(["triage", str(f), "--baseline", "1", "--store", store.path]) == 2
    assert "no time range" in capsys.readouterr().err
    assert main(["triage", "1", "--baseline", "1", "--store", store.path, "--json",
                 "--format", "md"]) == 2
    capsys.readouterr()


def test_pure_triage_of_resolved_sides(store):
    a = store_run(store, CAL, [trial(86.0, 7.0, 12.3), trial(86.4, 7.0, 12.35)])
    b = store_run(store, CAL, [trial(86.2, 7.0, 12.31), trial(86.1, 7.0, 12.32)])
    v = triage(resolve_side(str(a), store=store), resolve_side(str(b), store=store))
    assert v.kind == "NO_CHANGE" and v.exit_code == 0
    d = v.to_dict()
    assert d["baseline"]["name"] == f"run {a}" and d["current"]["run_ids"] == [b]
    json.dumps(d)  # JSON-able as it is


def _ngram_trial(step: float, mal: float, tps: float) -> dict:
    return {"status": "ok", "decode_rate": step * tps, "engine_decode_rate": step * tps,
            "engine_mal": mal, "engine_step_rate": step, "engine_tokens_per_step": tps}


def test_fewer_drafted_steps_is_an_acceptance_regression_named_tokens_per_step(store, capsys):
    # n-gram speculation: MAL (drafted steps only) unchanged, but fewer steps find a draft
    base = store_run(store, CAL, [_ngram_trial(28.0 + d, 6.0, 2.3) for d in (0, 0.3, -0.3)])
    cur = store_run(store, CAL, [_ngram_trial(28.0 + d, 6.0, 1.7) for d in (0, 0.3, -0.3)])
    code, out = _json(store, cur, base, capsys)
    assert code == 1 and out["label"] == "REGRESSION (acceptance)"
    assert "tokens per step down 26.1%" in out["headline"] and "MAL 6.00 → 6.00" in out["headline"]
    assert out["decomposition"]["acceptance_metric"] == "tokens per step"
    assert out["decomposition"]["share_mal"] > 0.95
    rows = {r["check"]: r for r in out["evidence"]}
    assert rows["tokens per step changed?"]["status"] == "changed"
    assert rows["MAL changed?"]["status"] == "same"
    _triage(store, cur, base)
    assert "tokens per step" in capsys.readouterr().out


def _plain_trial(rate: float) -> dict:
    # no speculative decoding: one token per step, no MAL
    return {"status": "ok", "decode_rate": rate, "engine_decode_rate": rate,
            "engine_step_rate": rate, "engine_tokens_per_step": 1.0}


def test_mal_is_not_applicable_when_neither_side_drafts(store, capsys):
    base = store_run(store, CAL, [_plain_trial(40.0 + d) for d in (0, 0.4, -0.4)])
    cur = store_run(store, CAL, [_plain_trial(30.0 + d) for d in (0, 0.4, -0.4)])
    code, out = _json(store, cur, base, capsys)
    assert code == 1 and out["verdict"] == "REGRESSION"
    row = {r["check"]: r for r in out["evidence"]}["MAL changed?"]
    assert row["result"].startswith("not applicable: no speculative decoding on either side")
    assert row["status"] == "same"
    content = {r["check"]: r for r in out["evidence"]}["what content do tokens per step imply?"]
    assert content["result"].startswith("nothing: no speculative decoding on either side")
    assert not content["detail"]  # no talk of drafted steps where nothing drafts
    _triage(store, cur, base)
    text = capsys.readouterr().out
    assert "not applicable: no speculative decoding" in text and "needs ≥ 2" not in text
    assert "not every step drafts" not in text


def test_report_and_triage_read_one_verdict_under_the_learned_spread(store, capsys, tmp_path):
    """`report` reaches its verdict the way `triage` does (verdict.judge): the same spread
    (here the prior: two lone runs of this stack), so the same verdict, change and notes."""
    rows = [(86, 7.0, 12.3), (80, 6.9, 11.6)]
    base = store_run(store, CAL, [trial(r + d, m, s) for (r, m, s) in rows[:1] for d in (0, 1, -1)])
    cur = store_run(store, CAL, [trial(r + d, m, s) for (r, m, s) in rows[1:] for d in (0, 1, -1)])
    code = main(["triage", str(cur), "--baseline", str(base), "--store", store.path, "--json"])
    tri = json.loads(capsys.readouterr().out)
    assert code == tri["exit_code"] == for_verdict(tri["verdict"])
    assert any("prior" in n for n in tri["notes"]), tri["notes"]  # two lone runs: the prior
    out = tmp_path / "r.json"
    assert main(["report", str(base), str(cur), "--format", "json", "-o", str(out),
                 "--store", store.path]) == 0
    rep = json.loads(out.read_text())["comparisons"][0]
    assert rep["verdict"] == tri["verdict"]
    assert rep["detail"]["changes"]["decode"] == tri["changes"]["decode"]
    assert rep["detail"]["notes"] == tri["notes"]
