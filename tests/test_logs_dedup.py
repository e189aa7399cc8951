"""Duplicated log lines (a shipper writing each line twice) and `--until` with sub-second stamps."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from decodescope.cli.main import main
from decodescope.telemetry.logs import analyze_log
from decodescope.telemetry.logs.synth import engine_line, spec_line

T0 = datetime(2026, 9, 15, 23, 30, 0).timestamp()


def _lines(n: int = 12) -> list[str]:
    out = []
    for i in range(1, n + 1):
        t = T0 + 10 * i
        out += [engine_line(t, 14.0), spec_line(t, 50, [40, 30, 20])]
    return out


def _shipped_twice(lines: list[str], *, fraction: bool) -> list[str]:
    """Every line twice, as a docker/journald double shipper writes them: its own stamp
    (RFC 3339, microseconds apart) in front, the engine's line unchanged."""
    out = []
    for i, ln in enumerate(lines):
        for j in range(2):
            us = 100 * i + j  # copies 1 µs apart
            stamp = f"2026-09-15T21:30:{i % 60:02d}.{us:06d}Z stdout F " if fraction else ""
            out.append(stamp + ln)
    return out


def test_duplicated_lines_give_the_right_interval_and_counts(tmp_path: Path):
    once = tmp_path / "once.log"
    once.write_text("\n".join(_lines()) + "\n")
    twice = tmp_path / "twice.log"
    twice.write_text("\n".join(_shipped_twice(_lines(), fraction=False)) + "\n")
    a, b = analyze_log(str(once), year=2026), analyze_log(str(twice), year=2026)
    assert b.lines["duplicates"] == 24 and a.lines["duplicates"] == 0
    assert [w.duration_s for w in b.windows] == [w.duration_s for w in a.windows]
    assert all(w.printed["log_interval_s"] == 10.0 for w in b.windows)
    assert b.generation_tokens == a.generation_tokens == 12 * 140
    assert b.windows_total == a.windows_total == 12
    assert b.mal_overall == a.mal_overall
    note = next(n for n in b.notes if n.code == "logs.duplicate_lines")
    assert "24 duplicated lines dropped" in note.cause


def test_copies_with_their_own_sub_second_stamps_are_dropped(tmp_path: Path):
    p = tmp_path / "docker.log"
    p.write_text("\n".join(_shipped_twice(_lines(), fraction=True)) + "\n")
    s = analyze_log(str(p), year=2026)
    assert s.lines["duplicates"] == 24 and s.windows_total == 12
    assert s.decode is not None and s.decode.median == 14.0


def test_equal_lines_far_apart_are_not_duplicates(tmp_path: Path):
    # an idle server prints the same text every interval: not a copy
    p = tmp_path / "idle.log"
    p.write_text("\n".join(engine_line(T0 + 10 * i, 0.0) for i in range(1, 6)) + "\n")
    s = analyze_log(str(p), year=2026)
    assert s.lines["duplicates"] == 0 and s.windows_total == 5


def test_two_engines_with_the_same_text_are_not_duplicates(tmp_path: Path):
    lines = []
    for i in range(1, 5):
        lines += [engine_line(T0 + 10 * i, 14.0, engine=0), engine_line(T0 + 10 * i, 14.0, engine=1)]
    p = tmp_path / "dp.log"
    p.write_text("\n".join(lines) + "\n")
    s = analyze_log(str(p), year=2026)
    assert s.lines["duplicates"] == 0 and s.windows_total == 8


def test_until_includes_the_whole_named_second(tmp_path: Path):
    # sub-second engine stamps (ISO with milliseconds): the window stamped 23:30:40.4 is
    # inside `--until 23:30:40`
    lines = []
    for i in range(1, 7):
        t = datetime.fromtimestamp(T0 + 10 * i + 0.4)
        lines.append(f"[{t:%Y-%m-%d %H:%M:%S}.400] " + engine_line(T0 + 10 * i, 14.0, pid=None)
                     .replace("INFO ", "INFO ").split(" [loggers.py:271] ", 1)[1])
    p = tmp_path / "ms.log"
    p.write_text("\n".join(lines) + "\n")
    s = analyze_log(str(p), engine="vllm", year=2026, until="23:30:40")
    assert [datetime.fromtimestamp(w.t_end_s).strftime("%H:%M:%S.%f")[:12]
            for w in s.windows] == ["23:30:10.400", "23:30:20.400", "23:30:30.400",
                                    "23:30:40.400"]
    exact = analyze_log(str(p), engine="vllm", year=2026, until="2026-09-15T23:30:40.100")
    assert len(exact.windows) == 3  # an instant with a fraction is exact


def test_cli_prints_the_duplicate_warning(tmp_path: Path, capsys):
    p = tmp_path / "twice.log"
    p.write_text("\n".join(_shipped_twice(_lines(), fraction=False)) + "\n")
    assert main(["logs", str(p), "--year", "2026"]) == 0
    assert "duplicated lines dropped" in capsys.readouterr().err
