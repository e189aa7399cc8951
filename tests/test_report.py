"""Reports: the data model, the three renderers and the `report` command (no browser here)."""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path

import pytest
from test_report_fixtures import EVIL, code_run, evil_pair, prose_run, request

from decodescope.cli.main import main
from decodescope.exitcodes import ExitCode
from decodescope.records.stored_run import StoredRun
from decodescope.records.window import EngineWindow
from decodescope.report import curves, report_html, report_json, report_md
from decodescope.report.document import REPORT_KIND, REPORT_SCHEMA_VERSION, Report, build_report
from decodescope.report.plot_svg import nice_ticks
from decodescope.store import runs as sr
from decodescope.store.connect import open_store
from decodescope.store.db import Store

T = 1_790_000_500.0


def pair_report() -> Report:
    return build_report([code_run(), prose_run()], generated_at=T)


# -- model ---------------------------------------------------------------------------------------
def test_pair_gets_the_verdict_of_the_triage_and_every_plot_has_data() -> None:
    rep = pair_report()
    assert [r.run_id for r in rep.runs] == [11, 12]
    (c,) = rep.comparisons
    assert (c.baseline_id, c.current_id, c.verdict, c.exit_code) == (11, 12, "CALIBER_MISMATCH", 3)
    assert any(r["check"] == "same caliber?" and r["status"] == "changed" for r in c.evidence)
    assert [p.id for p in rep.plots] == ["decode-over-time", "mal-over-time", "step-rate-over-time",
                                         "decode-by-position", "acceptance-by-position"]
    for p in rep.plots:
        assert p.has_data and p.series and p.title and "(" in p.x_label and "(" in p.y_label


def test_baseline_option_compares_every_run_with_it_and_puts_it_first() -> None:
    base = code_run(1)
    rep = build_report([prose_run(2), prose_run(3, seed=5)], baseline=base, generated_at=T)
    assert [r.run_id for r in rep.runs] == [1, 2, 3]
    assert [(c.baseline_id, c.current_id) for c in rep.comparisons] == [(1, 2), (1, 3)]
    three = build_report([code_run(1), prose_run(2), prose_run(3)], generated_at=T)
    assert three.comparisons == ()  # three runs, no baseline: side by side only


def test_plot_points_match_what_was_measured() -> None:
    rep = pair_report()
    plots = {p.id: p for p in rep.plots}
    client = [s for s in plots["decode-over-time"].series if s.role == "client"]
    code_pts = [y for _, y in client[0].points if y is not None]
    prose_pts = [y for _, y in client[1].points if y is not None]
    assert 80 < sorted(code_pts)[len(code_pts) // 2] < 95  # streamed at ~87 tok/s
    assert 55 < sorted(prose_pts)[len(prose_pts) // 2] < 66  # ~60 tok/s
    mal = plots["mal-over-time"].series
    assert {round(y, 1) for s in mal for _, y in s.points if y is not None} >= {7.0, 2.3}
    acc = plots["acceptance-by-position"]
    assert acc.categories == tuple(str(i) for i in range(1, 9))
    code_bars = [y for _, y in acc.series[0].points if y is not None]
    assert len(code_bars) == 8
    assert code_bars == sorted(code_bars, reverse=True) and code_bars[0] > 90
    # MAL = 1 + Σ per-position acceptance (the bars are a split of the MAL)
    pool = rep.runs[0].engine_pool
    assert pool is not None
    assert 1 + sum(code_bars) / 100 == pytest.approx(pool["mal"], rel=1e-3)


def test_engine_plots_without_engine_windows_say_why_and_draw_no_zeros() -> None:
    rep = build_report([code_run(windows=False)], generated_at=T)
    plots = {p.id: p for p in rep.plots}
    for pid in ("mal-over-time", "step-rate-over-time", "acceptance-by-position"):
        why = plots[pid].no_data
        assert not plots[pid].has_data and plots[pid].series == () and why is not None
        assert "no engine window" in why or "no /metrics" in why
    dec = plots["decode-over-time"]
    assert [s.role for s in dec.series] == ["client"]
    assert all(y is None or y > 0 for s in dec.series for _, y in s.points)


def test_client_rate_buckets_recover_a_constant_stream_rate() -> None:
    rng = random.Random(0)
    run = code_run(windows=False)
    run.trials[0].requests[0] = request(1000.0, 50.0, 400, rng)
    run.trials[1:] = []
    t0 = curves.run_t0(run)
    assert t0 is not None
    pts = curves.client_rate(run, t0, 0.5)
    ys = [y for _, y in pts if y is not None]
    assert len(ys) >= 14 and all(40 < y < 62 for y in ys)
    assert pts[0][0] > 0.15  # the first bucket starts after the TTFT chunk


def test_window_steps_break_between_windows_that_do_not_touch() -> None:
    ws = [EngineWindow("log", "vllm", 10.0, 20.0, generation_tokens=100, drafts=40,
                       accepted_tokens=60, running=1),
          EngineWindow("log", "vllm", 20.0, 30.0, generation_tokens=120, drafts=40,
                       accepted_tokens=80, running=1),
          EngineWindow("log", "vllm", 50.0, 60.0, generation_tokens=90, drafts=40,
                       accepted_tokens=50, running=1)]
    pts = curves.window_steps(ws, 10.0, lambda w: w.mal)
    assert pts[:4] == [(0.0, 2.5), (10.0, 2.5), (10.0, 3.0), (20.0, 3.0)]
    assert pts[4][1] is None and pts[5:] == [(40.0, 2.25), (50.0, 2.25)]


def test_nice_ticks_cover_the_range_with_round_steps() -> None:
    assert nice_ticks(0, 87.3) == [0, 20, 40, 60, 80, 100]
    assert nice_ticks(0, 7.5) == [0, 2, 4, 6, 8]
    t = nice_ticks(0.3, 20.6, 8)
    assert t[0] <= 0.3 and t[-1] >= 20.6 and all(math.isclose(b - a, 5) for a, b in zip(t, t[1:], strict=False))


# -- renderers -----------------------------------------------------------------------------------
def test_html_is_self_contained_and_escapes_everything_from_runs() -> None:
    a, b = evil_pair()
    page = report_html.render(build_report([a, b], generated_at=T))
    assert "<script" not in page.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "gemma&lt;script&gt;" in page and "&lt;b&gt;after&lt;/b&gt;" in page
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)  # nothing fetched
    assert "<link" not in page and "@import" not in page
    assert page.count('class="plot-svg"') == 5


def test_simulated_runs_are_labelled_in_every_format() -> None:
    rep = build_report([code_run(simulated=True), prose_run()], generated_at=T)
    page = report_html.render(rep)
    assert 'id="simulated-banner"' in page and page.count("SIMULATED") >= 3
    md = report_md.render(rep)
    assert "**SIMULATED**" in md and "[SIMULATED]" in md
    doc = json.loads(report_json.render(rep))
    assert doc["simulated"] is True and doc["runs"][0]["simulated"] is True
    assert "(simulated)" in doc["runs"][0]["short"]


def test_markdown_has_the_seeds_tables_and_escapes_cells() -> None:
    a, b = evil_pair()
    md = report_md.render(build_report([a, b], generated_at=T))
    assert "| check | result |" in md
    assert "| caliber | decode tokens/s | MAL | source |" in md
    assert "**CALIBER MISMATCH**" in md
    assert "<script>" not in md and "&lt;script&gt;" in md
    rows = [line for line in md.splitlines() if line.startswith("| demo-")]
    assert len(rows) == 2 and all(line.count(" | ") == 3 for line in rows)


def test_markdown_cell_escapes_pipes_and_newlines() -> None:
    assert report_md.cell("a | b\nc") == "a \\| b · c"


def test_json_export_is_versioned_and_holds_plain_numbers() -> None:
    doc = json.loads(report_json.render(pair_report()))
    assert doc["schema_version"] == REPORT_SCHEMA_VERSION and doc["kind"] == REPORT_KIND
    assert list(doc)[:2] == ["schema_version", "kind"]
    assert doc["comparisons"][0]["verdict"] == "CALIBER_MISMATCH"
    assert doc["comparisons"][0]["detail"]["verdict"] == "CALIBER_MISMATCH"
    assert {p["id"] for p in doc["plots"]} >= {"decode-over-time", "acceptance-by-position"}
    assert isinstance(doc["runs"][0]["engine_pool"]["mal"], float)


def test_json_export_turns_nan_into_null() -> None:
    rep = pair_report()
    object.__setattr__(rep.runs[0], "length_decay_pct", float("nan"))
    doc = json.loads(report_json.render(rep))
    assert doc["runs"][0]["length_decay_pct"] is None


# -- the command ---------------------------------------------------------------------------------
def save(st: Store, run: StoredRun) -> int:
    rid = sr.create_run(st, url=run.url, model=run.model, engine=run.engine, caliber=run.caliber,
                        caliber_ref=run.caliber_ref, caliber_identity=run.caliber_identity,
                        labels=run.labels, simulated=run.simulated)
    for t in run.trials:
        sr.add_trial(st, rid, t.idx, status=t.status, started_at=t.started_at,
                     wall_anchor_s=t.wall_anchor_s, result=None, requests=t.requests)
    sr.add_windows(st, rid, run.windows)
    sr.update_run(st, rid, status="complete", result=run.result)
    return rid


@pytest.fixture()
def store(tmp_path: Path) -> Path:
    path = tmp_path / "runs.sqlite"
    with open_store(path) as st:
        save(st, code_run())
        save(st, prose_run())
    return path


@pytest.mark.parametrize("suffix, marker", [(".html", "<!doctype html>"),
                                            (".md", "# decodescope report"),
                                            (".json", '{\n "schema_version"')])
def test_report_command_picks_the_format_from_the_suffix(store: Path, tmp_path: Path, suffix: str,
                                                         marker: str, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / f"r{suffix}"
    assert main(["report", "1", "2", "-o", str(out), "--store", str(store)]) == 0
    assert out.read_text().startswith(marker)
    assert "CALIBER_MISMATCH" in capsys.readouterr().out


def test_report_command_json_summary_and_baseline(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.html"
    assert main(["report", "2", "--baseline", "1", "--format", "html", "-o", str(out),
                 "--store", str(store), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["runs"] == [1, 2] and summary["format"] == "html"
    assert summary["verdicts"] == [{"baseline": 1, "current": 2, "verdict": "CALIBER_MISMATCH"}]
    assert summary["bytes"] == len(out.read_bytes())


def test_report_command_to_stdout(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "last", "--store", str(store), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == REPORT_KIND and [r["run_id"] for r in doc["runs"]] == [2]


def test_report_command_errors_are_one_line_with_exit_codes(store: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "99", "--store", str(store)]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err.startswith("error: no run 99") and "Traceback" not in err
    bad = tmp_path / "no-such-dir" / "r.html"
    assert main(["report", "1", "-o", str(bad), "--store", str(store)]) == ExitCode.USAGE
    assert "cannot write the report" in capsys.readouterr().err
    assert main(["report", "1", "--format", "pdf", "--store", str(store)]) == ExitCode.USAGE


def test_report_help_lists_the_formats() -> None:
    from click.testing import CliRunner

    from decodescope.cli.main import cli

    res = CliRunner().invoke(cli, ["report", "--help"])
    assert res.exit_code == 0 and "--baseline" in res.output and "html" in res.output
    assert EVIL not in res.output


def test_a_run_without_trials_or_windows_still_renders_and_says_why() -> None:
    empty = code_run(5, windows=False)
    empty.trials.clear()
    empty.result = None
    rep = build_report([empty], generated_at=T)
    assert all(not p.has_data and p.no_data for p in rep.plots)
    page = report_html.render(rep)
    assert page.count("No data: ") == 5 and 'class="plot-svg"' not in page
    assert "# decodescope report" in report_md.render(rep)
    pair = build_report([empty, code_run(6)], generated_at=T)
    assert pair.comparisons[0].verdict == "INCONCLUSIVE"  # too few trials: said, not guessed
