"""A whole read of a plain llama.cpp server log in bulk: big blocks, lines matched in bulk.

The per-line reader hands each candidate line (six of a request's lines carry a keyword) to
Python one at a time: the keyword search, decode, the parser's regexes, the duplicate check
against the 16 records before, the counters (~200 µs a request in all). Here, in a block of
8 MiB, the keywords' places are found (linescan.Scan: one numpy compare per byte the
keywords are found by, shared between keywords), each keyword's line is matched against
the template of its shape, up to the last number its record takes (as `llamacpp.parse`,
whose regexes search and never anchor at the line's end), and its numbers read for all
lines at once with numpy (linescan.match: no `re`, no Python per line); the request order
is checked and
the requests built and summed as arrays (`_add`: LlamacppAssembler._build and
LogAccumulator.add, the same values, the same order of every sum); the kept windows are
rebuilt at the end by the per-line code itself (`LlamacppAssembler.feed`). The windows and
the summary are the per-line read's, bit for bit (tests/test_logs_bulk.py compares whole
summaries). The bulk read handles only what it can show is ordinary and otherwise gives the
log back to the per-line read (`Unusual`; the caller then reads it from its start):

- every keyword in the block lies in a line of one of the common shapes (`print_timing`'s
  prompt eval / eval / total lines, the draft line with its MAL, the statistics line, the
  release line; an elapsed-time stamp first, no ANSI colour), one keyword a line, once; the
  context-level `llama_perf` lines at exit, which the per-line read skips, are skipped;
- no line of another engine (any of their keywords), no line over MAX_LINE_BYTES / 2, no
  keyword in an unfinished last line;
- the lines come in the common order of a request (prompt eval, eval, total, [draft,
  [statistics]], release; one slot and task); the stamps never go back and each request is
  stamped after the one before (the per-line read's duplicate check compares records of the
  same elapsed stamp: those of one request, of different kinds, are never equal).
"""

from __future__ import annotations

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
from decodescope.telemetry.logs.linescan import (
    Scan,
    Template,
    Unusual,
    _nondigit,
    _zero_bytes,
    match,
    words,
)
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
MAX_CARRY = 64  # records of a request not released by the end of a block (more: Unusual)
SUM_MAX = 1 << 62  # counts of a block summed as int64 below this (else Unusual)
MAX_NAME = 32  # bytes of a statistics line's implementation name (longer: Unusual)
_DIGITS = b"0123456789"
_LOW = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], np.uint64)
# The templates: the line from its first byte (the elapsed stamp), then by kind (the
# keyword says which). They accept what the per-line parser reads the same numbers from
# (`llamacpp.parse`: its _FAST_TIME, _DRAFT, _MAL, _PER_POS, _STAT*, _SLOT regexes).
_STAMP: Template = (
    (b"int", "min"), (b"lit", b"."), (b"fix", (2, "s")), (b"lit", b"."), (b"fix", (3, "ms")),
    (b"lit", b"."), (b"fix", (3, "us")), (b"alt", (b" I ", b" W ", b" E ", b" D ", b" T ")))
# After the stamp. Each stops after the last number the record takes from its line: the
# per-line parser reads the rest only for the per-position list and `#mean acc len`, which
# are read (from the kept requests' lines, by its own regexes) only where a window is kept.
_HEAD: Template = (  # prompt eval, eval, total and draft lines
    (b"lit", b"slot print_timing: id"), (b"sp", None), (b"int", "slot"), (b"lit", b" | task "),
    (b"int", "task"), (b"lit", b" |"), (b"sp", None))
_TIMING: Template = (
    (b"which", ("kind", (b"prompt eval time =", b"eval time =", b"total time ="))),
    (b"sp", None), (b"dec", "ms"), (b"lit", b" ms /"), (b"sp", None), (b"int", "tokens"),
    (b"lit", b" tokens"))
_DRAFT: Template = (
    (b"lit", b"draft acceptance = "), (b"fdec", None), (b"lit", b" ("),
    (b"sp0", None), (b"int", "acc"), (b"lit", b" accepted /"), (b"sp", None),
    (b"int", "gen"), (b"lit", b" generated), mean "),
    (b"alt", (b"acceptance length =", b"len =")), (b"sp", None), (b"fdec", "mal"))
_STATS: Template = (
    (b"lit", b"statistics"), (b"sp", None),
    (b"set", (b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-", 1, 0,
              "name")),
    (b"lit", b": #calls(b,g,a) = "), (b"set", (b" " + _DIGITS, 1, 0, None)),
    (b"lit", b", #gen drafts ="), (b"sp", None), (b"int", "gd"),
    (b"lit", b", #acc drafts ="), (b"sp", None), (b"int", None),
    (b"lit", b", #gen tokens ="), (b"sp", None), (b"int", "gt"),
    (b"lit", b", #acc tokens ="), (b"sp", None), (b"int", "at"))
_RELEASE: Template = (
    (b"lit", b"slot"), (b"sp", None), (b"lit", b"release: id"), (b"sp", None),
    (b"int", "slot"), (b"lit", b" | task "), (b"int", "task"), (b"lit", b" | stop processing"))
# record kinds, in a request's order
PROMPT, EVAL, TOTAL, DRAFT, STATS, RELEASE = range(6)
_FORMATS = ("llamacpp timing", "llamacpp timing", "llamacpp timing",
            "llamacpp draft +mean acceptance length", "llamacpp statistics",
            "llamacpp release")  # pipeline.format_of
# a record's columns (float64; NaN where its kind has none): the stamp, slot and task, and
# a, b, c: ms, tokens (timing) / accepted, generated, MAL (draft) / #gen drafts, #gen
# tokens, #acc tokens (statistics); p: the implementation's id (statistics)
_COLS = ("te", "slot", "task", "a", "b", "c", "p")


class BulkLlamacpp:
    """The per-line reader's state, as arrays: the records of the request being read, the
    last stamp, the statistics line before of each implementation, the requests that ran
    recently, the kept requests."""

    def __init__(self, acc: LogAccumulator, counts: ParseCounts, max_windows: int) -> None:
        self.acc, self.counts, self.max_windows = acc, counts, max_windows
        self.head: Any = None  # not None once a record was read
        self.scan: Scan | None = None
        self.by: dict[bytes, int] = {}  # the byte each keyword is found by (Scan.plan)
        self.te = -1.0  # the last record's elapsed stamp
        self.formats: dict[str, int] = {}
        self.carry: dict[str, Any] = _empty()  # the records of a request not released yet
        self.carry_kind = np.zeros(0, np.int64)
        self.carry_pp: list[Any] = []  # per-position texts / names of the carried records
        self.names: list[str] = []  # implementation names, by id
        self.kept: deque[dict[str, Any]] = deque()  # the last max_windows requests, chunks
        self.n_kept = 0
        self.kept_stats: dict[str, LStats] = {}  # _last_stats before the oldest kept
        self.last_stats: dict[int, tuple[int, int, int]] = {}  # impl id -> (gd, gt, at)
        self.spans: Any = np.empty((0, 2))  # the last OVERLAP_KEPT requests' (start, end)

    def block(self, data: Buf, end: int, final: bool) -> int:
        """The whole lines of data[:end]; `data[0]` is the newline before the first."""
        buf = np.frombuffer(data, np.uint8)
        if self.scan is None:
            self.scan = Scan(buf[:end])
            self.by = self.scan.plan((*KEYWORDS, _SKIP))
        scan = self.scan
        # Before the first record the per-line read looks for every engine's keywords;
        # after it, for one on each other engine's first stats line (pipeline's watch).
        if scan.any_kw(data, OTHERS if self.head is None else WATCH, end, buf):
            raise Unusual("another engine's line")
        if data.find(b"\x1b", 0, end) >= 0:  # the per-line read strips ANSI codes first: a
            raise Unusual("an ANSI code")  # code inside a number or a keyword reads otherwise
        nl = scan.find(buf, data, b"\n", end)  # memchr, or one numpy compare
        if len(nl) > 1 and int(np.diff(nl).max()) > MAX_LINE_BYTES // 2:
            raise Unusual("a very long line")
        *places, skip = scan.find_many(buf, data, (*KEYWORDS, _SKIP), end, self.by)
        lines = [np.searchsorted(nl, q) - 1 for q in places]  # the line of each keyword
        if len(skip):  # the per-line read skips these lines whole, keywords and all ...
            gone = np.unique(np.searchsorted(nl, skip) - 1)
            lines = [li[~np.isin(li, gone)] for li in lines]
            for g in gone.tolist():  # ... but gives them to the other engines' parsers
                text = bytes(data[int(nl[g]) + 1:int(nl[g + 1])])
                if any(kw in text for kw in OTHERS):
                    raise Unusual("another engine's keyword in a perf line")
        self._records(buf, data, end, nl, lines)
        return end

    def _records(self, buf: Any, data: Buf, end: int, nl: Any, lines: list[Any]) -> None:
        """Match each keyword's line whole, read its numbers, check the requests' order and
        sum the released requests up; the records of one not released yet are carried."""
        n = sum(len(li) for li in lines)
        if not n:
            return
        li = np.concatenate(lines)
        order = np.argsort(li, kind="stable")
        li = li[order]
        if len(li) > 1 and (np.diff(li) == 0).any():
            raise Unusual("two keywords in a line")
        starts = nl[li] + 1
        # the rows of each keyword, in line order (eval time = : prompt eval or eval)
        which = np.repeat(np.arange(len(lines)), [len(x) for x in lines])[order]
        kind, col = self.lines(buf, end, starts, which)
        # stamps never go back; a request is stamped after the one before
        te = col["te"]
        prev = np.concatenate(([self.te], te[:-1]))
        if ((te < prev) | ((te == prev) & (kind == PROMPT))).any():
            raise Unusual("a stamp going back, or two requests of one stamp")
        self.te = float(te[-1])
        self.head = True
        firsts = sorted((int(np.argmax(kind == k)), _FORMATS[k]) for k in range(6)
                        if (kind == k).any())
        counts = np.bincount(kind, minlength=6)
        for _, fmt in firsts:
            self.formats.setdefault(fmt, 0)
        for k in range(6):
            if counts[k]:
                self.formats[_FORMATS[k]] += int(counts[k])
        # the draft and statistics lines that may be kept: their text (LlamacppAssembler
        # reads their per-position list and `#mean acc len`)
        ptext: list[Any] = [None] * n
        if self.max_windows:
            lo = max(0, n - 6 * self.max_windows - 6)
            for i in (np.flatnonzero((kind[lo:] == DRAFT) | (kind[lo:] == STATS)) + lo).tolist():
                ptext[i] = bytes(data[int(starts[i]):int(nl[li[i] + 1])])
        # with the carried records of the request before
        kind = np.concatenate((self.carry_kind, kind))
        col = {k: np.concatenate((self.carry[k], v)) for k, v in col.items()}
        ptext = self.carry_pp + ptext
        rel = np.flatnonzero(kind == RELEASE)
        upto = int(rel[-1]) + 1 if len(rel) else 0
        rest = kind[upto:]
        if len(rest) > 5 or (rest != np.arange(len(rest))).any():
            raise Unusual("a request's lines of another order")
        if upto:
            first = np.concatenate(([0], rel[:-1] + 1))
            size = rel - first + 1
            if ((size < 4) | (size > 6)).any():
                raise Unusual("a request's lines of another order")
            ok = (kind[first] == PROMPT) & (kind[first + 1] == EVAL) & (kind[first + 2] == TOTAL)
            ok &= (size < 5) | (kind[first + np.minimum(3, size - 1)] == DRAFT)
            ok &= (size < 6) | (kind[first + np.minimum(4, size - 1)] == STATS)
            if not ok.all():
                raise Unusual("a request's lines of another order")
        self._check_slots(kind, col, rel)
        self.carry = {k: v[upto:] for k, v in col.items()}
        self.carry_kind, self.carry_pp = kind[upto:], ptext[upto:]
        if len(self.carry_kind) > MAX_CARRY:  # pragma: no cover - bounded by the order check
            raise Unusual("a request without its release line")
        if upto:
            self._requests(kind[:upto], {k: v[:upto] for k, v in col.items()}, ptext[:upto],
                           first, size)

    def lines(self, buf: Any, end: int, starts: Any, which: Any) -> tuple[Any, dict[str, Any]]:
        """The kind and the columns of the lines starting at `starts` (in order), each holding
        the keyword KEYWORDS[which]; Unusual for a line not of that keyword's shape."""
        n = len(starts)
        col = {k: np.full(n, np.nan) for k in _COLS}
        kind = np.empty(n, np.int64)
        col["te"], cur = self._stamps(buf, end, starts)
        slotted = np.flatnonzero(which <= 2)  # the print_timing lines: slot and task first
        if len(slotted):
            m = match(buf, cur[slotted], end, _HEAD, cursor="c")
            col["slot"][slotted], col["task"][slotted] = m["slot"], m["task"]
            cur[slotted] = m["c"]
        timing = np.flatnonzero(which <= 1)
        if len(timing):
            m = match(buf, cur[timing], end, _TIMING)
            k = m["kind"].astype(np.int64)
            if ((k == TOTAL) != (which[timing] == 1)).any():
                raise Unusual("a timing line of another shape")
            kind[timing] = k
            col["a"][timing], col["b"][timing] = m["ms"], m["tokens"]
        # the draft and statistics lines end with a number: the byte after it is checked
        for w, template, k, names in ((2, _DRAFT, DRAFT, ("acc", "gen", "mal")),
                                      (3, _STATS, STATS, ("gd", "gt", "at"))):
            rows = np.flatnonzero(which == w)
            if not len(rows):
                continue
            m = match(buf, cur[rows], end, template, cursor="c")
            _ascii_after(buf, m["c"])
            kind[rows] = k
            for c, name in zip("abc", names, strict=True):
                col[c][rows] = m[name]
            if k == STATS:
                col["p"][rows] = self._impl_ids(buf, m["name"], m["name_n"])
        release = np.flatnonzero(which == 4)
        if len(release):
            m = match(buf, cur[release], end, _RELEASE)
            kind[release] = RELEASE
            col["slot"][release], col["task"][release] = m["slot"], m["task"]
        return kind, col

    def _stamps(self, buf: Any, end: int, starts: Any) -> tuple[Any, Any]:
        """The elapsed stamp of each line starting at `starts`, and where its message
        starts. A line whose stamp and level are the bytes of the line before's (print_timing
        writes a request's lines at once) has its stamp; the others are matched (_STAMP)."""
        w = words(buf)
        w0 = w[starts]
        digits = _zero_bytes(_nondigit(w0))  # the minutes' digits (8: 8 or more)
        size = digits + 14  # "M.SS.mmm.uuu L ": the minutes' digits + 14
        same = np.zeros(len(starts), bool)
        same[1:] = (w0[1:] == w0[:-1]) & (size[1:] == size[:-1])
        for k in (8, 16):  # the stamp's next bytes (up to 24 in all)
            key = w[starts + k] & _LOW[np.clip(size - k, 0, 8)]
            same[1:] &= key[1:] == key[:-1]
        same &= digits < 8
        own = np.flatnonzero(~same)
        st = match(buf, starts[own], end, _STAMP, cursor="c")
        # as llamacpp: int(mins) * 60 + int(secs) exact (int64: minutes below 10**15), one
        # rounding to a double, then + ms / 1e3 + us / 1e6
        whole = st["min"].astype(np.int64) * 60 + st["s"].astype(np.int64)
        te = whole.astype(np.float64) + st["ms"] / 1e3 + st["us"] / 1e6
        pick = np.cumsum(~same) - 1  # the row whose stamp each row has
        return te[pick], starts + (st["c"] - starts[own])[pick]

    def _check_slots(self, kind: Any, col: dict[str, Any], rel: Any) -> None:
        """Every line of a request but the statistics line names its slot and task."""
        req = np.concatenate(([0], np.cumsum(kind == RELEASE)[:-1]))  # request of each row
        head = np.flatnonzero(np.concatenate(([True], req[1:] != req[:-1])))
        s0, t0 = col["slot"][head][req - req[0]], col["task"][head][req - req[0]]
        bad = (kind != STATS) & ((col["slot"] != s0) | (col["task"] != t0))
        if bad.any():
            raise Unusual("a request's lines of two slots or tasks")

    def _impl_ids(self, buf: Any, at: Any, n: Any) -> Any:
        """The id (into self.names) of each statistics line's implementation name."""
        if len(n) and int(n.max()) > MAX_NAME:
            raise Unusual("a long implementation name")
        at = at.astype(np.int64)
        nn = n.astype(np.int64)
        if len(nn) and (nn == nn[0]).all():  # one name on every line (the common case): a
            w, size, same = words(buf), int(nn[0]), True  # uint64 compare per 8 of its bytes
            for k in range(0, size, 8):
                part = w[at + k] & _LOW[min(8, size - k)]
                same = same and bool((part == part[0]).all())
            if same:
                a0 = int(at[0])
                name = bytes(buf[a0:a0 + size]).decode()
                if name not in self.names:
                    self.names.append(name)
                return np.full(len(nn), float(self.names.index(name)))
        grid = buf[at[:, None] + np.arange(MAX_NAME)]
        grid = np.where(np.arange(MAX_NAME) < n.astype(np.int64)[:, None], grid, 0)
        rows = np.ascontiguousarray(grid).view(f"V{MAX_NAME}").ravel()
        if (rows == rows[0]).all():  # one implementation (the common case)
            uniq, inv = rows[:1], np.zeros(len(rows), np.int64)
        else:
            uniq, inv = np.unique(rows, return_inverse=True)
        ids = np.empty(len(uniq), np.float64)
        for i, u in enumerate(uniq):
            name = bytes(u).rstrip(b"\0").decode()
            if name not in self.names:
                self.names.append(name)
            ids[i] = self.names.index(name)
        return ids[inv.ravel()]

    def _requests(self, kind: Any, col: dict[str, Any], ptext: list[Any], first: Any,
                  size: Any) -> None:
        """The released requests (rows from `first`, `size` rows each) as columns: summed
        up (_add) and the last max_windows kept."""
        has_d, has_s = size >= 5, size == 6
        d_at, s_at = first + 3, first + 4
        q = {"slot": col["slot"][first], "task": col["task"][first],
             "pe_ms": col["a"][first], "pe_tok": col["b"][first], "pe_te": col["te"][first],
             "ev_ms": col["a"][first + 1], "ev_tok": col["b"][first + 1],
             "ev_te": col["te"][first + 1], "tot_ms": col["a"][first + 2],
             "tot_tok": col["b"][first + 2], "te": col["te"][first + 2],
             "has_d": has_d, "has_s": has_s,
             "d_acc": np.where(has_d, col["a"][np.minimum(d_at, len(kind) - 1)], 0),
             "d_gen": np.where(has_d, col["b"][np.minimum(d_at, len(kind) - 1)], 0),
             "d_mal": np.where(has_d, col["c"][np.minimum(d_at, len(kind) - 1)], np.nan),
             "d_te": np.where(has_d, col["te"][np.minimum(d_at, len(kind) - 1)], np.nan),
             "s_id": np.where(has_s, col["p"][np.minimum(s_at, len(kind) - 1)], -1),
             "s_gd": np.where(has_s, col["a"][np.minimum(s_at, len(kind) - 1)], 0),
             "s_gt": np.where(has_s, col["b"][np.minimum(s_at, len(kind) - 1)], 0),
             "s_at": np.where(has_s, col["c"][np.minimum(s_at, len(kind) - 1)], 0),
             "s_te": np.where(has_s, col["te"][np.minimum(s_at, len(kind) - 1)], np.nan),
             "rel_te": col["te"][first + size - 1]}
        k = len(first)
        self._add(q)
        mw = self.max_windows
        if not mw:
            return
        keep = min(k, mw)
        # what falls out of the kept requests: its statistics lines are those before the
        # oldest kept (LlamacppAssembler._last_stats)
        drop = self.n_kept + keep - mw
        while drop > 0 and self.kept:
            ch = self.kept[0]
            m = len(ch["te"])
            cut = min(drop, m)
            self._stats_before({kk: v[:cut] for kk, v in ch.items()})
            if cut == m:
                self.kept.popleft()
            else:
                self.kept[0] = {kk: v[cut:] for kk, v in ch.items()}
            self.n_kept -= cut
            drop -= cut
        if keep < k:
            self._stats_before({kk: v[:k - keep] for kk, v in q.items()})
        chunk = {kk: v[k - keep:] for kk, v in q.items()}
        chunk["dtext"] = [ptext[i] if d else None for i, d in
                          zip((first[k - keep:] + 3).tolist(), has_d[k - keep:].tolist(), strict=True)]
        chunk["stext"] = [ptext[i] if d else None for i, d in
                          zip((first[k - keep:] + 4).tolist(), has_s[k - keep:].tolist(), strict=True)]
        self.kept.append(chunk)
        self.n_kept += keep

    def _stats_before(self, q: dict[str, Any]) -> None:
        """The last statistics line of each implementation in requests q (in order): what
        LlamacppAssembler._drafts compares with (its counts; the MAL is not read there)."""
        ids = q["s_id"]
        for u in np.unique(ids[ids >= 0]).tolist():
            i = int(np.flatnonzero(ids == u)[-1])
            name = self.names[int(u)]
            self.kept_stats[name] = LStats(name, int(q["s_gd"][i]), int(q["s_gt"][i]),
                                           int(q["s_at"][i]), float(q["s_te"][i]), None)

    def _add(self, q: dict[str, Any]) -> None:
        """LlamacppAssembler._build and LogAccumulator.add of each request, as arrays (the
        same values, the same order of every sum)."""
        acc = self.acc
        k = len(q["te"])
        slot = q["slot"].astype(np.int64)
        pe_ms, ev_ms, te = q["pe_ms"], q["ev_ms"], q["te"]
        ev_tok = q["ev_tok"].astype(np.int64)
        has_d = q["has_d"]
        d_acc = q["d_acc"].astype(np.int64)
        d_gen = q["d_gen"].astype(np.int64)
        d_mal = q["d_mal"]
        # drafts: from the statistics line (this request's, or the one before of its
        # implementation, diffed), else from the printed MAL (LlamacppAssembler._drafts)
        drafts = np.zeros(k, np.int64)
        has_dr = np.zeros(k, bool)  # drafts known (not None)
        ids = q["s_id"].astype(np.int64)
        gd, gt, at = (q[c].astype(np.int64) for c in ("s_gd", "s_gt", "s_at"))
        for u in np.unique(ids[ids >= 0]).tolist():
            rows = np.flatnonzero(ids == u)
            before = self.last_stats.get(u)
            pgd, pgt, pat = (np.concatenate(([before[j] if before else 0], x[rows][:-1]))
                             for j, x in enumerate((gd, gt, at)))
            has_prev = np.ones(len(rows), bool)
            has_prev[0] = before is not None
            self.last_stats[u] = (int(gd[rows[-1]]), int(gt[rows[-1]]), int(at[rows[-1]]))
            a, g = d_acc[rows], d_gen[rows]
            same = (gt[rows] == g) & (at[rows] == a)
            diffed = ~same & has_prev & (gt[rows] - pgt == g) & (at[rows] - pat == a)
            drafts[rows] = np.where(same, gd[rows], np.where(diffed, gd[rows] - pgd, 0))
            has_dr[rows] = same | diffed
        from_mal = np.zeros(k, bool)
        guess = np.flatnonzero(has_d & ~has_dr)
        if len(guess):
            pairs = np.stack((d_acc[guess].astype(np.float64), d_mal[guess]), axis=1)
            uniq, inv = np.unique(pairs, axis=0, return_inverse=True)
            got = [_from_mal(int(a), float(m)) for a, m in uniq.tolist()]
            dm = np.array([-1 if x is None else x for x in got], np.int64)[inv.ravel()]
            found = dm >= 0
            drafts[guess[found]] = dm[found]
            has_dr[guess[found]] = True
            from_mal[guess[found]] = True
        gen = np.maximum(ev_tok - 1, 0)
        top = max(int(np.abs(x).max()) for x in (ev_tok, d_acc, d_gen, drafts))
        if top * k >= SUM_MAX:  # the per-line read sums Python ints: no int64 wrap here
            raise Unusual("counts too large to sum as int64")
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
        # the shapes in the order they first occur (a new one is listed while there is room)
        uniq, first_at, inv = np.unique(skey, return_index=True, return_inverse=True)
        n_of = np.bincount(inv.ravel(), minlength=len(uniq))
        for u in np.argsort(first_at, kind="stable").tolist():
            sk = int(uniq[u])
            kk = (sk // 4, names[sk % 4])
            if kk not in shapes:
                if len(shapes) >= MAX_SHAPES:
                    acc._shapes_other += int(n_of[u])
                    continue
                shapes[kk] = _Shape()
            where[kk] = sk
        for kk, sk in where.items():
            mask = skey == sk
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
        if len(self.carry_kind):
            raise Unusual("a request without its release line")
        total = sum(self.formats.values())
        self.counts.lines_matched += total
        self.counts.lines_parsed += total
        for fmt, k in self.formats.items():
            self.counts.formats[fmt] += k
        asm = LlamacppAssembler(ParseCounts())  # the kept windows, by the per-line code
        asm._last_stats = dict(self.kept_stats)
        out = []
        for ch in self.kept:
            for rec in _records(ch, self.names):
                out += asm.feed(rec)
        out += asm.flush()
        self.acc._kept.extend(out)


def _ascii_after(buf: Any, c: Any) -> None:
    """Unusual where the byte after a line's last number read is not ASCII: the per-line
    parser's `\\d` also takes other scripts' digits (`float()` reads them), so `2.0٦` is
    2.06 there."""
    if len(c) and (buf[c] >= 0x80).any():
        raise Unusual("a byte not ASCII after a number")


def _empty() -> dict[str, Any]:
    return {k: np.empty(0) for k in _COLS}


def _records(ch: dict[str, Any], names: list[str]) -> list[Any]:
    """The records `llamacpp.parse` gives for the lines of the kept requests `ch`."""
    out: list[Any] = []
    cols = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in ch.items()}
    for i in range(len(cols["te"])):
        slot = (int(cols["slot"][i]), int(cols["task"][i]))
        out.append(LTime(slot, "prompt eval", cols["pe_ms"][i], int(cols["pe_tok"][i]),
                         cols["pe_te"][i]))
        out.append(LTime(slot, "eval", cols["ev_ms"][i], int(cols["ev_tok"][i]),
                         cols["ev_te"][i]))
        out.append(LTime(slot, "total", cols["tot_ms"][i], int(cols["tot_tok"][i]),
                         cols["te"][i]))
        if cols["has_d"][i]:
            found = llamacpp._PER_POS.search(cols["dtext"][i].decode("utf-8", "replace"))
            pp = llamacpp._floats(found.group(1)) if found else None
            out.append(LDraft(slot, int(cols["d_acc"][i]), int(cols["d_gen"][i]),
                              cols["d_mal"][i], pp or None, cols["d_te"][i]))
        if cols["has_s"][i]:
            found = llamacpp._STAT_MAL.search(cols["stext"][i].decode("utf-8", "replace"))
            out.append(LStats(names[int(cols["s_id"][i])], int(cols["s_gd"][i]),
                              int(cols["s_gt"][i]), int(cols["s_at"][i]), cols["s_te"][i],
                              float(found.group(1)) if found else None))
        out.append(LRelease(slot, cols["rel_te"][i]))
    return out


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
