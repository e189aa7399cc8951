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
- the lines come in the common order of a request (prompt eval, eval, total, [draft,
  [statistics]], release; one slot and task); the stamps never go back and each request is
  stamped after the one before (the per-line read's duplicate check compares records of the
  same elapsed stamp: those of one request, of different kinds, are never equal).
"""

from __future__ import annotations

import re
from collections import deque
from typing import Any

import numpy as np

from decodescope.telemetry.logs import figures, llamacpp, sglang, vllm
from decodescope.telemetry.logs.accumulate import (
    MAX_SHAPES,
    MOST_STEPS,
    OVERLAP_KEPT,
    LogAccumulator,
    _Shape,
)
from decodescope.telemetry.logs.bins import add_columns
from decodescope.telemetry.logs.bulk_sglang import Buf, read_blocks
from decodescope.telemetry.logs.columns import _seq
from decodescope.telemetry.logs.linescan import Unusual
from decodescope.telemetry.logs.llamacpp import LDraft, LlamacppAssembler, LRelease, LStats, LTime
from decodescope.telemetry.logs.parse_counts import ParseCounts
from decodescope.telemetry.logs.pipeline import _ALL_KEYWORDS
from decodescope.telemetry.logs.reader import MAX_LINE_BYTES
from decodescope.telemetry.logs.steps import FULL_COVERAGE

BLOCK_BYTES = 8 << 20
KEYWORDS = llamacpp.KEYWORDS
OTHERS = tuple(kw for kw in _ALL_KEYWORDS if kw not in KEYWORDS)  # vLLM's and SGLang's
WATCH = (vllm.STATS_KEY.encode(), sglang.DECODE_KEY.encode())  # pipeline._ENGINES' watch
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
    """The per-line reader's state: the request being read, the last stamp and its records,
    the statistics line before, the requests that ran recently, the kept requests."""

    def __init__(self, acc: LogAccumulator, counts: ParseCounts, max_windows: int) -> None:
        self.acc, self.counts, self.max_windows = acc, counts, max_windows
        self.head: Any = None  # not None once a record was read
        self.te = -1.0  # the last record's elapsed stamp
        self.formats: dict[str, int] = {}
        self.state = 0  # the next line of a request: 0 prompt eval, 1 eval, 2 total, 3-5
        self.req: list[Any] = []  # the request being read: its lines' groups
        self.kept: deque[list[Any]] = deque()  # the last max_windows requests' groups
        self.kept_stats: dict[str, LStats] = {}  # _last_stats before the oldest kept
        self.last_stats: dict[bytes, tuple[int, int, int]] = {}  # impl -> (gd, gt, at)
        self.spans: Any = np.empty((0, 2))  # the last OVERLAP_KEPT requests' (start, end)

    def block(self, data: Buf, end: int, final: bool) -> int:
        """The whole lines of data[:end]; `data[0]` is the newline before the first."""
        # Before the first record the per-line read looks for every engine's keywords;
        # after it, for one on each other engine's first stats line (pipeline's watch).
        for kw in (OTHERS if self.head is None else WATCH):
            if data.find(kw, 0, end) >= 0:
                raise Unusual("another engine's line")
        for p in range(0, end, MAX_LINE_BYTES // 2):
            if data.find(b"\n", p, min(end, p + MAX_LINE_BYTES // 2)) < 0:
                raise Unusual("a very long line")
        keywords = sum(data.count(kw, 0, end) for kw in KEYWORDS)
        p = data.find(_SKIP, 0, end)
        while p >= 0:  # the per-line read skips these lines whole, keywords and all
            a, b = data.rfind(b"\n", 0, p) + 1, data.find(b"\n", p, end)
            line = bytes(data[a:b])
            keywords -= sum(line.count(kw) for kw in KEYWORDS)
            p = data.find(_SKIP, b, end)
        n, rows = self._records(data, end)
        if n != keywords:
            raise Unusual("a keyword in a line of another shape")
        if rows:
            self._add(rows)
        return end

    def _records(self, data: Buf, end: int) -> tuple[int, list[Any]]:
        """The records of the block's lines, as requests of the common order (prompt eval,
        eval, total, [draft, [statistics]], release, one slot and task): each a row of
        numbers. Unusual for any other order, a stamp going back, a possible copy."""
        n = 0
        formats = self.formats
        te0, state, req = self.te, self.state, self.req
        rows: list[Any] = []
        kept, mw = self.kept, self.max_windows
        for m in _LINE.finditer(data, 0, end):
            g = m.groups()
            te = int(g[0]) * 60 + int(g[1]) + int(g[2]) / 1e3 + int(g[3]) / 1e6
            key: Any
            if g[6] is not None:
                kind = g[6]
                key = (0, int(g[4]), int(g[5]), kind, float(g[7]), int(g[8]), te)
                if state != (0 if kind == b"prompt eval" else 1 if kind == b"eval" else 2):
                    raise Unusual("timing lines of another order")
                fmt = "llamacpp timing"
                state += 1
            elif g[9] is not None:
                pp = _per_pos(g[13]) if g[13] is not None else None
                key = (1, int(g[4]), int(g[5]), int(g[9]), int(g[10]), float(g[12]), pp or None,
                       te)
                if state != 3:
                    raise Unusual("a draft line out of order")
                fmt = "llamacpp draft +mean acceptance length"
                state = 4
            elif g[14] is not None:
                key = (2, g[14], int(float(g[15])), int(float(g[16])), int(float(g[17])), te,
                       float(g[18]) if g[18] is not None else None)
                if state != 4:
                    raise Unusual("a statistics line out of order")
                fmt = "llamacpp statistics"
                state = 5
            else:
                key = (3, int(g[19]), int(g[20]), te)
                if state < 3:
                    raise Unusual("a release line out of order")
                fmt = "llamacpp release"
                state = 6
            # The per-line read drops a record equal to a recent one of the same stamp: with
            # each request stamped after the one before, the records of one stamp are of one
            # request, of different kinds (or timing lines of different kinds): none equal.
            if te < te0 or (te == te0 and state == 1):
                raise Unusual("a stamp going back, or two requests of one stamp")
            te0 = te
            if key[0] != 2 and req and (key[1], key[2]) != (req[0][1], req[0][2]):
                raise Unusual("a request's lines of two slots or tasks")
            req.append(key)
            n += 1
            formats[fmt] = formats.get(fmt, 0) + 1
            if state == 6:
                rows.append(req)
                if mw:
                    kept.append(req)
                    if len(kept) > mw:
                        old = kept.popleft()
                        if len(old) == 6:
                            s = old[4]
                            self.kept_stats[s[1].decode()] = LStats(
                                s[1].decode(), s[2], s[3], s[4], s[5], s[6])
                req = []
                state = 0
        self.te, self.state, self.req = te0, state, req
        if n:
            self.head = True
        return n, rows

    def _add(self, rows: list[Any]) -> None:
        """LlamacppAssembler._build and LogAccumulator.add of each request, as arrays (the
        same values, the same order of every sum)."""
        acc = self.acc
        k = len(rows)
        slot = np.array([r[0][1] for r in rows], np.int64)
        pe_ms = np.array([r[0][4] for r in rows])
        ev_ms = np.array([r[1][4] for r in rows])
        ev_tok = np.array([r[1][5] for r in rows], np.int64)
        te = np.array([r[2][6] for r in rows])
        has_d = np.array([len(r) >= 5 for r in rows])
        d_acc = np.array([r[3][3] if len(r) >= 5 else 0 for r in rows], np.int64)
        d_gen = np.array([r[3][4] if len(r) >= 5 else 0 for r in rows], np.int64)
        d_mal = np.array([r[3][5] if len(r) >= 5 else np.nan for r in rows])
        # drafts: from the statistics line (this request's, or the one before of its
        # implementation, diffed), else from the printed MAL (LlamacppAssembler._drafts)
        drafts = np.zeros(k, np.int64)
        has_dr = np.zeros(k, bool)  # drafts known (not None)
        from_mal = np.zeros(k, bool)
        last = self.last_stats
        for i, r in enumerate(rows):
            if len(r) == 6:
                s = r[4]
                prev = last.get(s[1])
                last[s[1]] = (s[2], s[3], s[4])
                gd, gt, at = s[2], s[3], s[4]
                a, g = int(d_acc[i]), int(d_gen[i])
                if (gt, at) == (g, a):
                    drafts[i], has_dr[i] = gd, True
                    continue
                if prev is not None and (gt - prev[1], at - prev[2]) == (g, a):
                    drafts[i], has_dr[i] = gd - prev[0], True
                    continue
            if len(r) >= 5:
                dm = _from_mal(int(d_acc[i]), float(d_mal[i]))
                if dm is not None:
                    drafts[i], has_dr[i] = dm, True
                    from_mal[i] = True
        gen = np.maximum(ev_tok - 1, 0)
        counted = has_dr & (drafts != 0)  # w.drafts and accepted: counts
        with np.errstate(divide="ignore", invalid="ignore"):
            dsec = ev_ms / 1e3
            decode = np.where(ev_ms > 0, gen / dsec, np.nan)  # generation_throughput
            mal = np.where(counted, 1.0 + d_acc / np.where(counted, drafts, 1),
                           np.where(has_d & ~has_dr, d_mal, np.nan))  # EngineWindow.mal
            est = has_d & ~has_dr & (gen != 0) & (d_mal > 0)  # accumulate._estimated_steps
            est_steps = np.where(est, gen / d_mal, 0.0)
            est &= est_steps != 0
            w_acc = np.where(counted, d_acc.astype(float),
                             np.where(est, est_steps * (d_mal - 1.0), 0.0))
            w_dr = np.where(counted, drafts.astype(float), np.where(est, est_steps, 0.0))
            # steps.step_info, llama.cpp's branches (running 1, no clock time)
            per_req = np.where(dsec != 0, dsec, np.nan)
            drate = np.where(has_dr, drafts / per_req, np.nan)
            steps = (gen - d_acc).astype(float)
            withheld = counted & (steps < drafts - 0.5) & ~np.isnan(per_req)
            full = counted & ~withheld & ~np.isnan(per_req)
            st_c = np.maximum(steps, drafts)
            prr = decode  # decode_rate / running (1.0)
            no_dr = (has_dr & (drafts == 0)) | ~has_d
            step = np.where(full, st_c / per_req,
                            np.where(counted, np.nan,
                                     np.where(no_dr, prr,
                                              np.where((mal != 0) & ~np.isnan(mal),
                                                       prr / mal, np.nan))))
            cov = np.where(full, drafts / st_c, np.where(~counted & no_dr & ~np.isnan(prr),
                                                         0.0, np.nan))
            d_rate = np.where(counted, drate, np.where(no_dr & ~np.isnan(prr), 0.0, np.nan))
            tps = np.where(full, gen / st_c,
                           np.where(counted, np.nan,
                                    np.where(no_dr, np.where(np.isnan(prr), np.nan, 1.0),
                                             np.where((mal != 0) & ~np.isnan(mal)
                                                      & ~np.isnan(prr), mal, np.nan))))
        acc.n += k
        spec_off = ~has_d
        flags = {"no_clock_time": np.ones(k, bool), "spec_off": spec_off,
                 "drafts_from_mal": from_mal}
        firsts = []
        for pos, (name, mask) in enumerate(flags.items()):
            idx = np.flatnonzero(mask)
            if idx.size:
                firsts.append((int(idx[0]), pos, name, int(idx.size)))
        for _, _, name, cnt in sorted(firsts):
            acc.flag_counts[name] = acc.flag_counts.get(name, 0) + cnt
        acc._gen += int(gen.sum())
        acc._has_gen = True
        if counted.any():
            acc._acc += int(d_acc[counted].sum())
            acc._drafts += int(drafts[counted].sum())
            acc._has_counts = True
        acc._est_acc = _seq(acc._est_acc, w_acc[est])
        acc._est_steps = _seq(acc._est_steps, w_dr[est])
        for sl in dict.fromkeys(slot.tolist()):
            key = (None, f"slot {sl}", "llamacpp")
            eng = acc._engines.get(key)
            if eng is None:
                eng = acc._engines[key] = [0, 0.0, 0.0, None, None]
            mine = slot == sl
            eng[0] += int(np.count_nonzero(mine))
            eng[1] = _seq(eng[1], w_acc[mine])
            eng[2] = _seq(eng[2], w_dr[mine])
        figures.extend(acc._mal, mal)
        acc.step_withheld += int(np.count_nonzero(withheld))
        acc.step_unknown += int(np.count_nonzero(~withheld & np.isnan(step) & has_dr
                                                 & (drafts != 0)))
        hc = ~np.isnan(cov) & counted
        acc.partial_coverage += int(np.count_nonzero(cov[hc] < FULL_COVERAGE))
        acc._cov_drafts = _seq(acc._cov_drafts, drafts[hc].astype(float))
        acc._cov_steps = _seq(acc._cov_steps, drafts[hc] / cov[hc])
        figures.extend(acc._drafts_rate, d_rate)
        figures.extend(acc._dec, decode)
        figures.extend(acc._dec_req, decode / 1.0)
        figures.extend(acc._step, step)
        figures.extend(acc._run, np.ones(k))
        _bins(acc, slot, decode, w_acc, w_dr, step, flags)
        # requests by shape (accumulate._request)
        drafting = np.where(no_dr, 0, np.where(np.isnan(cov), 1, np.where(cov >= MOST_STEPS,
                                                                           2, 3)))
        names = ("no drafts", "drafts unknown", "most steps drafted", "few steps drafted")
        skey = ev_tok * 4 + drafting
        shapes = acc._shapes
        where: dict[Any, Any] = {}
        first = {}
        for i, sk in enumerate(skey.tolist()):
            if sk not in first:
                first[sk] = i
        other = np.zeros(k, bool)
        for sk in first:
            mask = skey == sk
            kk = (sk // 4, names[sk % 4])
            sh = shapes.get(kk)
            if sh is None:
                if len(shapes) >= MAX_SHAPES:
                    other |= mask
                    continue
                sh = shapes[kk] = _Shape()
            where[kk] = mask
        acc._shapes_other += int(np.count_nonzero(other))
        for kk, mask in where.items():
            sh = shapes[kk]
            sh.n += int(np.count_nonzero(mask))
            figures.extend(sh.decode, decode[mask] / 1.0)
            figures.extend(sh.step, step[mask])
            cm = mask & counted
            sh.acc += int(d_acc[cm].sum())
            sh.drafts += int(drafts[cm].sum())
            tm = mask & ~np.isnan(tps) & (tps != 0)
            sh.gen = _seq(sh.gen, gen[tm].astype(float))
            with np.errstate(divide="ignore", invalid="ignore"):
                sh.steps = _seq(sh.steps, gen[tm] / tps[tm])
        # how many ran at once (accumulate._note_span, the ends in order)
        prompt_s = np.where(pe_ms > 0, pe_ms / 1e3, 0.0)
        start = te - dsec - prompt_s
        spans = np.concatenate((self.spans, np.stack((start, te), axis=1)))
        s0, e0 = spans[:, 0], spans[:, 1]
        n0 = len(self.spans)
        idx = np.arange(n0, len(spans))
        # the kept requests that may have ended after `start` (ends in order: a suffix)
        low = np.minimum(np.maximum(np.searchsorted(e0, start, "right"), idx - OVERLAP_KEPT),
                         idx)
        during = np.zeros(k, np.int64)
        for back in range(1, int((idx - low).max()) + 1):
            at = idx - back
            during += (at >= low) & (s0[np.maximum(at, 0)] < te)
        top = 1 + int(during.max())
        acc._max_at_once = max(acc._max_at_once or 0, top)
        self.spans = spans[-OVERLAP_KEPT:]
        acc._spans.clear()
        acc._spans.extend(map(tuple, self.spans.tolist()))

    def finish(self) -> None:
        if self.state != 0:
            raise Unusual("a request without its release line")
        self.counts.lines_matched += sum(self.formats.values())
        self.counts.lines_parsed += sum(self.formats.values())
        for fmt, k in self.formats.items():
            self.counts.formats[fmt] += k
        asm = LlamacppAssembler(ParseCounts())  # the kept windows, by the per-line code
        asm._last_stats = dict(self.kept_stats)
        out = []
        for r in self.kept:
            for key in r:
                rec = _record(key)
                out += asm.feed(rec)
        out += asm.flush()
        self.acc._kept.extend(out)


def _record(key: Any) -> Any:
    """The record `llamacpp.parse` gives, from a request row."""
    if key[0] == 0:
        return LTime((key[1], key[2]), key[3].decode(), key[4], key[5], key[6])
    if key[0] == 1:
        return LDraft((key[1], key[2]), key[3], key[4], key[5], key[6], key[7])
    if key[0] == 2:
        return LStats(key[1].decode(), key[2], key[3], key[4], key[5], key[6])
    return LRelease((key[1], key[2]), key[3])


_PER_POS: dict[bytes, tuple[float, ...] | None] = {}


def _per_pos(text: bytes) -> tuple[float, ...] | None:
    """llamacpp._floats of a per-position list (a few distinct lists in a log: cached)."""
    got = _PER_POS.get(text, ())
    if got == ():
        if len(_PER_POS) > 10_000:
            _PER_POS.clear()
        got = _PER_POS[text] = llamacpp._floats(text.decode())
    return got


_MAL_CACHE: dict[tuple[int, float], int | None] = {}


def _from_mal(accepted: int, mal: float) -> int | None:
    k = (accepted, mal)
    if k not in _MAL_CACHE:
        if len(_MAL_CACHE) > 100_000:
            _MAL_CACHE.clear()
        _MAL_CACHE[k] = llamacpp.drafts_from_mal(accepted, mal)
    return _MAL_CACHE[k]


def _bins(acc: LogAccumulator, slot: Any, decode: Any, w_acc: Any, w_dr: Any, step: Any,
          flags: dict[str, Any]) -> None:
    """Binner.add of each window (no clock time; engine id `slot N`; running 1)."""
    bn = acc._bins
    n, i = len(slot), 0
    ones = np.ones(n)
    while i < n:
        b = bn._current(f"slot {slot[i]}")
        j = min(i + bn._per_bin - b.n, n)
        if b.eid is not None and any(f"slot {u}" != b.eid for u in set(slot[i:j].tolist())):
            b.eid = None  # add: a window of another engine id than the bin's
        add_columns(b, slice(i, j), decode, w_acc, w_dr, step, ones, flags, _seq)
        i = j


def read(path: str, acc: LogAccumulator, counts: ParseCounts, max_windows: int,
         block_bytes: int | None = None) -> None:
    """Sum up the whole plain llama.cpp log `path` into `acc` and `counts`. Unusual when the
    log needs the per-line read (acc and counts are then spoiled: start again with new
    ones)."""
    bulk = BulkLlamacpp(acc, counts, max_windows)
    read_blocks(path, bulk, counts, block_bytes or BLOCK_BYTES)
    bulk.finish()
