"""A whole read of a plain SGLang log in bulk: big blocks, lines matched in bulk, numpy windows.

The per-line reader hands each `Decode batch` line to Python (decode, parse, duplicate check,
one EngineWindow, one summary add): ~30 µs a line. Here, in a block of 8 MiB, the keyword's
places are found and the whole common line (_TEMPLATE, the same as the regex _LINE) is
matched and its numbers read for all lines at once with numpy (linescan.py, no per-line
`re`); the stamps are read from the bytes before each line with numpy; the windows (duration, idle dilution) and their summary
(columns.add_columns) are computed as arrays. The answer is the per-line read's, bit for bit
(tests/test_logs_bulk.py compares whole summaries on the real logs and on logs with every
fault), because the bulk read handles only what it can show is ordinary and gives up
otherwise (`Unusual`; the caller then reads the log line by line, from its start):

- every `Decode batch` in the block is a whole line of one of the common shapes (SGLang's
  fields in its order, accept len and cuda graph or not, plain numbers, an ISO stamp and one
  engine tag for the whole log, no ANSI colour, `\n` endings);
- no line of another engine, no `decode_log_interval` launch line, no line over
  MAX_LINE_BYTES / 2, no keyword in an unfinished last line;
- no copies (two lines of the same second within DUP_RECENT lines whose running, gen
  throughput and accept len agree) and no stamp going backwards.
"""

from __future__ import annotations

import re
import sys
from collections import deque
from typing import Any, Protocol

import numpy as np

from decodescope.records.window import EngineWindow
from decodescope.telemetry.logs import sglang, vllm
from decodescope.telemetry.logs.accumulate import LogAccumulator
from decodescope.telemetry.logs.clock import Clock
from decodescope.telemetry.logs.columns import WindowColumns, add_columns
from decodescope.telemetry.logs.linescan import Scan, Template, Unusual, gather, match
from decodescope.telemetry.logs.parse_counts import ParseCounts
from decodescope.telemetry.logs.pipeline import _ALL_KEYWORDS, DUP_RECENT, DUP_WINDOW_S
from decodescope.telemetry.logs.pipeline import BACKWARDS_SLACK_S as BACK_S
from decodescope.telemetry.logs.reader import MAX_LINE_BYTES
from decodescope.telemetry.logs.sglang import (
    DEFAULT_DECODE_LOG_INTERVAL,
    IDLE_DILUTION_FACTOR,
    IDLE_DILUTION_SLACK_S,
    RECENT_WINDOWS,
)

BLOCK_BYTES = 8 << 20  # read unit: a few thousand Decode lines per numpy pass
FORMATS = ("sglang decode", "sglang decode +accept len")  # pipeline.format_of
_N = rb"\d+(?:\.\d+)?"
# Every `Decode batch` matches: group 1 is None when the rest is not the common shape.
_LINE = re.compile(
    rb"Decode batch(?:([.,] #running-req: (\d+), #token: \d+, token usage: " + _N +
    rb", (?:accept len: (" + _N + rb"), accept rate: " + _N + rb", )?"
    rb"(?:cuda graph: (?:True|False), )?gen throughput \(token/s\): (" + _N +
    rb"), #queue-req: \d+(?:, ?)?)(?=\n))?")
# The same line as a linescan template (matched in bulk, the numbers read with numpy).
_KEY = b"Decode batch"
_NUM = (b"dec", None)
_TEMPLATE: Template = (
    (b"alt", (b". #running-req: ", b", #running-req: ")), (b"int", "run"),
    (b"lit", b", #token: "), (b"int", None), (b"lit", b", token usage: "), _NUM,
    (b"lit", b", "),
    (b"opt", ((b"lit", b"accept len: "), (b"dec", "acc"), (b"lit", b", accept rate: "), _NUM,
              (b"lit", b", "))),
    (b"opt", ((b"lit", b"cuda graph: "), (b"alt", (b"True, ", b"False, ")))),
    (b"lit", b"gen throughput (token/s): "), (b"dec", "gen"), (b"lit", b", #queue-req: "),
    (b"int", None), (b"end", (b", \n", b",\n", b"\n")))
_HEAD = re.compile(rb"\n\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d((?: [A-Za-z]+\d+)*)\] ")
_DIGITS = [1 + i for i in (1, 2, 3, 4, 6, 7, 9, 10, 12, 13, 15, 16, 18, 19)]  # in _HEAD
# Searched after the first Decode line, as the per-line reader does (pipeline._ENGINES watch
# keywords): another engine's first stats line (auto mode reads that engine, --engine counts
# it) and SGLang's launch line (it sets the steps per Decode line): left to the per-line read.
_WATCH = (sglang.CONFIG_KEY.encode(), vllm.STATS_KEY.encode(), b"eval time =")


Buf = bytes | bytearray


def hour_epochs(hour: Any, cache: dict[int, float], clock: Clock) -> Any:
    """Epoch seconds of each YYYYMMDDHH key (a numpy array): each distinct hour is converted
    once by the log's clock (cached across blocks); an invalid date is Unusual."""
    keys, inv = np.unique(hour, return_inverse=True)
    base = np.empty(len(keys))
    for i, k in enumerate(keys.tolist()):
        b = cache.get(k)
        if b is None:
            b = clock.epoch(k // 1000000, k // 10000 % 100, k // 100 % 100, k % 100)
            if b is None:
                raise Unusual("an invalid date")
            cache[k] = b
        base[i] = b
    return base[inv]


SPARSE_LINES = 256  # a kept block of fewer windows keeps only their lines' bytes


def compact(data: Buf, places: list[tuple[Any, int]]) -> tuple[bytes, list[Any]]:
    """The lines of data at `places` (keyword places, -1: none, each array with the length of
    its lines' head: the bytes from the newline before the line to the keyword) as new bytes
    holding only them, and their places there. A kept block of few windows then holds a few
    lines, not its 8 MiB: a sparse log keeps its last windows' lines, not as many blocks."""
    out = bytearray()
    new = []
    for at, head in places:
        moved = np.full(len(at), -1, np.int64)
        for i, s in enumerate(at.tolist()):
            if s >= 0:
                moved[i] = len(out) + head
                out += data[s - head:data.find(b"\n", s)]
        new.append(moved)
    out += b"\n"
    return bytes(out), new


class _Block:
    """What the kept windows are rebuilt from: a block's bytes and its lines' places."""

    __slots__ = ("data", "starts", "d", "dil", "head")

    def __init__(self, data: Buf, starts: Any, d: Any, dil: Any, head: int) -> None:
        self.data, self.starts, self.d, self.dil, self.head = data, starts, d, dil, head


class BulkSglang:
    """The state carried from block to block (the per-line reader's, as arrays)."""

    def __init__(self, acc: LogAccumulator, counts: ParseCounts, max_windows: int) -> None:
        self.acc, self.counts, self.max_windows = acc, counts, max_windows
        self.steps = DEFAULT_DECODE_LOG_INTERVAL
        self.head: bytes | None = None  # the common line head, stamp digits included
        self.tag: str | None = None
        self.hours: dict[int, float] = {}
        self.clock = Clock(2000)  # only epoch() of explicit dates: no year is inferred
        self.prev: tuple[Any, ...] | None = None  # last DUP_RECENT records (t, R, A, G)
        self.first: tuple[float, float, float, float] | None = None  # held (t, R, A, G)
        self.first_block: _Block | None = None
        self.pending = False  # the first window waits for the second line
        self.recent: list[float] = []  # durations of the last RECENT_WINDOWS windows
        self.kept: deque[_Block] = deque()
        self.kept_n = 0
        self.scan: Scan | None = None

    def block(self, data: Buf, end: int, final: bool) -> int:
        """The whole lines of data[:end]; `data[0]` is the newline before the first."""
        before_first = self.head is None
        if self.scan is None:
            self.scan = Scan(data)
        buf = np.frombuffer(data, np.uint8)
        starts = self.scan.find(buf, data, _KEY, end)
        if before_first and _any_kw(data, _ALL_KEYWORDS, int(starts[0]) if len(starts) else end):
            raise Unusual("a keyword before the first Decode line")
        if self.scan.any_kw(data, _WATCH, end, buf):
            raise Unusual("another engine's line or the launch line")
        for p in range(0, end, MAX_LINE_BYTES // 2):
            if data.find(b"\n", p, min(end, p + MAX_LINE_BYTES // 2)) < 0:
                raise Unusual("a very long line")
        if not len(starts):
            return end
        got = match(buf, starts + len(_KEY), end, _TEMPLATE)
        t = self._stamps(data, starts)
        run, acc_len, gen = got["run"], got["acc"], got["gen"]
        self._integrity(t, run, acc_len, gen)
        self.counts.lines_matched += len(starts)
        self.counts.lines_parsed += len(starts)
        spec = ~np.isnan(acc_len)
        firsts = sorted((int(np.argmax(m)), k) for k, m in enumerate((~spec, spec)) if m.any())
        for _, k in firsts:  # a format is first counted where it first occurs
            self.counts.formats[FORMATS[k]] += int(np.count_nonzero(spec if k else ~spec))
        self._windows(data, starts, t, run, acc_len, gen)
        return end

    def _stamps(self, data: Buf, starts: Any) -> Any:
        if self.head is None:
            i = int(starts[0])
            m = _HEAD.fullmatch(data, data.rfind(b"\n", 0, i), i)
            if m is None:
                raise Unusual("a Decode line without the common ISO stamp and tag")
            self.head = m.group()
            self.tag = m.group(1).decode().strip() or None
        head = np.frombuffer(self.head, np.uint8)
        if int(starts[0]) < len(head):
            raise Unusual("a Decode line at the start of a block")
        buf = np.frombuffer(data, np.uint8)
        got = gather(buf, starts - len(head), len(head))
        fixed = np.ones(len(head), bool)
        fixed[_DIGITS] = False
        digits = got[:, _DIGITS].astype(np.int64) - 48
        if (got[:, fixed] != head[fixed]).any() or (digits < 0).any() or (digits > 9).any():
            raise Unusual("a Decode line with another head")
        def num(a: int, b: int) -> Any:
            out = digits[:, a]
            for k in range(a + 1, b):
                out = out * 10 + digits[:, k]
            return out
        y, mo, d, h = num(0, 4), num(4, 6), num(6, 8), num(8, 10)
        hour = ((y * 100 + mo) * 100 + d) * 100 + h
        return hour_epochs(hour, self.hours, self.clock) + num(10, 12) * 60 + num(12, 14)

    def _integrity(self, t: Any, run: Any, acc_len: Any, gen: Any) -> None:
        """Unusual on a possible copy (pipeline.LineReader._duplicate) or a jump back."""
        cols: tuple[Any, ...] = (t, run, acc_len, gen)
        if self.prev is not None:
            cols = tuple(np.concatenate((p, c)) for p, c in zip(self.prev, cols, strict=True))
        n0 = len(cols[0]) - len(t)
        ct, cr, ca, cg = cols
        if (ct[1:] < ct[:-1] - BACK_S).any():
            raise Unusual("a stamp going backwards")
        for k in range(1, DUP_RECENT + 1):
            if len(ct) <= k:
                break
            close = np.abs(ct[k:] - ct[:-k]) <= DUP_WINDOW_S
            same = (cr[k:] == cr[:-k]) & (cg[k:] == cg[:-k]) & \
                ((ca[k:] == ca[:-k]) | (np.isnan(ca[k:]) & np.isnan(ca[:-k])))
            if (close & same)[max(0, n0 - k):].any():
                raise Unusual("a possible copy of a line")
        self.prev = tuple(c[-DUP_RECENT:] for c in cols)

    def _windows(self, data: Buf, starts: Any, t: Any, run: Any, acc_len: Any,
                 gen: Any) -> None:
        with np.errstate(divide="ignore", invalid="ignore"):
            a = np.where(np.isnan(acc_len) | (acc_len == 0), 1.0, acc_len)  # accept_len or 1.0
            d = np.where((gen > 0) & (run > 0), float(self.steps) * run * a / gen, np.nan)
        if self.first is None:  # the tag's first line waits for the second
            self.first = (float(t[0]), float(run[0]), float(acc_len[0]), float(gen[0]))
            self.first_block = _Block(data, starts[:1], d[:1], np.zeros(1, bool),
                                      len(self.head or b""))
            t, run, acc_len, gen, d, starts = t[1:], run[1:], acc_len[1:], gen[1:], d[1:], \
                starts[1:]
            self.pending = True
        if not len(t):
            return
        if self.pending and self.first_block is not None:
            self.pending = False
            blk = self.first_block
            d0 = float(blk.d[0])
            dil0 = _diluted(d0, [float(d[0])] if d[0] == d[0] and d[0] else [])
            blk.dil[0] = dil0
            if d0 == d0 and not dil0:
                self.recent = [d0]
            self._add(blk, *self._first_cols(), blk.d, blk.dil)
        dil = self._dilution(d)
        self._add(_Block(data, starts, d, dil, len(self.head or b"")), t, run, acc_len, gen,
                  d, dil)

    def _first_cols(self) -> tuple[Any, Any, Any, Any]:
        assert self.first is not None
        t, run, acc_len, gen = (np.array([v]) for v in self.first)
        return t, run, acc_len, gen

    def _dilution(self, d: Any) -> Any:
        """sglang._diluted of each window against the durations of the last RECENT_WINDOWS
        windows not diluted: a fixed point, reached from the start (each pass settles at
        least the first window it changes: a window depends only on the ones before)."""
        valid = ~np.isnan(d)
        dil = np.zeros(len(d), bool)
        prior = np.array(self.recent)
        w = RECENT_WINDOWS
        while True:
            ok = valid & ~dil
            vals = np.concatenate((prior, d[ok]))
            cnt = len(prior) + np.cumsum(ok) - ok  # kept durations before each window
            med = np.full(len(d), np.nan)
            full = cnt >= w
            if full.any() and len(vals) >= w:
                win = np.sort(np.lib.stride_tricks.sliding_window_view(vals, w), axis=1)
                mid = (win[:, w // 2 - 1] + win[:, w // 2]) / 2
                med[full] = mid[cnt[full] - w]
            for i in np.flatnonzero(~full & (cnt > 0)).tolist():
                med[i] = sglang._median(vals[max(0, cnt[i] - w):cnt[i]].tolist())
            with np.errstate(invalid="ignore"):
                new = valid & (d > IDLE_DILUTION_FACTOR * med + IDLE_DILUTION_SLACK_S)
            if (new == dil).all():
                break
            dil = new
        self.recent = vals[-w:].tolist()
        return dil

    def _add(self, blk: _Block, t: Any, run: Any, acc_len: Any, gen: Any, d: Any,
             dil: Any) -> None:
        idle = gen <= 0
        rate_ok = ~idle & ~dil
        spec_off = np.isnan(acc_len)
        steps = float(self.steps) * run
        est = ~spec_off & (run != 0)  # accumulate._estimated_steps
        with np.errstate(divide="ignore", invalid="ignore"):
            per_req = gen / run
            step = np.where(spec_off, per_req, per_req / acc_len)  # steps.step_info
        known = rate_ok & (run > 0) & (spec_off | (acc_len != 0))
        flags = {"spec_off": spec_off, "may_include_idle": dil, "idle": idle}
        add_columns(self.acc, WindowColumns(
            engine="sglang", engine_id=self.tag, pid=None, t_start=t - d, t_end=t,
            running=run, rate=np.where(rate_ok, gen, np.nan), mal=acc_len,
            acc=np.where(est, steps * (acc_len - 1.0), 0.0), drafts=np.where(est, steps, 0.0),
            estimated=est, step=np.where(known, step, np.nan),
            drafts_rate=np.where(rate_ok & (run > 0) & spec_off, 0.0, np.nan), idle=idle,
            zero_running=int(np.count_nonzero(rate_ok & (run <= 0))), flags=flags))
        if len(blk.starts) < SPARSE_LINES:
            blk.data, (blk.starts,) = compact(blk.data, [(blk.starts, blk.head)])
        self.kept.append(blk)
        self.kept_n += len(blk.starts)
        while self.kept_n - len(self.kept[0].starts) >= self.max_windows:
            self.kept_n -= len(self.kept.popleft().starts)

    def finish(self) -> None:
        """The held first window when it was the only one; the kept windows, built by the
        per-line code from their lines."""
        if self.pending and self.first is not None and self.first_block is not None:
            blk = self.first_block  # the only line: flushed, not diluted
            self._add(blk, *self._first_cols(), blk.d, blk.dil)
        asm = sglang.SglangAssembler(ParseCounts())
        asm._steps = self.steps
        clock = Clock(2000)
        places: list[tuple[_Block, int, float, bool]] = []
        for blk in reversed(self.kept):
            for s, d, dil in zip(reversed(blk.starts.tolist()), reversed(blk.d.tolist()),
                                 reversed(blk.dil.tolist()), strict=True):
                if len(places) >= self.max_windows:
                    break
                places.append((blk, s, d, dil))
        out: list[EngineWindow] = []
        for blk, s, d, dil in reversed(places):
            data = blk.data
            text = data[s - blk.head + 1:data.find(b"\n", s)].decode()
            rec = sglang.parse(text, clock, ParseCounts())
            assert isinstance(rec, sglang.SDecode)
            out.append(asm._build(rec, None if d != d else d, dil))
        self.acc._kept.extend(out)


def _diluted(d: float, neighbours: list[float]) -> bool:
    return sglang._diluted(None if d != d else d, neighbours)


def _any_kw(data: Buf, kws: tuple[bytes, ...], end: int | None = None) -> bool:
    return any(data.find(kw, 0, end) >= 0 for kw in kws)


class Blocks(Protocol):
    head: Any  # None until the first stats line of the log was read

    def block(self, data: Buf, end: int, final: bool) -> int: ...


def read_blocks(path: str, bulk: Blocks, counts: ParseCounts, block_bytes: int) -> None:
    """Hand the whole lines of `path` to `bulk.block`, a block at a time (each starting with
    the newline before its first line; `block` returns where the lines it read end: the rest
    comes again with the next block). Unusual for a line over MAX_LINE_BYTES / 2 and for a
    keyword in an unfinished last line (the per-line read decides whether it is cut)."""
    rest: Buf = b"\n"  # from the newline before the first line not read yet
    cap = block_bytes + MAX_LINE_BYTES // 2 + 1  # a block and the rest of the one before
    pool: list[bytearray] = []  # the blocks read: reused once nothing refers to them
    with open(path, "rb", buffering=0) as f:
        while True:
            data = _free(pool) or bytearray(cap)  # bytes past the lines read are stale
            data[:len(rest)] = rest
            with memoryview(data) as view:
                got = f.readinto(view[len(rest):len(rest) + block_bytes])
            if not got:
                break
            counts.bytes_read += got
            n = len(rest) + got
            cut = data.rfind(b"\n", 0, n) + 1
            if n - cut >= MAX_LINE_BYTES // 2:
                raise Unusual("a very long line")
            rest = data[bulk.block(data, cut, False) - 1:n]
            pool.append(data)
    cut = rest.rfind(b"\n") + 1
    if cut > 1:
        bulk.block(rest, cut, True)
    if _any_kw(rest[cut:], _ALL_KEYWORDS):
        raise Unusual("a keyword in an unfinished last line")
    if bulk.head is None:
        raise Unusual("no stats line")


def _free(pool: list[bytearray]) -> bytearray | None:
    """A block of the pool that nothing else refers to (the kept windows, a held line and
    the keyword search's cache refer to theirs), taken out of it: its memory is reused,
    without the page faults of a new one. More than one such block: the others are dropped."""
    found = None
    for i in range(len(pool) - 1, -1, -1):
        if sys.getrefcount(pool[i]) == 2:  # the pool's own reference, getrefcount's argument
            b = pool.pop(i)
            if found is None:
                found = b
    return found


def read(path: str, acc: LogAccumulator, counts: ParseCounts, max_windows: int,
         block_bytes: int | None = None) -> int:
    """Sum up the whole plain SGLang log `path` into `acc` and `counts`; returns the decode
    steps per line assumed. Unusual when the log needs the per-line read (acc and counts are
    then spoiled: start again with new ones)."""
    bulk = BulkSglang(acc, counts, max_windows)
    read_blocks(path, bulk, counts, block_bytes or BLOCK_BYTES)
    bulk.finish()
    return bulk.steps
