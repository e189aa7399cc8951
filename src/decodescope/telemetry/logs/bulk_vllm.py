"""A whole read of a plain vLLM V1 log in bulk (see bulk_sglang.py for the design).

The stats lines and the SpecDecoding lines of a block found and matched in bulk (linescan.py:
_STATS_T and _spec_template(k), the same lines as the regexes _STATS and _spec_line(k)), the
stamps read from the bytes before each match with numpy, the windows
(interval, pairing, spec counts, step rates) and their summary as arrays. It handles the
ordinary log only, and leaves every other to the per-line read (`Unusual`):

- every `Avg prompt throughput: ` / ` metrics: ` is a whole V1 stats / V1-d SpecDecoding line
  of the common shape, each kind with one head for the whole log (one pid, one engine id,
  the stamp's digits aside: `MM-DD hh:mm:ss`, no year, no fraction; the year as Clock
  infers it, December -> January included);
- each spec line follows its stats line (same second), which it pairs with;
- the interval the first lines give is never changed later and is not the default (no
  spacing below it, vllm_windows.SPACING_SLACK_S);
- no launch-config line before the first spec line, no other engine's line, no copies, no
  stamp going backwards, no very long line, no keyword in an unfinished last line.
"""

from __future__ import annotations

import re
from collections import deque
from typing import Any

import numpy as np

from decodescope.records.window import EngineWindow
from decodescope.telemetry.logs import vllm
from decodescope.telemetry.logs.accumulate import LogAccumulator
from decodescope.telemetry.logs.bulk_sglang import (
    SPARSE_LINES,
    Buf,
    Unusual,
    _any_kw,
    compact,
    hour_epochs,
    read_blocks,
)
from decodescope.telemetry.logs.clock import _MORE, Clock, _has_year, _last_stamp_colon
from decodescope.telemetry.logs.columns import WindowColumns, add_columns
from decodescope.telemetry.logs.linescan import Scan, Template, gather, match
from decodescope.telemetry.logs.parse_counts import ParseCounts
from decodescope.telemetry.logs.pipeline import _ALL_KEYWORDS, DUP_RECENT, DUP_WINDOW_S
from decodescope.telemetry.logs.pipeline import BACKWARDS_SLACK_S as BACK_S
from decodescope.telemetry.logs.steps import FULL_COVERAGE, REBUILT_TOLERANCE
from decodescope.telemetry.logs.steps import REBUILT_TOLERANCE_TOKENS as TOL_TOKENS
from decodescope.telemetry.logs.vllm_windows import (
    DECIDE_LINES,
    DEFAULT_INTERVAL_S,
    MAL_PRINT_TOLERANCE,
    MAX_INTERVAL_FACTOR,
    MIN_INTERVAL_S,
    PAIR_TOLERANCE_S,
    SPACING_SLACK_S,
    VllmAssembler,
    _Key,
    _Proto,
)

BLOCK_BYTES = 8 << 20
_N = rb"(\d+(?:\.\d+)?)"
_STATS = re.compile(  # vllm._FAST_STATS, reached by its keyword; groups None: another shape
    rb"Avg prompt throughput: (?:\d+(?:\.\d+)? tokens/s, Avg generation throughput: " + _N +
    rb" tokens/s, Running: (\d+) reqs, Waiting: \d+ reqs, GPU KV cache usage: \d+(?:\.\d+)?%"
    rb", Prefix cache hit rate: \d+(?:\.\d+)?%(?=\n))?")
_PER_POS = rb"Per-position acceptance rate: (\d+(?:\.\d+)?(?:, \d+(?:\.\d+)?)*), "


def _spec_line(k: int | None) -> re.Pattern[bytes]:
    """vllm._FAST_SPEC, reached by its keyword; with k: exactly k per-position rates."""
    pp = _PER_POS if k is None else \
        rb"Per-position acceptance rate: \d+(?:\.\d+)?(?:, \d+(?:\.\d+)?){%d}, " % (k - 1)
    return re.compile(
        rb" metrics: (?:Mean acceptance length: " + _N + rb", Accepted throughput: "
        rb"\d+(?:\.\d+)? tokens/s, Drafted throughput: \d+(?:\.\d+)? tokens/s, Accepted: "
        rb"(\d+) tokens, Drafted: (\d+) tokens, " + pp + rb"Avg Draft acceptance rate: "
        rb"\d+(?:\.\d+)?%(?=\n))?")


_SPEC_ANY = _spec_line(None)
# The same lines as linescan templates (matched in bulk, the numbers read with numpy).
_STATS_KEY = vllm.STATS_KEY.encode()
_SPEC_KEY = b" metrics: "
_D = (b"dec", None)
_STATS_T: Template = (
    _D, (b"lit", b" tokens/s, Avg generation throughput: "), (b"dec", "gen"),
    (b"lit", b" tokens/s, Running: "), (b"int", "run"), (b"lit", b" reqs, Waiting: "),
    (b"int", None), (b"lit", b" reqs, GPU KV cache usage: "), _D,
    (b"lit", b"%, Prefix cache hit rate: "), _D, (b"lit", b"%"), (b"end", (b"\n",)))


def _spec_template(k: int) -> Template:
    """_spec_line(k) after its keyword."""
    return (
        (b"lit", b"Mean acceptance length: "), (b"dec", "mal"),
        (b"lit", b", Accepted throughput: "), _D, (b"lit", b" tokens/s, Drafted throughput: "),
        _D, (b"lit", b" tokens/s, Accepted: "), (b"int", "acc"), (b"lit", b" tokens, Drafted: "),
        (b"int", "drafted"), (b"lit", b" tokens, Per-position acceptance rate: "), _D,
        *[t for _ in range(k - 1) for t in ((b"lit", b", "), _D)],
        (b"lit", b", Avg Draft acceptance rate: "), _D, (b"lit", b"%"), (b"end", (b"\n",)))


_CONFIG = (vllm.CONFIG_KEY.encode(), vllm.LAUNCH_KEY.encode())
_WATCH = (b"Decode batch", b"eval time =")  # pipeline._ENGINES: the other engines' watch


class _Head:
    """The bytes before a kind's keyword, the same on every line but the stamp's digits."""

    def __init__(self, data: Buf, at: int) -> None:
        line = data.rfind(b"\n", 0, at)
        self.raw = data[line:at]
        text = self.raw[1:].decode("ascii", "replace")
        i = _last_stamp_colon(text)
        if i < 8 or _has_year(text, i) or text[i + 6:i + 7] in _MORE:
            raise Unusual("a line without the common year-less stamp")
        s = 1 + i - 8  # in raw: MM-DD hh:mm:ss
        self.digits = [s + k for k in (0, 1, 3, 4, 6, 7, 9, 10, 12, 13)]
        self.text = text
        fixed = np.ones(len(self.raw), bool)
        fixed[self.digits] = False
        self.fixed = fixed
        self.arr = np.frombuffer(self.raw, np.uint8)

    def fields(self, buf: Any, starts: Any) -> Any:
        """(n, 5) month, day, hour, minute, second of the lines starting `len(raw)` before
        each of `starts`; Unusual when any other byte differs."""
        n = len(self.raw)
        if int(starts[0]) < n:
            raise Unusual("a line at the start of a block")
        got = gather(buf, starts - n, n)
        dig = got[:, self.digits].astype(np.int64) - 48
        if (got[:, self.fixed] != self.arr[self.fixed]).any() or (dig < 0).any() or \
                (dig > 9).any():
            raise Unusual("a line with another head")
        return dig[:, 0::2] * 10 + dig[:, 1::2]


class BulkVllm:
    def __init__(self, acc: LogAccumulator, counts: ParseCounts, max_windows: int,
                 clock: Clock) -> None:
        self.acc, self.counts, self.max_windows = acc, counts, max_windows
        self.clock = clock
        self.head: _Head | None = None  # of the stats lines
        self.spec_head: _Head | None = None
        self.pid: int | None = None
        self.engine_id: str | None = None
        self.year: int | None = None
        self.month: int | None = None
        self.hours: dict[int, float] = {}
        self.k: int | None = None  # per-position rates on the spec lines
        self.spec_t: Template | None = None  # the spec line's template, once k is known
        self.scan: Scan | None = None
        self.spec_lines = 0
        self.prev_t: float | None = None  # last record's stamp (jumps back)
        self.recent: dict[int, Any] = {0: np.empty(0), 1: np.empty(0)}  # stamps, per kind
        self.first_t: list[float] = []  # the first DECIDE_LINES stats stamps
        self.held: list[dict[str, Any]] = []  # rows waiting for the interval
        self.interval: float | None = None
        self.prev_stats: float | None = None
        self.spacing_max = MAX_INTERVAL_FACTOR * DEFAULT_INTERVAL_S["v1"]
        self.kept: deque[dict[str, Any]] = deque()
        self.kept_n = 0

    def block(self, data: Buf, end: int, final: bool) -> int:
        """The whole lines of data[:end] (data[0] the newline before the first); returns
        where the lines read end: a last stats line waits for its spec line in the next."""
        if self.scan is None:
            self.scan = Scan(data)
        buf = np.frombuffer(data, np.uint8)
        s_at = self.scan.find(buf, data, _STATS_KEY, end)
        p_at = self.scan.find(buf, data, _SPEC_KEY, end)
        if self.k is None and len(p_at):
            m = _SPEC_ANY.match(data, int(p_at[0]), end)
            if m is not None and m.group(4) is not None:
                self.k = m.group(4).count(b", ") + 1
                self.spec_t = _spec_template(self.k)
        first = min(int(a[0]) for a in (s_at, p_at) if len(a)) if len(s_at) or len(p_at) \
            else end
        if self.head is None and _any_kw(data, _ALL_KEYWORDS, first):
            raise Unusual("a keyword before the first stats line")
        if self.spec_lines == 0 and _any_kw(data, _CONFIG, int(p_at[0]) if len(p_at) else end):
            raise Unusual("a launch-config line")
        if self.scan.any_kw(data, _WATCH, end, buf):
            raise Unusual("another engine's line")
        for p in range(0, end, 2 << 20):
            if data.find(b"\n", p, min(end, p + (2 << 20))) < 0:
                raise Unusual("a very long line")
        if not len(s_at) and not len(p_at):
            return end
        if self.head is None:
            if not len(s_at) or (len(p_at) and p_at[0] < s_at[0]):
                raise Unusual("a spec line before the first stats line")
            self._first_line(data, int(s_at[0]))
        used = end
        if not final and len(s_at) and (not len(p_at) or p_at[-1] < s_at[-1]):
            used = data.rfind(b"\n", 0, int(s_at[-1])) + 1
            s_at = s_at[:-1]
            if not len(s_at) and not len(p_at):
                return used
        sg = match(buf, s_at + len(_STATS_KEY), end, _STATS_T) if len(s_at) else {}
        if len(p_at) and self.spec_t is None:
            raise Unusual("a spec line of another shape")
        pg = match(buf, p_at + len(_SPEC_KEY), end, self.spec_t) if len(p_at) and \
            self.spec_t is not None else {}
        if len(p_at) and self.spec_head is None:
            self.spec_head = _Head(data, int(p_at[0]))
            if vllm._head(self.spec_head.text, len(self.spec_head.text), Clock(2000))[1] \
                    != self.pid:
                raise Unusual("spec lines of another pid")
        assert self.head is not None
        n_s, n_p = len(s_at), len(p_at)
        s_md = self.head.fields(buf, s_at) if n_s else np.empty((0, 5), np.int64)
        p_md = self.spec_head.fields(buf, p_at) if n_p and self.spec_head \
            else np.empty((0, 5), np.int64)
        kinds = np.concatenate((np.zeros(n_s, np.int8), np.ones(n_p, np.int8)))
        order = np.argsort(np.concatenate((s_at, p_at)), kind="stable")
        kinds = kinds[order]
        years = np.empty(len(order), np.int64)
        years[order] = self._years(np.concatenate((s_md[:, 0], p_md[:, 0]))[order])
        ts = self._stamps(s_md, years[:n_s])
        tp = self._stamps(p_md, years[n_s:])
        # Pairing (VllmAssembler.feed): a spec line right after its stats line, same second.
        is_spec = np.flatnonzero(kinds == 1)
        if is_spec.size and (is_spec[0] == 0 or (kinds[is_spec - 1] != 0).any()):
            raise Unusual("a spec line without its stats line")
        owner = np.searchsorted(s_at, p_at) - 1  # the stats line just before each spec line
        if (np.abs(tp - ts[owner]) > PAIR_TOLERANCE_S).any():
            raise Unusual("a spec line apart from its stats line")
        self._integrity(np.concatenate((ts, tp))[order], kinds)
        self.spec_lines += n_p
        self.counts.lines_matched += n_s + n_p
        self.counts.lines_parsed += n_s + n_p
        for _, name, n in sorted((int(a[0]), name, len(a)) for name, a in
                                 (("vllm v1 stats", s_at), ("vllm v1-d spec", p_at)) if len(a)):
            self.counts.formats[name] += n  # a format is first counted where it first occurs
        if n_s:
            spec_at = np.full(n_s, -1, np.int64)
            spec_at[owner] = p_at
            has = spec_at >= 0
            row: dict[str, Any] = {
                "data": data, "s_at": s_at, "p_at": spec_at, "t": ts, "has": has,
                "gen_tput": sg["gen"], "running": sg["run"],
                "mal": np.full(n_s, np.nan), "accepted": np.zeros(n_s),
                "drafted": np.zeros(n_s)}
            if n_p:
                row["mal"][owner] = pg["mal"]
                row["accepted"][owner] = pg["acc"]
                row["drafted"][owner] = pg["drafted"]
            self._rows(row)
        return used

    def _first_line(self, data: Buf, at: int) -> None:
        self.head = _Head(data, at)
        text = self.head.text
        _, self.pid, head = vllm._head(text, len(text), Clock(2000))
        self.engine_id = vllm._engine_id(head)
        if self.engine_id is None:
            raise Unusual("a stats line without an engine id (early V1)")
        j = _last_stamp_colon(text)
        mo, d = int(text[j - 8:j - 6]), int(text[j - 5:j - 3])
        self.year = self.clock._year_for(mo, d)  # the first line's year (year= or mtime)
        self.month = mo

    def _years(self, mo: Any) -> Any:
        """Clock._year_for of each line in turn (its months): a December -> January step moves
        to the next year, a December line after January is a straggler of the year before."""
        years = np.empty(len(mo), np.int64)
        assert self.year is not None and self.month is not None
        year, month = self.year, self.month
        changes = np.flatnonzero(np.concatenate(([mo[0] != month], mo[1:] != mo[:-1])))
        cuts = [*changes.tolist(), len(mo)]
        years[:cuts[0]] = year
        for a, b in zip(cuts[:-1], cuts[1:], strict=True):
            m = int(mo[a])
            if month == 12 and m == 1:
                year += 1
                month = m
                years[a:b] = year
            elif month == 1 and m == 12:
                years[a:b] = year - 1
            else:
                month = m
                years[a:b] = year
        self.year, self.month = year, month
        return years

    def _stamps(self, md: Any, years: Any) -> Any:
        hour = ((years * 100 + md[:, 0]) * 100 + md[:, 1]) * 100 + md[:, 2]
        return hour_epochs(hour, self.hours, self.clock) + md[:, 3] * 60 + md[:, 4]

    def _integrity(self, t: Any, kinds: Any) -> None:
        """Unusual on a jump back (records in line order) or a possible copy (two records of
        one kind within DUP_WINDOW_S and DUP_RECENT records of each other)."""
        seq = np.concatenate(([self.prev_t], t)) if self.prev_t is not None else t
        if (seq[1:] < seq[:-1] - BACK_S).any():
            raise Unusual("a stamp going backwards")
        if len(t):
            self.prev_t = float(t[-1])
        for kind in (0, 1):
            allt = np.concatenate((self.recent[kind], t[kinds == kind]))
            for k in range(1, DUP_RECENT + 1):
                if len(allt) <= k:
                    break
                if (np.abs(allt[k:] - allt[:-k]) <= DUP_WINDOW_S).any():
                    raise Unusual("two records of one kind within the copies window")
            self.recent[kind] = allt[-DUP_RECENT:]

    def _rows(self, row: dict[str, Any]) -> None:
        if self.interval is None:
            self.held.append(row)
            self.first_t += row["t"][:DECIDE_LINES - len(self.first_t)].tolist()
            if len(self.first_t) < DECIDE_LINES:
                return
            self._decide()
            held, self.held = self.held, []
            for r in held:
                self._release(r)
            return
        self._release(row)

    def _decide(self) -> None:
        """VllmAssembler's interval: from the spacings of the engine's first lines."""
        key = _Key(DEFAULT_INTERVAL_S["v1"])
        for t in self.first_t:
            key.note(t)
        self.interval = key.decide()
        if key.guessed:
            raise Unusual("no spacing gives the interval")

    def _release(self, row: dict[str, Any]) -> None:
        iv = self.interval
        assert iv is not None
        ts = row["t"]
        seq = np.concatenate(([self.prev_stats], ts)) if self.prev_stats is not None else ts
        gap = seq[1:] - seq[:-1]
        r = np.rint(gap)
        if ((gap >= MIN_INTERVAL_S) & (r <= self.spacing_max) & (r < iv - SPACING_SLACK_S)).any():
            raise Unusual("a spacing below the interval (an interval change)")
        self.prev_stats = float(ts[-1])
        has, accepted, drafted, mal = row["has"], row["accepted"], row["drafted"], row["mal"]
        t_start = ts - iv
        gen = np.rint(row["gen_tput"] * iv)
        with np.errstate(divide="ignore", invalid="ignore"):
            drafts = np.where(has, np.rint(drafted / float(self.k or 1)), np.nan)
            off = has & (drafts != 0) & (mal > 1.0 + MAL_PRINT_TOLERANCE) & \
                (np.abs(1.0 + accepted / drafts - mal) > MAL_PRINT_TOLERANCE)
            drafts = np.where(off, np.rint(accepted / (mal - 1.0)), drafts)
        self._columns(ts, t_start, gen, row["gen_tput"], row["running"], has, drafts,
                      accepted, off)
        if len(ts) < SPARSE_LINES:
            assert self.head is not None
            heads = [(row["s_at"], len(self.head.raw))]
            if self.spec_head is not None:
                heads.append((row["p_at"], len(self.spec_head.raw)))
            row["data"], moved = compact(row["data"], heads)
            row["s_at"] = moved[0]
            if self.spec_head is not None:
                row["p_at"] = moved[1]
        self.kept.append(row)
        self.kept_n += len(ts)
        while self.kept_n - len(self.kept[0]["t"]) >= self.max_windows:
            self.kept_n -= len(self.kept.popleft()["t"])

    def _columns(self, ts: Any, t_start: Any, gen: Any, gen_tput: Any, running: Any,
                 has: Any, drafts: Any, accepted: Any, off: Any) -> None:
        """The windows' figures as LogAccumulator.add and steps.step_info compute them."""
        idle = gen == 0
        rate_ok = ~idle
        counted = has & (drafts != 0)
        dur = ts - t_start
        with np.errstate(divide="ignore", invalid="ignore"):
            decode = np.where(dur > 0, gen / dur, gen_tput)
            mal = np.where(counted, 1.0 + accepted / drafts, np.nan)
            live = running > 0
            per_req = dur * np.where(running != 0, running, 1.0)
            drate = drafts / per_req
            steps = gen - accepted
            tol = np.maximum(TOL_TOKENS, REBUILT_TOLERANCE * gen)
            withheld = counted & (steps < drafts - tol)
            every = counted & ~withheld & ((steps <= drafts + tol) |
                                           (drafts / steps >= FULL_COVERAGE))
            partial = counted & ~withheld & ~every
            zero = has & (drafts == 0)
            per_req_rate = np.where(running != 0, decode / running, decode)
            step = np.select([every, partial, zero], [drate, steps / per_req, per_req_rate],
                             np.nan)
            cov = np.select([every, partial], [1.0, drafts / steps], np.nan)
            d_rate = np.select([counted, zero], [drate, 0.0], np.nan)
        ok = rate_ok & live
        add_columns(self.acc, WindowColumns(
            engine="vllm", engine_id=self.engine_id,
            pid=float(self.pid) if self.pid is not None else None, t_start=t_start, t_end=ts,
            running=running, rate=np.where(rate_ok, decode, np.nan), mal=mal,
            acc=np.where(counted, accepted, 0.0), drafts=np.where(counted, drafts, 0.0),
            estimated=np.zeros(len(ts), bool), step=np.where(ok, step, np.nan),
            drafts_rate=np.where(ok, d_rate, np.nan), idle=idle,
            zero_running=int(np.count_nonzero(rate_ok & ~live)),
            flags={"idle": idle, "drafts_from_printed_mal": off}, interval=self.interval,
            gen=gen.astype(np.int64), counted=counted,
            coverage=np.where(ok & counted, cov, np.nan),
            withheld=int(np.count_nonzero(ok & withheld))))

    def finish(self) -> None:
        """Windows still waiting for the interval (a short log); the kept windows, built by
        the per-line code (vllm.parse, VllmAssembler._build) from their lines."""
        if self.interval is None:
            if not self.first_t:
                raise Unusual("no stats line")
            self._decide()
            held, self.held = self.held, []
            for r in held:
                self._release(r)
        assert self.head is not None and self.year is not None
        asm = VllmAssembler(ParseCounts())
        key = (self.pid, self.engine_id)
        asm._keys[key] = _Key(DEFAULT_INTERVAL_S["v1"])
        asm._keys[key].interval_s = self.interval
        places: list[tuple[Buf, int, int, float]] = []
        for row in reversed(self.kept):
            for s, p, t in zip(reversed(row["s_at"].tolist()), reversed(row["p_at"].tolist()),
                               reversed(row["t"].tolist()), strict=True):
                if len(places) >= self.max_windows:
                    break
                places.append((row["data"], s, p, t))
        clock = Clock(self.year)  # the stamps are the bulk read's (its years)
        out: list[EngineWindow] = []
        for data, s, p, t in reversed(places):
            stats = vllm.parse(self._line(data, s, self.head), clock, ParseCounts())
            assert isinstance(stats, vllm.VStats)
            proto = _Proto(key, self.pid, t, stats=stats._replace(t_s=t))
            if p >= 0 and self.spec_head is not None:
                spec = vllm.parse(self._line(data, p, self.spec_head), clock, ParseCounts())
                assert isinstance(spec, vllm.VSpec)
                proto.spec = spec
            out.append(asm._build(proto))
        self.acc._kept.extend(out)

    @staticmethod
    def _line(data: Buf, at: int, head: _Head) -> str:
        return data[at - len(head.raw) + 1:data.find(b"\n", at)].decode()


def read(path: str, acc: LogAccumulator, counts: ParseCounts, max_windows: int,
         clock: Clock, block_bytes: int | None = None) -> dict[str, Any]:
    """Sum up the whole plain vLLM log `path` into `acc` and `counts`; returns what the log
    said about speculative decoding (VllmAssembler.spec_info). Unusual: see the docstring."""
    bulk = BulkVllm(acc, counts, max_windows, clock)
    read_blocks(path, bulk, counts, block_bytes or BLOCK_BYTES)
    bulk.finish()
    return {"method": None, "k": bulk.k, "lines": bulk.spec_lines, "off": bulk.spec_lines == 0}
