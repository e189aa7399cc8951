"""Follow mode: growth, rotation (new inode), truncation (copytruncate), bounded time.

The wait between polls is injected: each "sleep" performs the next scripted change to the
file, so the test is deterministic and takes no wall-clock time.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest

from decodescope.telemetry.logs import ParseCounts, iter_windows
from decodescope.telemetry.logs.reader import Tail, follow_blocks
from decodescope.telemetry.logs.synth import engine_line, spec_line

T0 = datetime(2026, 9, 15, 23, 30, 0).timestamp()


def pair(i: int) -> str:
    t = T0 + 10 * i
    return engine_line(t, 14.0) + "\n" + spec_line(t, 50, [40, 30, 20]) + "\n"


def append(path: Path, text: str) -> None:
    with open(path, "a") as f:
        f.write(text)


def scripted(steps: list[Callable[[], None]]) -> tuple[Callable[[float], None], Callable[[], bool]]:
    todo = list(steps)

    def sleep(_: float) -> None:
        if todo:
            todo.pop(0)()

    return sleep, lambda: not todo


def test_follow_growth_rotation_truncation(tmp_path: Path):
    log = tmp_path / "engine.log"
    log.write_text(pair(1) + pair(2) + pair(3))

    def rotate() -> None:
        os.rename(log, tmp_path / "engine.log.1")
        append(tmp_path / "engine.log.1", pair(6))  # written just before the switch
        log.write_text(pair(7) + pair(8))

    def truncate() -> None:
        log.write_text(pair(9))  # copytruncate: same inode, smaller

    sleep, done = scripted([
        lambda: append(log, pair(4) + pair(5)),
        rotate,
        lambda: None,
        truncate,
        lambda: append(log, pair(10)[:40]),  # a partial line...
        lambda: append(log, pair(10)[40:]),  # ...completed on the next poll
    ])
    counts = ParseCounts()
    w = list(iter_windows(str(log), year=2026, follow=True, counts=counts, stop=done,
                          poll_s=0.0, sleep=sleep))
    assert [round(((x.t_end_s or 0) - T0) / 10) for x in w] == list(range(1, 11))
    assert all(x.mal == pytest.approx(2.8) for x in w)
    assert (counts.rotations, counts.truncations) == (1, 1)
    assert counts.lines_parsed == 20


def test_follow_waits_for_missing_file_then_stops(tmp_path: Path):
    log = tmp_path / "later.log"
    def create() -> None:
        log.write_text(pair(1))

    sleep, done = scripted([lambda: None, create, lambda: None])
    w = list(iter_windows(str(log), year=2026, follow=True, stop=done, poll_s=0.0, sleep=sleep))
    assert len(w) == 1


def test_follow_final_partial_line_comes_back_as_the_growing_tail(tmp_path: Path):
    """The unfinished last line is handed on marked (issue 22): the writer may be mid-number,
    so the pipeline never reads numbers from it."""
    log = tmp_path / "p.log"
    log.write_bytes(b"abc\ndef")
    sleep, done = scripted([])
    blocks = [b for b in follow_blocks(str(log), ParseCounts(), stop=done, poll_s=0.0,
                                       sleep=sleep) if b is not None]
    assert blocks == [b"abc\n", b"def"]
    assert isinstance(blocks[-1], Tail) and blocks[-1].growing


def test_follow_real_time_with_a_writer_thread(tmp_path: Path):
    """The default sleep, a real writer, a bounded run (< 3 s)."""
    log = tmp_path / "live.log"
    log.write_text(pair(1))
    finished = threading.Event()

    def writer() -> None:
        for i in range(2, 5):
            time.sleep(0.05)
            append(log, pair(i))
        finished.set()

    th = threading.Thread(target=writer)
    th.start()
    deadline = time.monotonic() + 3.0
    seen: list[float] = []
    for w in iter_windows(str(log), year=2026, follow=True, poll_s=0.01,
                          stop=lambda: (finished.is_set() and len(seen) >= 3)
                          or time.monotonic() > deadline):
        seen.append(w.t_end_s or 0.0)
    th.join()
    assert len(seen) == 4
