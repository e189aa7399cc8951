"""File -> engine windows: `iter_windows`, the one read of a log (sequential, a seek for a time
window of a big file, or follow mode), over lines.LineReader.

`iter_windows` is the stream (an iterator, constant memory); `select_window_times` applies
`--since/--until`. The engine is given or detected from the first line that parses; after
that its keywords are searched, plus one watch keyword of each other engine: a log that mixes
two engines (an SGLang server's lines between a vLLM server's) is read for both, each into
its own assembler (auto mode), or its other engine's lines are counted and said (--engine
given); never dropped silently. Stamps going backwards are counted (ParseCounts.backwards).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Generator, Iterator

from decodescope.records.window import EngineWindow
from decodescope.telemetry.logs.clock import Clock
from decodescope.telemetry.logs.lines import ENGINE_NAMES, IDLE_FLUSH_S, LineReader
from decodescope.telemetry.logs.parse_counts import ParseCounts
from decodescope.telemetry.logs.reader import (
    FOLLOW_POLL_S,
    Tail,
    _block_lines,
    check_followable,
    check_log_path,
    compression,
    follow_blocks,
    read_lines,
)
from decodescope.telemetry.logs.seek import seek_windows
from decodescope.telemetry.logs.selectors import Selection

# The sequential read hands windows on in batches (line order kept): reading the lines of
# a thousand windows, then summing those up, keeps each stage's code and data in the CPU caches
# (~15 % less CPU than one window at a time). Follow mode hands each on as it comes.
WINDOW_BATCH = 1024


def iter_windows(path: str, *, engine: str | None = None, year: int | None = None,
                 counts: ParseCounts | None = None, follow: bool = False,
                 stop: Callable[[], bool] | None = None, poll_s: float = FOLLOW_POLL_S,
                 sleep: Callable[[float], object] = time.sleep,
                 reader_out: list[LineReader] | None = None,
                 selection: Selection | None = None, offset: int = 0) -> Iterator[EngineWindow]:
    """Engine windows of a log file, in line order (a few lines are held back per engine).

    engine: "vllm" | "sglang" | "llamacpp" | None (detect). year: year of the first
    year-less line (default: from the file's mtime). follow: keep reading as the file grows
    until `stop()` is true (`sleep` is the wait between polls: a seam for tests), from byte
    `offset` (a probe's `--log` tail starts at the size the log had). `counts` receives the
    line counters.

    Big files (not in follow mode): with an active `selection` (--since/--until, resolved
    here) the read seeks to its window and yields the windows around it, which the caller
    filters (seek.py; it gives the windows of a sequential read, or falls back to one);
    otherwise sequentially, in bounded memory.
    """
    counts = counts if counts is not None else ParseCounts()
    if follow:
        check_followable(path)
    else:
        check_log_path(path)
        counts.compressed = compression(path)
        # byte offsets of a compressed file mean nothing
        if counts.compressed is None and selection is not None and selection.active:
            yielded = yield from _seek(path, engine, year, counts, reader_out, selection)
            if yielded:
                return
    try:
        mtime = os.stat(path).st_mtime
    except FileNotFoundError:  # follow mode waits for the file
        mtime = None
    lr = LineReader(None if engine in (None, "auto") else engine, Clock(year, mtime), counts,
                    live=follow)
    if reader_out is not None:
        reader_out.append(lr)
    if not follow:
        feed = lr.feed
        batch: list[EngineWindow] = []
        for raw in read_lines(path, lr.keywords, counts, at=lr.at, tail=lr.tail):
            out = feed(raw)
            if out:  # most lines give no window (held, or the second line of one)
                batch += out
                if len(batch) >= WINDOW_BATCH:
                    yield from batch
                    batch = []
        yield from batch
        yield from lr.flush()
        return
    idle_polls = 0
    base = offset  # offset of the block in the text followed (across rotations)
    for block in follow_blocks(path, counts, stop=stop or (lambda: False), poll_s=poll_s,
                               sleep=sleep, offset=offset):
        if block is None:
            idle_polls += 1
            if poll_s > 0 and idle_polls * poll_s >= IDLE_FLUSH_S:
                idle_polls = 0
                yield from lr.flush()
            continue
        idle_polls = 0
        if isinstance(block, Tail):  # the last line, without its newline
            lr.tail[0], lr.growing = True, block.growing
        for raw in _block_lines(block, len(block), lr.keywords, base, lr.at):
            yield from lr.feed(raw)
        lr.tail[0] = lr.growing = False
        base += len(block)
    yield from lr.flush()


def _seek(path: str, engine: str | None, year: int | None, counts: ParseCounts,
          reader_out: list[LineReader] | None,
          selection: Selection) -> Generator[EngineWindow, None, bool]:
    """Seek to the selected time window of a big file; returns False when the caller reads
    it whole."""
    eng = None if engine in (None, "auto") else engine
    seeked = seek_windows(path, selection, engine=eng, year=year, counts=counts,
                          reader_out=reader_out)
    if seeked is None:
        return False
    yield from seeked
    return True


__all__ = ["ENGINE_NAMES", "LineReader", "Selection", "iter_windows"]
