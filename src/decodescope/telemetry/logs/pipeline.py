"""File -> candidate lines -> records -> engine windows, with engine auto-detection.

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
from collections import deque
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from decodescope.errors import UsageError
from decodescope.records.window import EngineWindow
from decodescope.telemetry.logs import llamacpp, sglang, vllm
from decodescope.telemetry.logs.clock import Clock, strip_ansi
from decodescope.telemetry.logs.llamacpp import LlamacppAssembler
from decodescope.telemetry.logs.parse_counts import ParseCounts, Unparsed
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
from decodescope.telemetry.logs.selectors import TimeSpec
from decodescope.telemetry.logs.sglang import SglangAssembler
from decodescope.telemetry.logs.vllm_windows import VllmAssembler

ENGINE_NAMES = ("vllm", "sglang", "llamacpp")
IDLE_FLUSH_S = 2.0  # follow mode: emit held windows after this long without new lines
# Some log shippers (a docker log driver plus a sidecar, journald forwarding twice) write every
# line twice within a millisecond. A record equal to a recent one in everything but its stamp,
# stamped within DUP_WINDOW_S of it, is such a copy: counted (ParseCounts.duplicates), dropped.
# Two engines never print the same record: pid and engine id are part of it.
DUP_WINDOW_S = 0.05
DUP_RECENT = 16  # records remembered for the comparison (copies arrive next to each other)
# A record stamped more than this before the previous record of the same engine and pid is a
# jump back (DST's fall back, a clock set back, two time zones in one merged log): counted and
# said, never reordered. Engines print a little out of order (stats of DP ranks, the spec line
# after its stats line): less than this is not a jump.
BACKWARDS_SLACK_S = 2.0


class _Assembler(Protocol):
    config_known: bool  # True: the launch-config keywords need not be searched any more

    def feed(self, rec: Any) -> list[EngineWindow]: ...
    def flush(self) -> list[EngineWindow]: ...


@dataclass(frozen=True)
class _Engine:
    name: str
    keywords: tuple[bytes, ...]
    lean_keywords: tuple[bytes, ...]
    parse: Callable[[str, Clock, ParseCounts], Any]
    assembler: Callable[[ParseCounts], _Assembler]
    complete: Callable[[str, Any], bool]  # a line without a newline is whole (not cut)
    # Searched while another engine is read: one keyword on the engine's first stats line
    # (one search pass each: ~0.3 ms per MiB). Once one is found, the rest of its block and
    # the blocks after are searched for all of the engine's keywords.
    watch: tuple[bytes, ...]


_ENGINES = {
    "vllm": _Engine("vllm", vllm.KEYWORDS, vllm.LEAN_KEYWORDS, vllm.parse, VllmAssembler,
                    vllm.complete, (vllm.STATS_KEY.encode(),)),
    "sglang": _Engine("sglang", sglang.KEYWORDS, sglang.LEAN_KEYWORDS, sglang.parse,
                      SglangAssembler, sglang.complete, (sglang.DECODE_KEY.encode(),)),
    "llamacpp": _Engine("llamacpp", llamacpp.KEYWORDS, llamacpp.LEAN_KEYWORDS, llamacpp.parse,
                        LlamacppAssembler, llamacpp.complete, (b"eval time =",)),
}
_ALL_KEYWORDS = tuple(kw for e in _ENGINES.values() for kw in e.keywords)


def format_of(rec: Any) -> str:
    kind = type(rec)
    fixed = _OTHER_FORMATS.get(kind)  # most records: one name per type
    if fixed is not None:
        return fixed
    if isinstance(rec, vllm.VSpec):
        return _VLLM_SPEC_FORMATS.get(rec.variant) or f"vllm {rec.variant} spec"
    if isinstance(rec, vllm.VStats):
        return _VLLM_STATS_FORMATS.get(rec.variant) or f"vllm {rec.variant} stats"
    if isinstance(rec, sglang.SDecode):
        return "sglang decode" + (" +accept len" if rec.accept_len is not None else "")
    if isinstance(rec, llamacpp.LDraft):
        return "llamacpp draft" + (" +mean acceptance length" if rec.mal is not None else "")
    return _OTHER_FORMATS.get(type(rec), type(rec).__name__)


_VLLM_SPEC_FORMATS = {v: f"vllm {v} spec" for v in ("v1-d", "v1-c", "v1-c'", "v1-b", "v1-a", "v0")}
_VLLM_STATS_FORMATS = {v: f"vllm {v} stats" for v in ("v1", "v1-early", "v0")}
_OTHER_FORMATS: dict[type, str] = {
    vllm.VConfig: "vllm launch config",
    sglang.SConfig: "sglang launch config",
    llamacpp.LTime: "llamacpp timing",
    llamacpp.LStats: "llamacpp statistics",
    llamacpp.LRelease: "llamacpp release",
}


_T_INDEX: dict[type, int] = {}
_LLAMA_RECORDS = (llamacpp.LTime, llamacpp.LDraft, llamacpp.LStats, llamacpp.LRelease)


def _t_index(kind: type) -> int:
    """Position of `t_s` in a record type (records are NamedTuples)."""
    i = _T_INDEX.get(kind)
    if i is None:
        i = _T_INDEX[kind] = kind._fields.index("t_s")  # type: ignore[attr-defined]
    return i


class LineReader:
    """Turns candidate lines into windows; owns the engine choice, clock and counters."""

    def __init__(self, engine: str | None, clock: Clock, counts: ParseCounts,
                 live: bool = False) -> None:
        if engine is not None and engine not in _ENGINES:
            raise UsageError(f"unknown engine {engine!r}",
                             remedy=f"Use one of: {', '.join(ENGINE_NAMES)}, auto")
        self.clock, self.counts = clock, counts
        # live (--follow): windows go out as they come; none waits for later evidence of
        # drafting (drafting.py), which a growing log may never print
        self.live = live
        self.engine: _Engine | None = _ENGINES[engine] if engine else None
        self._asm: _Assembler | None = self._new_assembler(self.engine) if self.engine else None
        self._recent: deque[tuple[float, Any]] = deque(maxlen=DUP_RECENT)
        # Auto mode reads every engine of a mixed log; with --engine the others are counted.
        self.read_others = engine is None
        self.others: dict[str, _Assembler] = {}  # engines found after the first, in order
        self._kw: tuple[Any, tuple[bytes, ...]] | None = None  # (state, keywords) cache
        self.last_t: dict[tuple[str, Any], float] = {}  # (engine, pid) -> last stamp
        self.at = [0]  # offset of the line being fed (read_lines sets it)
        # True while the line fed is the file's last and has no newline (read_lines sets it);
        # `growing`: it is the tail of a file still written (--follow): never whole.
        self.tail = [False]
        self.growing = False
        self._prev: Any = None  # the record before (llama.cpp copies: no clock to compare)

    def _new_assembler(self, e: _Engine) -> _Assembler:
        asm = e.assembler(self.counts)
        drafting = getattr(asm, "drafting", None)
        if self.live and drafting is not None:
            drafting.max_held = 0
        return asm

    @property
    def assembler(self) -> Any:
        """The engine's window assembler (None until the engine is known)."""
        return self._asm

    def _duplicate(self, rec: Any) -> bool:
        """True for a copy of a recent record: same fields (NaN equal to NaN: `nan%` lines),
        stamps within DUP_WINDOW_S. llama.cpp records carry no clock time: a copy is the same
        record as the one just before it, or as a recent one with the same elapsed stamp
        (microseconds: two requests never share it)."""
        t = getattr(rec, "t_s", None)
        if t is None:
            prev, self._prev = self._prev, rec
            kind = type(rec)
            if kind in _LLAMA_RECORDS:
                # A copy parses to the same record type: other types are never compared.
                if type(prev) is kind and _same(prev, rec):
                    return True
                te = rec.t_elapsed_s
                if te is not None:
                    for _, r0 in self._recent:
                        if type(r0) is kind and r0.t_elapsed_s == te and _same(r0, rec):
                            return True
                    self._recent.append((te, rec))
            return False  # no clock: two equal lines may be two equal requests
        i = -1
        kind = type(rec)
        for t0, r0 in self._recent:
            if -DUP_WINDOW_S <= t - t0 <= DUP_WINDOW_S and type(r0) is kind:
                if i < 0:
                    i = _t_index(kind)
                if _same(r0[:i], rec[:i]) and _same(r0[i + 1:], rec[i + 1:]):
                    return True
        self._recent.append((t, rec))
        return False

    def keywords(self) -> tuple[bytes, ...]:
        """What to search for; the same tuple object while the answer does not change (the
        reader compares identity to notice a second engine mid-block)."""
        if self.engine is None:
            return _ALL_KEYWORDS
        lean = self._asm is not None and self._asm.config_known
        state: Any = (lean, tuple(a.config_known for a in self.others.values())) \
            if self.others else lean
        if self._kw is not None and self._kw[0] == state:
            return self._kw[1]
        kws = list(self.engine.lean_keywords if lean else self.engine.keywords)
        for name, e in _ENGINES.items():
            if e is self.engine:
                continue
            asm = self.others.get(name)
            extra = e.watch if asm is None else e.lean_keywords if asm.config_known \
                else e.keywords
            kws += [k for k in extra if k not in kws]
        self._kw = (state, tuple(kws))
        return self._kw[1]

    def feed(self, raw: bytes | bytearray) -> list[EngineWindow]:
        text = raw.decode("utf-8", "replace")
        if "\x1b" in text:
            text = strip_ansi(text)
        if text.endswith("\r"):
            text = text.rstrip("\r")
        asm = self._asm
        name = self.engine.name if self.engine else "unknown"
        try:
            if self.engine is not None:
                rec = self.engine.parse(text, self.clock, self.counts)
                if rec is None:
                    rec, name, asm = self._other(raw, text)
            else:
                rec = self._detect(raw, text)
                asm = self._asm
                name = self.engine.name if self.engine else name
        except (ValueError, OverflowError, IndexError):  # a number the patterns let through
            rec = Unparsed(f"{name}.malformed")
        if rec is None:
            return []
        if self.tail[0] and not isinstance(rec, Unparsed):
            eng = _ENGINES.get(name)
            if self.growing or eng is None or not eng.complete(text, rec):
                self.counts.cut_lines += 1  # cut mid-line: no number from it
                return []
        if asm is None and not isinstance(rec, Unparsed):  # another engine, --engine given
            self.counts.other_engines[name] += 1
            return []
        self.counts.lines_matched += 1
        if isinstance(rec, Unparsed):
            self.counts.unparsed[rec.kind] += 1
            return []
        if self._duplicate(rec):
            self.counts.duplicates += 1
            return []
        t = getattr(rec, "t_s", None)
        if t is not None:
            key = (name, getattr(rec, "pid", None))
            last = self.last_t.get(key)
            if last is not None and t < last - BACKWARDS_SLACK_S:
                self.counts.note_backwards(self.at[0], last, t)
            self.last_t[key] = t
        self.counts.lines_parsed += 1
        self.counts.formats[format_of(rec)] += 1
        assert asm is not None
        return asm.feed(rec)

    def _other(self, raw: bytes | bytearray, text: str) -> tuple[Any, str, _Assembler | None]:
        """(record, engine, its assembler) of a line of another engine than the one read:
        its assembler is made when the engine is first seen (auto mode), None with --engine.
        A line no other engine reads is (None, ...), its Unparsed too: the keyword may be
        text in a request log."""
        for name, e in _ENGINES.items():
            if e is self.engine or not any(kw in raw for kw in e.keywords):
                continue
            try:
                rec = e.parse(text, self.clock, self.counts)
            except (ValueError, OverflowError, IndexError):
                continue
            if rec is None or isinstance(rec, Unparsed):
                continue
            asm = self.others.get(name)
            if asm is None and self.read_others:
                asm = self.others[name] = self._new_assembler(e)
            return rec, name, asm
        return None, "", None

    def _detect(self, raw: bytes | bytearray, text: str) -> Any:
        first_unparsed = None
        for e in _ENGINES.values():
            if any(kw in raw for kw in e.keywords):
                rec = e.parse(text, self.clock, self.counts)
                if rec is None:
                    continue
                if isinstance(rec, Unparsed):
                    first_unparsed = first_unparsed or rec
                    continue
                self.engine, self._asm = e, self._new_assembler(e)
                return rec
        return first_unparsed

    def flush(self) -> list[EngineWindow]:
        out = self._asm.flush() if self._asm is not None else []
        for asm in self.others.values():
            out += asm.flush()
        return out

    def engines_read(self) -> list[str]:
        """The engines whose windows this reader gave, the first one first."""
        return ([self.engine.name] if self.engine else []) + list(self.others)


def _same(a: Any, b: Any) -> bool:
    """a == b, with NaN equal to NaN (in floats, tuples and the printed dicts)."""
    if a == b:
        return True
    if type(a) is not type(b) and not (isinstance(a, tuple) and isinstance(b, tuple)):
        return False
    if isinstance(a, float):
        return a != a and b != b
    if isinstance(a, tuple):
        if len(a) != len(b):
            return False
        # equal items need no NaN-aware look
        return all(x == y or _same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(a[k] == b[k] or _same(a[k], b[k]) for k in a)
    return False


def iter_windows(path: str, *, engine: str | None = None, year: int | None = None,
                 counts: ParseCounts | None = None, follow: bool = False,
                 stop: Callable[[], bool] | None = None, poll_s: float = FOLLOW_POLL_S,
                 sleep: Callable[[float], object] = time.sleep,
                 reader_out: list[LineReader] | None = None,
                 selection: Selection | None = None,
                 parallel: bool | None = None, offset: int = 0) -> Iterator[EngineWindow]:
    """Engine windows of a log file, in line order (a few lines are held back per engine).

    engine: "vllm" | "sglang" | "llamacpp" | None (detect). year: year of the first
    year-less line (default: from the file's mtime). follow: keep reading as the file grows
    until `stop()` is true (`sleep` is the wait between polls: a seam for tests), from byte
    `offset` (a probe's `--log` tail starts at the size the log had). `counts` receives the
    line counters.

    Big files (not in follow mode): with an active `selection` (--since/--until, resolved
    here) the read seeks to its window and yields the windows around it, which the caller
    filters (seek.py; it gives the windows of a sequential read, or falls back to one);
    otherwise sequentially, in bounded memory. `parallel` is accepted for old callers and
    ignored (the parallel read was removed).
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
        for raw in read_lines(path, lr.keywords, counts, at=lr.at, tail=lr.tail):
            out = feed(raw)
            if out:  # most lines give no window (held, or the second line of one)
                yield from out
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
    from decodescope.telemetry.logs.seek import seek_windows

    eng = None if engine in (None, "auto") else engine
    seeked = seek_windows(path, selection, engine=eng, year=year, counts=counts,
                          reader_out=reader_out)
    if seeked is None:
        return False
    yield from seeked
    return True


@dataclass
class Selection:
    """`--since/--until`, resolved against the log's first window (see selectors)."""

    since: TimeSpec | None = None
    until: TimeSpec | None = None
    since_s: float | None = None
    until_s: float | None = None
    resolved: bool = False
    without_time: int = 0  # windows left out because they carry no clock time
    # `--until 23:45:00` names a whole second: with sub-second stamps, 23:45:00.4 is inside it.
    _until_res: float = 0.0

    @property
    def active(self) -> bool:
        return self.since is not None or self.until is not None

    def apply(self, windows: Iterator[EngineWindow]) -> Iterator[EngineWindow]:
        if not self.active:
            yield from windows
            return
        for w in windows:
            t = w.t_end_s
            if t is None:
                self.without_time += 1
                continue
            if not self.resolved:
                self._resolve(w.t_start_s if w.t_start_s is not None else t)
            if (self.since_s is None or t >= self.since_s) and \
                    (self.until_s is None or t < self.until_s + self._until_res
                     or t <= self.until_s):
                yield w

    def resolve_at(self, anchor_s: float) -> None:
        """Resolve date-less times against the log's first window (a seek knows it before
        the windows come)."""
        if not self.resolved:
            self._resolve(anchor_s)

    def _resolve(self, anchor_s: float) -> None:
        self.resolved = True
        if self.since is not None:
            self.since_s = self.since.resolve(anchor_s)
        if self.until is not None:
            self.until_s = self.until.resolve(anchor_s, not_before_s=self.since_s)
            self._until_res = self.until.resolution_s
        if self.since_s is not None and self.until_s is not None and self.until_s < self.since_s:
            raise UsageError(f"--until {self.until.text if self.until else ''} is before "
                             f"--since {self.since.text if self.since else ''}",
                             remedy="Give an --until later than --since")
