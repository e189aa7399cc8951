"""Seek to a `--since/--until` window by time instead of reading the whole log (vLLM and
SGLang logs; llama.cpp stamps elapsed time only).

Stats lines are written in time order, so the byte offset of a time is found by bisection:
a probe at an offset reads the first stats line after it and its stamp. The range read then
starts LOOKBACK_S before `since` (the lines that rebuild each engine's stats interval, the
window just before the range and the duplicate check) and stops LOOKAHEAD_S after `until`.

The fallback is a whole read (the caller's), taken when anything says the seek could differ
from it: the head of the file does not name the engine or give a first window (which places
a date-less `--since 23:30`); probes spread over the file are not in time order; the windows
read are not in time order; an engine's interval decided in the range differs from the one
decided at the head, or had to be guessed; a spec line needs the launch config and the head
did not settle it; V0 cumulative counters. Year-less stamps: the year of a probed line is the
first line's year, plus one when its month is earlier than the first line's (the Clock's
December -> January rollover, for logs shorter than a year). A log that skips both December
and January across a new year (no line for two months) is read as the Clock reads it only by
the whole read: the seek would place the later lines a year on.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import BinaryIO

from decodescope.records.window import EngineWindow
from decodescope.telemetry.logs import sglang, vllm
from decodescope.telemetry.logs.clock import Clock, stamp_fields
from decodescope.telemetry.logs.lines import LineReader
from decodescope.telemetry.logs.parse_counts import ParseCounts
from decodescope.telemetry.logs.reader import read_lines
from decodescope.telemetry.logs.segments import RangeInfo, copy_config, read_range, supported
from decodescope.telemetry.logs.selectors import Selection
from decodescope.telemetry.logs.sglang import SglangAssembler
from decodescope.telemetry.logs.vllm_windows import VllmAssembler

SEEK_MIN_BYTES = 64 << 20  # smaller files are read whole: that takes well under a second
HEAD_BYTES = 4 << 20  # the head read: engine, launch config, first window, first stamp
PROBE_BYTES = 1 << 20  # a probe reads up to this far for a stats line
ORDER_PROBES = 32  # probes spread over the file that must be in time order
LOOKBACK_S = 600.0  # read from 10 min before --since: ≥ 4 stats lines of every engine
LOOKAHEAD_S = 120.0  # ... to 2 min after --until: spec lines and held windows come out
ORDER_SLACK_S = 60.0  # engines (and DP ranks) print a little out of order: allowed
STATS_KEY = vllm.STATS_KEY.encode()
# The line a probe looks for, per engine: one per window, stamped.
PROBE_KEYS = {"vllm": STATS_KEY, "sglang": sglang.DECODE_KEY.encode()}


@dataclass(frozen=True)
class YearRule:
    """The year of a year-less stamp from the first line's (see module doc)."""

    first: tuple[int, int, int, int, int] | None  # month, day, h, m, s of the first line
    year0: int | None

    def time_of(self, text: str, clock: Clock) -> tuple[float, int | None, int] | None:
        """(epoch seconds, year, month) of the last stamp in a line."""
        f = stamp_fields(text)
        if f is None:
            return None
        y, mo, d, h, mi, s = f
        if y is None:
            if self.year0 is None or self.first is None:
                return None
            y = self.year0 + (1 if mo < self.first[0] else 0)
        t = clock.epoch(y, mo, d, h, mi, s)
        return None if t is None else (t, y, mo)


@dataclass
class Head:
    reader: LineReader
    first_window: EngineWindow | None
    end: int  # byte offset where the head read stopped (a line start)
    rule: YearRule
    key: bytes = STATS_KEY  # the engine's probe keyword


def read_head(path: str, engine: str | None, year: int | None, mtime: float | None,
              size: int) -> Head:
    """Read the first HEAD_BYTES: engine, launch config, the first window, the year rule."""
    reader = LineReader(engine, Clock(year, mtime), ParseCounts())
    end = _line_start(path, min(size, HEAD_BYTES))
    first: EngineWindow | None = None
    first_lines: dict[bytes, str] = {}
    for raw in read_lines(path, reader.keywords, reader.counts, 0, end, at=reader.at,
                          tail=reader.tail):
        for key in PROBE_KEYS.values():
            if key not in first_lines and key in raw:
                first_lines[key] = raw.decode("utf-8", "replace")
        for w in reader.feed(raw):
            if first is None and w.t_end_s is not None:
                first = w
    rule = YearRule(None, None)
    key = PROBE_KEYS.get(reader.engine.name if reader.engine else "", STATS_KEY)
    first_line = first_lines.get(key)
    if first_line is not None:
        f = stamp_fields(first_line)
        probe = Clock(year, mtime)
        if f is not None and probe.stamp(first_line) is not None:
            y0 = f[0] if f[0] is not None else probe.state()[0]
            rule = YearRule(f[1:], y0)
    return Head(reader, first, end, rule, key)


def probe(f: BinaryIO, off: int, size: int, rule: YearRule, clock: Clock,
          key: bytes = STATS_KEY) -> tuple[int, float, int | None, int] | None:
    """(line offset, epoch s, year, month) of the first stamped stats line at or after the line
    start at/after `off`, within PROBE_BYTES; None when there is none."""
    f.seek(off)
    buf = f.read(min(PROBE_BYTES, size - off))
    base = 0
    if off > 0:
        nl = buf.find(b"\n")
        if nl < 0:
            return None
        base = nl + 1
    i = buf.find(key, base)
    while i >= 0:
        s = buf.rfind(b"\n", 0, i) + 1
        e = buf.find(b"\n", i)
        if e < 0:
            return None
        got = rule.time_of(buf[s:e].decode("utf-8", "replace"), clock)
        if got is not None:
            return off + s, *got
        i = buf.find(key, e)
    return None


def _line_start(path: str, off: int) -> int:
    """The first line start at or after `off`."""
    if off <= 0:
        return 0
    with open(path, "rb") as f:
        f.seek(off - 1)
        while True:
            block = f.read(1 << 16)
            if not block:
                return f.tell()
            nl = block.find(b"\n")
            if nl >= 0:
                return f.tell() - len(block) + nl + 1


def _bisect(f: BinaryIO, size: int, rule: YearRule, clock: Clock, target: float,
            key: bytes = STATS_KEY) -> int | None:
    """A line start before which every stats line is earlier than `target` and after which
    the first stats line is at or after it (time order assumed); None: a probe found nothing."""
    lo, hi = 0, size
    while hi - lo > PROBE_BYTES:
        mid = (lo + hi) // 2
        p = probe(f, mid, size, rule, clock, key)
        if p is None:
            return None
        if p[1] < target:
            lo = p[0] + 1
        else:
            hi = mid
    return lo


def seek_windows(path: str, selection: Selection, *, engine: str | None, year: int | None,
                 counts: ParseCounts, reader_out: list[LineReader] | None = None,
                 min_bytes: int | None = None) -> list[EngineWindow] | None:
    """Windows around the selection (the caller filters them), or None: read the whole file."""
    size = os.path.getsize(path)
    if size < (SEEK_MIN_BYTES if min_bytes is None else min_bytes) or not selection.active:
        return None
    mtime = os.stat(path).st_mtime
    head = read_head(path, engine, year, mtime, size)
    if head.first_window is None or not _seekable(head.reader) or head.rule.year0 is None:
        return None
    w0 = head.first_window
    selection.resolve_at(w0.t_start_s if w0.t_start_s is not None else w0.t_end_s or 0.0)
    clock = Clock(year, mtime)
    with open(path, "rb") as f:
        marks = [probe(f, k * size // ORDER_PROBES, size, head.rule, clock, head.key)
                 for k in range(ORDER_PROBES)]
        times = [m[1] for m in marks if m is not None]
        if any(b < a - ORDER_SLACK_S for a, b in zip(times, times[1:], strict=False)):
            return None  # not in time order: the bisection would not mean anything
        start, stop = 0, size
        if selection.since_s is not None:
            lo = _bisect(f, size, head.rule, clock, selection.since_s - LOOKBACK_S, head.key)
            if lo is None:
                return None
            start = lo
        if selection.until_s is not None:
            hi = _bisect(f, size, head.rule, clock, selection.until_s + LOOKAHEAD_S, head.key)
            if hi is None:
                return None
            stop = hi
        start_state = probe(f, start, size, head.rule, clock, head.key) if start > 0 else None
    if start_state is not None:
        start = start_state[0]  # a stats line: never its spec line without it
    stop = _line_start(path, stop + PROBE_BYTES) if stop < size else size
    if start <= head.end:
        start = 0
    own = ParseCounts()  # the caller's counters get them only when the seek is kept
    reader = LineReader(engine, Clock(year, mtime), own)
    if start > 0:
        if start_state is None:
            return None
        reader = LineReader(head.reader.engine.name if head.reader.engine else None,
                            Clock(year, mtime), own)
        reader.clock.resume(start_state[2], start_state[3])
        if isinstance(head.reader.assembler, SglangAssembler):  # the launch config
            asm = reader.assembler
            asm._steps, asm.config_known = head.reader.assembler._steps, \
                head.reader.assembler.config_known
        else:
            copy_config(head.reader, reader)
    end = None if stop >= size else stop
    if isinstance(head.reader.assembler, SglangAssembler):
        # Each Decode line is its window; the state (the durations of the last 8 lines, the
        # duplicate check) is rebuilt by the LOOKBACK_S of lines before `since`.
        windows = [w for raw in read_lines(path, reader.keywords, own, start, end,
                                           at=reader.at, tail=reader.tail)
                   for w in reader.feed(raw)]
        windows += reader.flush()
    else:
        windows = list(read_range(path, reader, start, end, start, RangeInfo()))
    if not _seekable(reader) or not _trustworthy(windows, reader, head.reader, start):
        return None  # (a second engine in the range: the whole read reads it from its start)
    own.bytes_skipped = size - own.bytes_read
    counts.add(own)
    if reader_out is not None:
        reader_out.append(reader)
    return windows


def _seekable(reader: LineReader) -> bool:
    """A vLLM log read for vLLM alone (segments.supported), or an SGLang one."""
    return supported(reader) or (isinstance(reader.assembler, SglangAssembler)
                                 and not reader.others and not reader.counts.other_engines)


def _trustworthy(windows: list[EngineWindow], reader: LineReader, head: LineReader,
                 start: int) -> bool:
    last = None
    for w in windows:
        t = w.t_end_s
        if t is None:
            return False
        if last is not None and t < last - ORDER_SLACK_S:
            return False
        last = t if last is None else max(last, t)
        if start > 0 and any(f == "k_from_config" or f.startswith("v0_") for f in w.flags) \
                and not head.assembler.config_known:
            return False
    if start == 0 or not isinstance(head.assembler, VllmAssembler):
        return True
    head_keys = head.assembler._keys
    for key, k in reader.assembler._keys.items():
        if k.interval_s is None:
            continue
        if k.guessed:
            return False
        h = head_keys.get(key)
        if h is not None and h.interval_s is not None and (h.interval_s, h.guessed) != \
                (k.interval_s, k.guessed):
            return False
    return True
