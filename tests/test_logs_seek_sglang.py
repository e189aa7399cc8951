"""The --since/--until seek on SGLang logs (issue 22: a 30-minute window of a GiB log in under a
second, as for vLLM): the windows are the whole read's, from a read of the range only."""

from __future__ import annotations

import random
from datetime import datetime
from pathlib import Path

import pytest

from decodescope.telemetry.logs import ParseCounts, Selection, iter_windows, parse_time, seek


@pytest.fixture(autouse=True)
def small_thresholds(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(seek, "SEEK_MIN_BYTES", 1)
    monkeypatch.setattr(seek, "HEAD_BYTES", 16 << 10)
    monkeypatch.setattr(seek, "PROBE_BYTES", 8 << 10)


def write_sglang(path: Path, hours: float, seed: int = 1,
                 launch: str | None = "server_args=ServerArgs(decode_log_interval=20, ...)"
                 ) -> str:
    rng = random.Random(seed)
    t = datetime(2026, 9, 1, 0, 0, 0).timestamp()
    lines = [f"[2026-09-01 00:00:00] {launch}"] if launch else []
    while t < datetime(2026, 9, 1).timestamp() + hours * 3600:
        t += rng.uniform(1.0, 2.5)
        if int(t) % 3600 < 300:
            t += 120  # an idle stretch: SGLang logs no Decode line
        stamp = datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")
        if rng.random() < 0.5:
            lines.append(f'[{stamp}] INFO:     127.0.0.1:{rng.randint(30000, 60000)} - "POST '
                         '/v1/chat/completions HTTP/1.1" 200 OK')
        run = rng.randint(1, 8)
        acc = rng.uniform(1.8, 3.2)
        lines.append(f"[{stamp} TP0] Decode batch, #running-req: {run}, #token: "
                     f"{rng.randint(900, 9000)}, token usage: 0.05, accept len: {acc:.2f}, "
                     f"accept rate: {acc / 4:.2f}, cuda graph: True, gen throughput (token/s): "
                     f"{run * acc * rng.uniform(25, 35):.2f}, #queue-req: 0, ")
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _sel(since: str, until: str) -> Selection:
    return Selection(since=parse_time(since), until=parse_time(until))


@pytest.mark.parametrize("since, until", [("09-01 03:10", "09-01 03:40"),
                                          ("09-01 05:55", "09-01 06:25"),
                                          ("09-01 00:00", "09-01 00:20")])
def test_sglang_seek_gives_the_whole_reads_windows(tmp_path: Path, since: str, until: str):
    path = write_sglang(tmp_path / "sg.log", hours=8)
    sel = _sel(since, until)
    counts = ParseCounts()
    got = seek.seek_windows(path, sel, engine=None, year=None, counts=counts)
    assert got is not None, "the seek fell back to a whole read"
    seeked = list(sel.apply(iter(got)))
    whole_sel = _sel(since, until)
    old = seek.SEEK_MIN_BYTES
    seek.SEEK_MIN_BYTES = 1 << 60
    try:
        whole = list(whole_sel.apply(iter_windows(path, selection=whole_sel)))
    finally:
        seek.SEEK_MIN_BYTES = old
    assert seeked and seeked == whole
    if since != "09-01 00:00":
        assert counts.bytes_skipped > 0
    # the launch line's decode_log_interval (20, not the default 40) reached the range read
    assert all(w.printed["decode_steps"] == 20 for w in seeked)
