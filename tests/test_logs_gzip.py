"""Compressed logs (issue 13 item 8): gzip (`engine.log.gz`, a rotated `engine.log.1.gz`), bzip2
and xz are read through the decompressor, streaming; follow mode and zstd are refused (exit 2);
a file cut short is read up to the cut and said. Synthetic logs."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import tracemalloc
from datetime import datetime
from pathlib import Path

import pytest

from decodescope.cli.main import main
from decodescope.exitcodes import ExitCode
from decodescope.telemetry.logs import (
    ParseCounts,
    Selection,
    analyze_log,
    is_simulated,
    iter_windows,
    parse_time,
    seek,
)
from decodescope.telemetry.logs.reader import read_lines
from decodescope.telemetry.logs.synth import access_line, engine_line, spec_line

T0 = datetime(2026, 3, 2, 10, 0, 0).timestamp()


def log_text(n: int = 120, noise: int = 3) -> str:
    lines = []
    for i in range(n):
        t = T0 + 10 * (i + 1)
        lines += [access_line(40000 + j) for j in range(noise)]
        lines.append(engine_line(t, 150.0 + i % 7, running=2))
        lines.append(spec_line(t, 300, [200, 150, 90]))
    return "\n".join(lines) + "\n"


@pytest.fixture()
def plain(tmp_path: Path) -> Path:
    p = tmp_path / "engine.log"
    p.write_text(log_text())
    return p


def _gz(plain: Path, name: str) -> Path:
    out = plain.with_name(name)
    out.write_bytes(gzip.compress(plain.read_bytes(), mtime=0))
    return out


@pytest.mark.parametrize("name", ["engine.log.gz", "engine.log.1.gz", "no-suffix"])
def test_gzip_log_reads_like_the_plain_one(plain: Path, name: str):
    gz = _gz(plain, name)  # told by its first bytes, not its name
    want = analyze_log(str(plain), year=2026)
    got = analyze_log(str(gz), year=2026)
    assert got.windows == want.windows and got.windows_total == 120
    assert got.lines["bytes_read"] == plain.stat().st_size
    assert got.lines["compressed"] == "gzip" and "compressed" not in want.lines
    codes = [n.code for n in got.notes]
    assert "logs.compressed" in codes and "logs.compressed_damaged" not in codes
    assert got.mal_overall == want.mal_overall


@pytest.mark.parametrize("kind, compress", [("bzip2", bz2.compress), ("xz", lzma.compress)])
def test_bzip2_and_xz_logs_are_read_too(plain: Path, kind, compress):
    p = plain.with_name("engine.log.x")
    p.write_bytes(compress(plain.read_bytes()))
    got = analyze_log(str(p), year=2026)
    assert got.windows == analyze_log(str(plain), year=2026).windows
    assert got.lines["compressed"] == kind


def test_two_gzip_members_are_one_log(plain: Path, tmp_path: Path):
    """`cat a.gz b.gz > c.gz` (and logrotate's delaycompress pieces) is a valid gzip file."""
    data = plain.read_bytes()
    half = data.index(b"\n", len(data) // 2) + 1
    p = tmp_path / "two.log.gz"
    p.write_bytes(gzip.compress(data[:half], mtime=0) + gzip.compress(data[half:], mtime=0))
    assert analyze_log(str(p), year=2026).windows == analyze_log(str(plain), year=2026).windows


def test_seek_path_leaves_a_compressed_log_to_the_sequential_read(
        plain: Path, monkeypatch):
    gz = _gz(plain, "engine.log.gz")
    monkeypatch.setattr(seek, "SEEK_MIN_BYTES", 1)
    want = list(iter_windows(str(plain), year=2026))
    assert list(iter_windows(str(gz), year=2026)) == want
    sel = Selection(since=parse_time("10:05"), until=parse_time("10:15"))
    got = list(sel.apply(iter_windows(str(gz), year=2026, selection=sel)))
    sel2 = Selection(since=parse_time("10:05"), until=parse_time("10:15"))
    assert got == list(sel2.apply(iter(want))) and got


def test_cut_gzip_is_read_up_to_the_cut_and_said(plain: Path, capsys):
    gz = _gz(plain, "engine.log.gz")
    data = gz.read_bytes()
    gz.write_bytes(data[: len(data) * 2 // 3])  # compressed while still being written
    s = analyze_log(str(gz), year=2026)
    assert 0 < s.windows_total < 120
    assert s.lines["damaged"] and 0 < s.lines["bytes_read"] < plain.stat().st_size
    note = next(n for n in s.notes if n.code == "logs.compressed_damaged")
    assert note.severity == "warning" and "rest is missing" in note.cause
    assert main(["logs", str(gz), "--year", "2026"]) == 0
    err = capsys.readouterr().err
    assert "ends early or is damaged" in err


def test_logs_cli_reads_gzip_and_says_so(plain: Path, capsys):
    gz = _gz(plain, "engine.log.1.gz")
    assert main(["logs", str(gz), "--year", "2026", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["windows_total"] == 120 and out["lines"]["compressed"] == "gzip"
    assert main(["logs", str(gz), "--year", "2026"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("vLLM log, 120 windows") and "gzip-compressed log" in out


def test_follow_of_a_compressed_log_is_usage(plain: Path, capsys):
    gz = _gz(plain, "engine.log.gz")
    assert main(["logs", str(gz), "--follow"]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "gzip-compressed log cannot be followed" in err
    with pytest.raises(Exception, match="cannot be followed"):
        next(iter_windows(str(gz), follow=True, stop=lambda: True))


def test_zstd_log_is_usage_with_the_command_that_decompresses_it(tmp_path: Path, capsys):
    p = tmp_path / "engine.log.zst"
    p.write_bytes(b"\x28\xb5\x2f\xfd" + b"\x00" * 64)
    assert main(["logs", str(p)]) == ExitCode.USAGE
    assert "zstd -d" in capsys.readouterr().err


def test_gzip_read_is_streaming(tmp_path: Path):
    """Constant memory: a ~24 MB log through gzip peaks at a few MiB, not the file size."""
    text = log_text(n=40, noise=3).encode()
    p = tmp_path / "big.log.gz"
    with gzip.open(p, "wb", compresslevel=1) as f:
        for _ in range(24_000_000 // len(text) + 1):
            f.write(text)
    counts = ParseCounts()
    tracemalloc.start()
    try:
        n = sum(1 for _ in read_lines(str(p), lambda: (b"Avg prompt",), counts))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert counts.bytes_read > 24_000_000 and n > 1000
    assert peak < 8 << 20, peak


def test_simulator_mark_is_found_in_a_compressed_log(tmp_path: Path):
    p = tmp_path / "sim.log.gz"
    p.write_bytes(gzip.compress(b"decodescope SIMULATOR log\n" + log_text(5).encode()))
    assert is_simulated(str(p))
    assert analyze_log(str(p), year=2026).simulated


def test_triage_window_of_a_gzip_log(plain: Path):
    from decodescope.verdict.side_resolve import read_log

    gz = _gz(plain, "engine.log.gz")
    a = read_log(str(gz), "10:05", "10:15", engine=None, year=2026)
    b = read_log(str(plain), "10:05", "10:15", engine=None, year=2026)
    assert a.windows == b.windows and a.windows
