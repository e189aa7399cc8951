"""`decodescope logs`: answer first, JSON, time selection, errors, and the selector grammar."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from decodescope.cli.main import main
from decodescope.errors import UsageError
from decodescope.telemetry.logs import analyze_log, parse_time, split_selector
from decodescope.telemetry.logs.synth import access_line, engine_line, spec_line

T0 = datetime(2026, 9, 15, 23, 29, 50).timestamp()


@pytest.fixture
def seed_log(tmp_path: Path) -> str:
    """30 windows of 10 s, 23:30:00 .. 23:34:50, MAL 2.8, 5–6 steps/s (synthetic; every step
    drafts: generated = drafts + accepted)."""
    lines = []
    for i in range(1, 31):
        t = T0 + 10 * i
        j = 10 + (i % 3)  # 50, 55, 60 drafts
        lines += [access_line(30000 + i), engine_line(t, 1.4 * j),
                  spec_line(t, 5 * j, [4 * j, 3 * j, 2 * j])]
    p = tmp_path / "engine.log"
    p.write_text("\n".join(lines) + "\n")
    return str(p)


def test_text_output_answer_first(seed_log: str, capsys):
    assert main(["logs", seed_log, "--year", "2026"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("vLLM log, 30 windows 09-15 23:29:50\u201323:34:50: decode median 15.4 tok/s "
                      "(peak 16.8), MAL 2.80, step rate 5.5/s")
    assert any("from – to" in ln for ln in out)  # 30 windows: binned rows
    assert any(ln.startswith("read 19.2 kB: 60 stats lines parsed, 0 not understood")
               for ln in out), out
    assert any(ln.startswith("23:29:50 – 23:30:10   Engine 000         2") for ln in out), out


def test_json_output(seed_log: str, capsys):
    assert main(["logs", seed_log, "--year", "2026", "--json", "--max-windows", "5"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["schema_version"] == 1 and d["engine"] == "vllm"
    assert d["windows_total"] == 30 and d["windows_listed"] == 5
    assert d["mal_overall"] == pytest.approx(2.8)
    assert d["decode_tok_s"]["median"] == 15.4 and d["decode_tok_s"]["max"] == 16.8
    assert d["step_rate_per_s"]["median"] == pytest.approx(5.5)
    assert d["lines"]["lines_unparsed"] == 0 and d["answer"].startswith("vLLM log, 30 windows")
    assert d["windows"][-1]["t_end_s"] == T0 + 300


@pytest.mark.parametrize("since,until,n", [
    ("23:31", "23:32", 7),  # 23:31:00 .. 23:32:00 inclusive
    ("09-15 23:31:00", "23:32", 7),
    ("2026-09-15T23:31:00", "2026-09-15 23:32:00", 7),
    (None, "23:30:30", 4),
])
def test_since_until(seed_log: str, since, until, n):
    s = analyze_log(seed_log, since=since, until=until, year=2026)
    assert s.windows_total == n


def test_cli_since_until_json(seed_log: str, capsys):
    assert main(["logs", seed_log, "--year", "2026", "--since", "23:31", "--until", "23:32",
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["windows_total"] == 7
    assert d["since_s"] == datetime(2026, 9, 15, 23, 31).timestamp()


def test_time_without_date_resolves_near_the_log(seed_log: str):
    # "00:10" after a log at 23:30 on 09-15 is 09-16 00:10 (nearest), not 09-15 00:10
    spec = parse_time("00:10")
    assert spec.resolve(T0) == datetime(2026, 9, 16, 0, 10).timestamp()
    until = parse_time("00:05").resolve(T0, not_before_s=T0)
    assert until == datetime(2026, 9, 16, 0, 5).timestamp()


def test_missing_file_is_a_usage_error(tmp_path: Path, capsys):
    assert main(["logs", str(tmp_path / "nope.log")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: log file not found") and "journalctl" in err


def test_bad_time_is_a_usage_error(seed_log: str, capsys):
    assert main(["logs", seed_log, "--since", "half past"]) == 2
    assert "cannot read time 'half past'" in capsys.readouterr().err
    with pytest.raises(UsageError):
        parse_time("25:00")


def test_until_before_since(seed_log: str):
    with pytest.raises(UsageError, match="before"):
        analyze_log(seed_log, since="2026-09-15T23:33", until="2026-09-15T23:31", year=2026)


def test_no_windows_is_exit_0_with_counts(tmp_path: Path, capsys):
    p = tmp_path / "other.log"
    p.write_text("hello\nworld\nSpecDecoding metrics: garbled\n")
    assert main(["logs", str(p)]) == 0
    cap = capsys.readouterr()
    assert cap.out.startswith("engine log: no engine windows found")
    assert "read 42 bytes: 0 stats lines parsed, 1 not understood" in cap.out
    assert "warning: no engine windows found (42 bytes read, 1 stats lines not understood)" in cap.err


def test_empty_file(tmp_path: Path, capsys):
    p = tmp_path / "empty.log"
    p.write_text("")
    assert main(["logs", str(p), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["windows_total"] == 0 and d["decode_tok_s"] is None and d["mal_overall"] is None


def test_wrong_engine_finds_nothing(seed_log: str, capsys):
    assert main(["logs", seed_log, "--engine", "sglang", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["windows_total"] == 0


def test_help_mentions_forms(capsys):
    assert main(["logs", "--help"]) == 0
    out = capsys.readouterr().out
    assert "HH:MM" in out and "--follow" in out and "--json" in out


def test_follow_cli_prints_windows_and_summary(seed_log: str, capsys, monkeypatch):
    import decodescope.telemetry.logs.pipeline as pl

    real = pl.iter_windows

    def once(path, **kw):  # stop after the existing content
        kw.update(stop=lambda: True, poll_s=0.0)
        return real(path, **kw)

    monkeypatch.setattr("decodescope.telemetry.logs.accumulate.iter_windows", once)
    assert main(["logs", seed_log, "--follow", "--year", "2026"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("09-15 23:30:00  Engine 000") and "MAL 2.80" in out[0]
    assert any(ln.startswith("vLLM log, 30 windows") for ln in out)


def test_split_selector():
    assert split_selector("pipeline.log@2026-09-15T23:30..23:45") == (
        "pipeline.log", "2026-09-15T23:30", "23:45")
    assert split_selector("a.log") == ("a.log", None, None)
    assert split_selector("a@b.log@..23:45") == ("a@b.log", None, "23:45")
    with pytest.raises(UsageError):
        split_selector("a.log@23:30")


def test_selector_window_matches_ux_example(seed_log: str):
    path, start, end = split_selector(f"{seed_log}@2026-09-15T23:30..23:31")
    s = analyze_log(path, since=start, until=end, year=2026)
    assert s.windows_total == 7 and s.since_s is not None and s.until_s is not None
    assert s.until_s - s.since_s == timedelta(minutes=1).total_seconds()


def test_docs_example_is_the_real_output(capsys):
    """docs/logs.md shows the output for a committed fixture: keep it true."""
    root = Path(__file__).parent.parent
    doc = (root / "docs" / "logs.md").read_text()
    cmd = "$ decodescope logs tests/data/real-logs/vllm_issue_43295.log --year 2026\n"
    shown = doc.split(cmd, 1)[1].split("```", 1)[0].rstrip("\n")
    assert main(["logs", str(root / "tests/data/real-logs/vllm_issue_43295.log"),
                 "--year", "2026"]) == 0
    assert capsys.readouterr().out.rstrip("\n") == shown


def test_simulator_log_is_labelled(tmp_path: Path, capsys):
    p = tmp_path / "sim.log"
    lines = ["(APIServer pid=9) INFO 09-15 23:29:00 [sim.py:1] decodescope SIMULATOR: this log is "
             "SIMULATED, not a real vLLM engine (version 0.11.2, seed 1)"]
    lines += [engine_line(T0 + 10 * i, 14.0) for i in range(1, 4)]
    p.write_text("\n".join(lines) + "\n")
    assert main(["logs", str(p), "--year", "2026", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["simulated"] is True and d["answer"].startswith("vLLM (SIMULATED) log, 3 windows")
