"""Seek (--since/--until) and the parallel whole read give the sequential read's windows.

Big-file thresholds are lowered so small synthetic logs take the same code paths.
"""

from __future__ import annotations

import random
from datetime import datetime
from pathlib import Path

import pytest

from decodescope.telemetry.logs import (
    ParseCounts,
    Selection,
    analyze_log,
    iter_windows,
    parse_time,
    seek,
    segments,
)
from decodescope.telemetry.logs.synth import access_line, engine_line, spec_line
from decodescope.verdict.side_resolve import read_log


@pytest.fixture(autouse=True)
def small_thresholds(monkeypatch):
    monkeypatch.setattr(seek, "SEEK_MIN_BYTES", 1)
    monkeypatch.setattr(seek, "HEAD_BYTES", 16 << 10)
    monkeypatch.setattr(seek, "PROBE_BYTES", 8 << 10)
    monkeypatch.setattr(segments, "read_lines", _small_blocks(segments.read_lines))


def _small_blocks(fn):
    from decodescope.telemetry.logs import reader

    def wrapped(*a, **kw):
        old = reader.READ_BYTES
        reader.READ_BYTES = 4 << 10
        try:
            yield from fn(*a, **kw)
        finally:
            reader.READ_BYTES = old
    return wrapped


def write_log(path: Path, t0: datetime, hours: float, *, seed: int = 1, twice: bool = False,
              yearless: bool = True, pids: tuple[int, ...] = (5020,)) -> str:
    rng = random.Random(seed)
    t = t0.timestamp()
    lines = ["(APIServer pid=5020) INFO 09-01 00:00:00 [api_server.py:1] non-default args: "
             "{'speculative_config': {'method': 'mtp', 'num_speculative_tokens': 3}}"]
    for i in range(int(hours * 360)):
        t += 10
        for _ in range(rng.randint(0, 4)):
            lines.append(access_line(rng.randint(30000, 60000)))
        if 60 <= i % 400 < 80:
            continue  # an idle stretch: no stats lines
        for pid in pids:
            drafts = rng.randint(800, 1200)
            pp = [round(drafts * p) for p in (0.8, 0.6, 0.4)]
            gen = (drafts + sum(pp)) / 10
            block = [engine_line(t, gen, running=rng.randint(1, 8), pid=pid),
                     spec_line(t, drafts, pp, interval_s=10, pid=pid)]
            for ln in block:
                lines += [ln, ln] if twice and rng.random() < 0.3 else [ln]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def sequential(path: str, since: str | None, until: str | None, year: int | None = 2026):
    sel = Selection(since=parse_time(since) if since else None,
                    until=parse_time(until) if until else None)
    old = seek.SEEK_MIN_BYTES
    seek.SEEK_MIN_BYTES = 1 << 60
    try:
        return list(sel.apply(iter_windows(path, year=year, selection=sel)))
    finally:
        seek.SEEK_MIN_BYTES = old


def seeked(path: str, since: str | None, until: str | None, year: int | None = 2026):
    sel = Selection(since=parse_time(since) if since else None,
                    until=parse_time(until) if until else None)
    counts = ParseCounts()
    got = seek.seek_windows(path, sel, engine=None, year=year, counts=counts)
    assert got is not None, "the seek fell back to a whole read"
    return list(sel.apply(iter(got))), counts


@pytest.mark.parametrize("since, until", [("09-01 03:00", "09-01 03:30"),
                                          ("09-01 05:12:30", "09-01 05:40"),
                                          ("09-01 07:00", None), ("09-01 06:10", "09-01 06:11")])
def test_seek_gives_the_sequential_windows(tmp_path: Path, since, until):
    log = write_log(tmp_path / "v.log", datetime(2026, 9, 1, 0, 0), 8)
    want = sequential(log, since, until)
    got, counts = seeked(log, since, until)
    assert want and got == want
    if until is not None:
        assert counts.bytes_skipped > 0 and counts.bytes_read < Path(log).stat().st_size / 2


def test_seek_with_duplicated_lines(tmp_path: Path):
    log = write_log(tmp_path / "v.log", datetime(2026, 9, 1, 0, 0), 6, twice=True)
    want = sequential(log, "09-01 04:00", "09-01 04:30")
    got, counts = seeked(log, "09-01 04:00", "09-01 04:30")
    assert want and got == want and counts.duplicates > 0


def test_seek_across_the_new_year_without_years(tmp_path: Path):
    log = write_log(tmp_path / "v.log", datetime(2026, 12, 31, 20, 0), 8)
    for since, until in (("01-01 01:00", "01-01 01:30"), ("12-31 22:00", "12-31 22:30"),
                         ("12-31 23:50", "01-01 00:10")):
        want = sequential(log, since, until, year=2026)
        got, _ = seeked(log, since, until, year=2026)
        assert want and got == want, (since, until)
        assert datetime.fromtimestamp(got[-1].t_end_s or 0).year in (2026, 2027)


def test_an_unordered_log_falls_back(tmp_path: Path):
    a = write_log(tmp_path / "a.log", datetime(2026, 9, 1, 6, 0), 4)
    b = write_log(tmp_path / "b.log", datetime(2026, 9, 1, 0, 0), 4, seed=2)
    cat = tmp_path / "cat.log"
    cat.write_text(Path(a).read_text() + Path(b).read_text())  # 06:00-10:00, then 00:00-04:00
    sel = Selection(since=parse_time("09-01 02:00"), until=parse_time("09-01 02:30"))
    assert seek.seek_windows(str(cat), sel, engine=None, year=2026, counts=ParseCounts()) is None
    # the public entry falls back to a whole read: same answer
    s = analyze_log(str(cat), since="09-01 02:00", until="09-01 02:30", year=2026)
    assert s.windows_total == len(sequential(str(cat), "09-01 02:00", "09-01 02:30"))


def test_triage_side_reads_the_same_windows_and_context(tmp_path: Path):
    log = write_log(tmp_path / "v.log", datetime(2026, 9, 1, 0, 0), 8)
    a = read_log(log, "03:00", "03:30", engine=None, year=2026)
    old = seek.SEEK_MIN_BYTES
    seek.SEEK_MIN_BYTES = 1 << 60
    try:
        b = read_log(log, "03:00", "03:30", engine=None, year=2026)
    finally:
        seek.SEEK_MIN_BYTES = old
    assert a.windows == b.windows and a.engine == b.engine
    key = lambda w: (w.printed.get("pid"), w.engine_id)  # noqa: E731
    assert {key(w): w for w in a.before} == {key(w): w for w in b.before}
