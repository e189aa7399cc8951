"""A whole read of a plain llama.cpp server log in bulk: big blocks, one C-speed pass a block.

The per-line reader hands each candidate line (five of a request's lines carry a keyword) to
Python one at a time: the keyword search, decode, the parser's regexes, the duplicate check
against the 16 records before, the counters (~200 µs a request in all). Here a block of 8 MiB
is searched once (`finditer` of _LINE: the whole line of each of the common shapes, only the
numbers the records need captured), and each match becomes the record `llamacpp.parse` gives
for its line (the same fields, the same arithmetic); the records then go through the per-line
code itself (`LlamacppAssembler.feed`, `_build`, `LogAccumulator.add`), so the windows and the
summary are the per-line read's, bit for bit (tests/test_logs_bulk.py compares whole
summaries). What the bulk read leaves out is the per-line work that only decides what a line
is; it handles only what it can show is ordinary and otherwise gives the log back to the
per-line read (`Unusual`; the caller then reads it from its start):

- every keyword in the block lies in a line of one of the common shapes (`print_timing`'s
  prompt eval / eval / total lines, the draft line with its MAL, the statistics line, the
  release line; elapsed-time stamps; `\\n` endings; no ANSI colour), one keyword a line; the
  context-level `llama_perf` lines at exit, which the per-line read skips, are skipped;
- no line of another engine (any of their keywords), no line over MAX_LINE_BYTES / 2, no
  keyword in an unfinished last line;
- the stamps never go back, and no two records of one stamp are equal (the per-line read's
  duplicate check compares records of the same elapsed stamp: it then finds none).
"""

from __future__ import annotations

import re
from typing import Any

from decodescope.telemetry.logs import llamacpp
from decodescope.telemetry.logs.accumulate import LogAccumulator
from decodescope.telemetry.logs.bulk_sglang import Buf, read_blocks
from decodescope.telemetry.logs.linescan import Unusual
from decodescope.telemetry.logs.llamacpp import LDraft, LlamacppAssembler, LRelease, LStats, LTime
from decodescope.telemetry.logs.parse_counts import ParseCounts
from decodescope.telemetry.logs.pipeline import _ALL_KEYWORDS
from decodescope.telemetry.logs.reader import MAX_LINE_BYTES

BLOCK_BYTES = 8 << 20
KEYWORDS = llamacpp.KEYWORDS
OTHERS = tuple(kw for kw in _ALL_KEYWORDS if kw not in KEYWORDS)  # vLLM's and SGLang's
_SKIP = b"llama_perf"  # llamacpp.parse: a context-level perf line, not a request (no record)
_D = rb"(\d+(?:\.\d+)?)"  # llamacpp._N
# One line of each common shape, from the newline before it to the one after it (a
# lookahead: the next line's newline begins its match). Group 1-4 the stamp, 5-6 slot and
# task, 7-9 a timing line, 10-14 the draft line, 15-20 the statistics line, 21-22 the release
# line's slot and task.
_LINE = re.compile(
    rb"\n(\d+)\.(\d\d)\.(\d\d\d)\.(\d\d\d) [IWEDT] (?:"
    rb"slot print_timing: id +(\d+) \| task (\d+) \| +(?:"
    rb"(prompt eval|eval|total) time = +" + _D + rb" ms / +(\d+) tokens"
    rb"(?: \( +\d+\.\d+ ms per token, +\d+\.\d+ tokens per second\))?"
    rb"|draft acceptance = \d+\.\d+ \( *(\d+) accepted / +(\d+) generated\), "
    rb"mean (acceptance length|len) = +(\d+\.\d+)"
    rb"(?:, acceptance rate per position = \(([0-9., ]*)\))?)"
    rb"|statistics +([A-Za-z0-9_.-]+): #calls\(b,g,a\) = [ 0-9]+, #gen drafts = +(\d+), "
    rb"#acc drafts = +\d+, #gen tokens = +(\d+), #acc tokens = +(\d+)"
    rb"(?:, #mean acc len = +(\d+\.\d+))?(?:, #acc rate/pos = \([0-9., ]*\))?"
    rb"(?:, dur\(b,g,a\) = [0-9., ]+ ms)?"
    rb"|slot +release: id +(\d+) \| task (\d+) \| stop processing: n_tokens = \d+, "
    rb"truncated = \d+)(?=\n)")
_FORMATS = {LTime: "llamacpp timing", LStats: "llamacpp statistics",
            LRelease: "llamacpp release"}  # pipeline.format_of


class BulkLlamacpp:
    """The per-line reader's state: the assembler, the last stamp and the records of it."""

    def __init__(self, acc: LogAccumulator, counts: ParseCounts) -> None:
        self.acc, self.counts = acc, counts
        self.asm = LlamacppAssembler(counts)
        self.head: Any = None  # not None once a record was read
        self.te = -1.0  # the last record's elapsed stamp
        self.same_te: set[Any] = set()  # the records of that stamp
        self.formats: dict[str, int] = {}

    def block(self, data: Buf, end: int, final: bool) -> int:
        """The whole lines of data[:end]; `data[0]` is the newline before the first."""
        for kw in OTHERS:
            if data.find(kw, 0, end) >= 0:
                raise Unusual("another engine's line")
        for p in range(0, end, MAX_LINE_BYTES // 2):
            if data.find(b"\n", p, min(end, p + MAX_LINE_BYTES // 2)) < 0:
                raise Unusual("a very long line")
        if data.find(b"\x1b", 0, end) >= 0 or data.find(b"\r", 0, end) >= 0:
            raise Unusual("ANSI colours or CRLF")
        keywords = sum(data.count(kw, 0, end) for kw in KEYWORDS)
        p = data.find(_SKIP, 0, end)
        while p >= 0:  # the per-line read skips these lines whole, keywords and all
            a, b = data.rfind(b"\n", 0, p) + 1, data.find(b"\n", p, end)
            line = bytes(data[a:b])
            keywords -= sum(line.count(kw) for kw in KEYWORDS)
            p = data.find(_SKIP, b, end)
        n = self._records(data, end)
        if n != keywords:
            raise Unusual("a keyword in a line of another shape")
        return end

    def _records(self, data: Buf, end: int) -> int:
        n = 0
        feed, add, formats = self.asm.feed, self.acc.add, self.formats
        same, te0 = self.same_te, self.te
        for m in _LINE.finditer(data, 0, end):
            g = m.groups()
            te = int(g[0]) * 60 + int(g[1]) + int(g[2]) / 1e3 + int(g[3]) / 1e6
            rec: Any
            if g[6] is not None:
                rec = LTime((int(g[4]), int(g[5])), g[6].decode(), float(g[7]), int(g[8]), te)
                fmt = "llamacpp timing"
            elif g[9] is not None:
                pp = llamacpp._floats(g[13].decode()) if g[13] is not None else None
                rec = LDraft((int(g[4]), int(g[5])), int(g[9]), int(g[10]), float(g[12]),
                             pp or None, te)
                fmt = "llamacpp draft +mean acceptance length"
            elif g[14] is not None:
                rec = LStats(g[14].decode(), int(float(g[15])), int(float(g[16])),
                             int(float(g[17])), te,
                             float(g[18]) if g[18] is not None else None)
                fmt = "llamacpp statistics"
            else:
                rec = LRelease((int(g[19]), int(g[20])), te)
                fmt = "llamacpp release"
            if te != te0:
                if te < te0:
                    raise Unusual("a stamp going back")
                te0 = te
                same.clear()
            key = (type(rec), rec)
            if key in same:
                raise Unusual("a possible copy of a record")
            same.add(key)
            n += 1
            formats[fmt] = formats.get(fmt, 0) + 1
            for w in feed(rec):
                add(w)
        self.te = te0
        if n:
            self.head = True
        return n

    def finish(self) -> None:
        for w in self.asm.flush():
            self.acc.add(w)
        self.counts.lines_matched += sum(self.formats.values())
        self.counts.lines_parsed += sum(self.formats.values())
        for fmt, k in self.formats.items():
            self.counts.formats[fmt] += k


def read(path: str, acc: LogAccumulator, counts: ParseCounts,
         block_bytes: int | None = None) -> None:
    """Sum up the whole plain llama.cpp log `path` into `acc` and `counts`. Unusual when the
    log needs the per-line read (acc and counts are then spoiled: start again with new
    ones)."""
    bulk = BulkLlamacpp(acc, counts)
    read_blocks(path, bulk, counts, block_bytes or BLOCK_BYTES)
    bulk.finish()
