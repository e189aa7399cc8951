"""The seed's own evening as one triage: two engine-log windows, one verdict.

Baseline: the parity probe (MAL 4.0–5.1, engine windows around 180 tok/s); current: tonight's
retest (MAL 2.6–3.1, ~110 tok/s); step rate 39–42 steps/s on both. Expected: CALIBER_MISMATCH,
MAL carrying most of the delta, step rate within noise, exit 3.
"""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from test_triage_support import seed_windows, write_vllm_log

from decodescope.cli.main import main
from decodescope.report.verdict_md import numbers_side_by_side, render_verdict_md
from decodescope.verdict import for_verdict
from decodescope.verdict.render import render_text
from decodescope.verdict.side_from_windows import side_from_windows
from decodescope.verdict.triage import triage

BASE_T0 = datetime(2026, 9, 14, 23, 0).timestamp()
CUR_T0 = datetime(2026, 9, 15, 23, 30).timestamp()


@pytest.fixture(scope="module")
def seed_sides():
    base = side_from_windows("pipeline.log@09-14 23:00..23:20",
                             seed_windows(BASE_T0, 112, 4.0, 5.1, seed=14))
    cur = side_from_windows("pipeline.log@09-15 23:30..23:45",
                            seed_windows(CUR_T0, 84, 2.6, 3.1, seed=15))
    return base, cur


def test_seed_windows_have_the_seeds_numbers(seed_sides):
    base, cur = seed_sides
    assert 175 <= base.median("engine_decode_rate") <= 190
    assert 100 <= cur.median("engine_decode_rate") <= 120
    assert 4.0 <= base.median("mal") <= 5.1 and 2.6 <= cur.median("mal") <= 3.1
    assert 39 <= base.median("step_rate") <= 42 and 39 <= cur.median("step_rate") <= 42


def test_seed_is_a_caliber_mismatch_carried_by_mal(seed_sides):
    v = triage(*seed_sides)
    assert v.kind == "CALIBER_MISMATCH" and v.cause == "caliber"
    assert int(for_verdict(v)) == 3 and v.exit_code == 3
    assert v.headline.startswith("NOT A REGRESSION")
    # MAL carries most of the log-delta; step rate is within noise
    dec = v.decomposition
    assert dec is not None and dec.share_mal is not None and dec.share_step is not None
    assert dec.share_mal > 0.9 and abs(dec.share_step) < 0.1
    assert v.changes["step_rate"].status == "not_significant"
    assert v.changes["mal"].status == "down" and v.changes["decode"].status == "down"
    # unknown caliber for log windows; the MAL bands say different content
    assert v.caliber.same is False
    assert "MAL bands say different content (code-like → ordinary text)" in v.caliber.text
    assert [getattr(b, "name", None) for b in v.bands] == ["code-like", "ordinary text"]
    checks = {r.check: r for r in v.evidence}
    assert checks["step rate changed?"].result.startswith("no:")
    assert "not significant" in checks["step rate changed?"].result
    assert checks["same caliber?"].status == "changed"
    assert any("parity-code-32k" in s for s in v.next_steps)


def test_seed_text_leads_with_the_answer_then_evidence_then_next(seed_sides):
    text = render_text(triage(*seed_sides))
    lines = text.splitlines()
    assert lines[0].startswith("NOT A REGRESSION — caliber mismatch.") and lines[0].endswith("exit 3")
    assert "carried by MAL" in lines[1]
    assert text.index("Evidence") < text.index("Next:")
    assert "112 windows × 10 s" in text and "84 windows × 10 s" in text


def test_seed_numbers_side_by_side_markdown(seed_sides):
    table = numbers_side_by_side(list(seed_sides))
    rows = table.splitlines()
    assert rows[0] == "| caliber | decode tokens/s | MAL | source |"
    assert "unknown (engine log; MAL band: code-like" in rows[2]
    assert "engine 10 s windows geomean" in rows[2] and "/ best window" in rows[2]
    assert "MAL band: ordinary text" in rows[3]
    md = render_verdict_md(triage(*seed_sides))
    assert md.startswith("## CALIBER_MISMATCH")
    assert "| check | result |" in md and "### Next" in md


def _write_seed_log(path):
    write_vllm_log(path, seed_windows(BASE_T0, 112, 4.0, 5.1, seed=14))
    write_vllm_log(path, seed_windows(CUR_T0, 84, 2.6, 3.1, seed=15), append=True)


def test_seed_from_a_vllm_log_file_through_the_cli(tmp_path, capsys):
    log = tmp_path / "pipeline.log"
    _write_seed_log(log)
    code = main(["triage", f"{log}@2026-09-15T23:30..23:45", "--baseline",
                 f"{log}@09-14 23:00..09-14 23:20", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 3
    assert out["verdict"] == "CALIBER_MISMATCH"
    assert out["decomposition"]["share_mal"] > 0.9
    assert out["changes"]["step_rate"]["status"] == "not_significant"
    assert 100 <= out["current"]["median"]["engine_decode_rate"] <= 120
    assert 170 <= out["baseline"]["median"]["engine_decode_rate"] <= 190


def test_seed_log_time_only_selectors_and_markdown(tmp_path, capsys):
    base_log, cur_log = tmp_path / "before.log", tmp_path / "pipeline.log"
    write_vllm_log(base_log, seed_windows(BASE_T0, 112, 4.0, 5.1, seed=14))
    write_vllm_log(cur_log, seed_windows(CUR_T0, 84, 2.6, 3.1, seed=15))
    code = main(["triage", f"{cur_log}@23:30..23:45", "--baseline", f"{base_log}@23:00..23:20",
                 "--format", "md"])
    md = capsys.readouterr().out
    assert code == 3
    assert "| caliber | decode tokens/s | MAL | source |" in md
    assert "engine log pipeline.log" in md


def test_numbers_side_by_side_mixes_stored_runs_and_log_windows(tmp_path, seed_sides):
    from test_triage_support import store_run, trial

    from decodescope.store.connect import open_store
    from decodescope.verdict.side_resolve import resolve_side

    with open_store(tmp_path / "runs.sqlite") as st:
        rid = store_run(st, "chat-short-3k", [trial(94.1, 2.62, 36.5), trial(107.8, 3.14, 38.2)],
                        labels={"tag": "tonight"})
        run_side = resolve_side(str(rid), store=st)
    rows = numbers_side_by_side([seed_sides[0], run_side]).splitlines()
    assert len(rows) == 4
    run_row = rows[3]
    assert run_row.startswith(f"| chat-short-3k@1 ({run_side.caliber_identity}): chat task, "
                              "short prompt, thinking on, out 3000")
    assert "| 94.1–107.8 (client); engine geomean" in run_row
    # MAL as the verdict compares it: its statistic named, the trials' range beside it
    assert "| 2.87 geomean (n=2); trials 2.62–3.14 |" in run_row
    assert run_row.endswith("label tag=tonight |")
