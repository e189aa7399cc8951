"""A whole read of a big vLLM log on every core: byte ranges split at line starts.

The first range is read here, streaming, exactly as a sequential read; each other range is
read by a worker process with a warm-up (segments.py) and comes back as a list of windows,
its counters and its reader state at both ends. Before a range's windows are given out its
start state is compared with the state the range before ended in; on any difference the range
is read again here, from that exact state. So the windows, counters and spec summary are the
sequential read's, whatever the log holds; only the time differs.

Workers are forked: only from a process with one thread (a fork copies no other thread and
can deadlock on their locks), only where at least two CPUs are ours and, in auto mode, only
while a core is idle (load average).
"""

from __future__ import annotations

import os
import pickle
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from multiprocessing import get_context

from decodescope.records.window import EngineWindow
from decodescope.telemetry.logs.clock import Clock
from decodescope.telemetry.logs.parse_counts import ParseCounts
from decodescope.telemetry.logs.pipeline import LineReader
from decodescope.telemetry.logs.seek import YearRule, probe, read_head
from decodescope.telemetry.logs.segments import (
    RangeInfo,
    continues,
    copy_config,
    read_range,
    signature,
    supported,
)

PARALLEL_MIN_BYTES = 32 << 20  # below this a worker costs more than it saves
WARMUP_BYTES = 2 << 20  # lines read before a range to rebuild the state (hours of stats)
FIRST_SHARE = 0.4  # the first range is read here, which also sums up every window: less
IDLE_CORE_LOAD = 0.7  # auto mode needs the 1-min load average at most CPUs - 0.7


def cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def usable(size: int, min_bytes: int | None = None) -> bool:
    """A big file, two CPUs of ours, one thread, and a core idle: on a busy machine the
    worker waits for a core and its extra work (warm-up, pickling windows) makes the read
    slower than a sequential one (measured: docs/logs.md)."""
    try:
        idle = os.getloadavg()[0] <= cpus() - IDLE_CORE_LOAD
    except OSError:
        idle = False
    return (size >= (PARALLEL_MIN_BYTES if min_bytes is None else min_bytes) and cpus() >= 2
            and threading.active_count() == 1 and idle)


def _bounds(path: str, size: int, n: int) -> list[int]:
    """Range starts: 0, then line starts near the planned shares."""
    from decodescope.telemetry.logs.seek import _line_start

    rest = (1 - FIRST_SHARE) / (n - 1)
    cuts = [0] + [_line_start(path, int(size * (FIRST_SHARE + rest * i))) for i in range(n - 1)]
    return sorted(set(c for c in cuts if c < size))


def _work(path: str, engine: str, year: int | None, mtime: float | None, rule: YearRule,
          head_state: bytes, start: int, stop: int | None) -> tuple[list[EngineWindow], RangeInfo]:
    """A worker's range: warm up from WARMUP_BYTES before `start`, read to `stop`."""
    from decodescope.telemetry.logs.seek import _line_start

    warm = _line_start(path, max(0, start - WARMUP_BYTES))
    reader = LineReader(engine, Clock(year, mtime), ParseCounts())
    copy_config(pickle.loads(head_state), reader)
    with open(path, "rb") as f:
        p = probe(f, warm, os.path.getsize(path), rule, reader.clock)
    if p is not None:
        reader.clock.resume(p[2], p[3])
    info = RangeInfo(counts=reader.counts)
    windows = list(read_range(path, reader, start, stop, warm, info))
    return windows, info


def parallel_windows(path: str, *, engine: str | None, year: int | None, counts: ParseCounts,
                     reader_out: list[LineReader] | None = None, workers: int | None = None
                     ) -> Iterator[EngineWindow] | None:
    """The windows of a whole read, in line order, from several processes; None when this log
    cannot be split (not vLLM, engine not named in the head, too few CPUs)."""
    size = os.path.getsize(path)
    mtime = os.stat(path).st_mtime
    head = read_head(path, engine, year, mtime, size)
    if head.reader.engine is None or not supported(head.reader) \
            or _other_engines(path, head.reader):
        return None
    n = workers or cpus()
    bounds = _bounds(path, size, n)
    if len(bounds) < 2:
        return None
    return _run(path, engine, head.reader.engine.name, year, mtime, head.rule,
                pickle.dumps(head.reader), bounds, counts, reader_out)


def _other_engines(path: str, reader: LineReader) -> bool:
    """True when another engine's watch keyword is anywhere in the file: the sequential read
    then reads that engine too (from the line it first appears on), which the ranges cannot
    reproduce. One search pass per engine over the mapped file (~0.3 ms per MiB each)."""
    import mmap

    kws = [kw for kw in reader.keywords() if kw not in reader.engine.keywords] \
        if reader.engine is not None else []
    if not kws:
        return False
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        return any(m.find(kw) >= 0 for kw in kws)


def _run(path: str, engine_arg: str | None, engine: str, year: int | None, mtime: float | None,
         rule: YearRule, head_state: bytes, bounds: list[int], counts: ParseCounts,
         reader_out: list[LineReader] | None) -> Iterator[EngineWindow]:
    ends: list[int | None] = [*bounds[1:], None]
    ctx = get_context("fork")
    with ProcessPoolExecutor(max_workers=len(bounds) - 1, mp_context=ctx) as pool:
        futures: list[Future[tuple[list[EngineWindow], RangeInfo]]] = [
            pool.submit(_work, path, engine, year, mtime, rule, head_state, s, e)
            for s, e in zip(bounds[1:], ends[1:], strict=True)]
        reader = LineReader(engine_arg, Clock(year, mtime), counts)  # as a sequential read
        info = RangeInfo(counts=counts)
        if reader_out is not None:
            reader_out.append(reader)
        yield from read_range(path, reader, 0, ends[0], 0, info)
        spec_lines = info.spec_lines
        for fut, start, stop in zip(futures, bounds[1:], ends[1:], strict=True):
            assert info.end_state is not None
            before = pickle.loads(info.end_state)
            windows, got = fut.result()
            if continues(signature(before), got.start_signature, got.new_keys):
                counts.add(got.counts)
                yield from windows
                info = got
            else:  # read this range again from the exact state the range before ended in
                own = ParseCounts()
                before.counts = own
                info = RangeInfo(counts=own)
                yield from read_range(path, before, start, stop, start, info)
                counts.add(own)
            spec_lines += info.spec_lines
    final = info.final
    if final is not None:
        final.counts = counts
        final.assembler.spec_lines = spec_lines
        if reader_out is not None:
            reader_out[-1] = final
