"""Candidate lines -> records -> engine windows (`LineReader`), with engine auto-detection.

The engine is given or detected from the first line that parses; after
that its keywords are searched, plus one watch keyword of each other engine: a log that mixes
two engines (an SGLang server's lines between a vLLM server's) is read for both, each into
its own assembler (auto mode), or its other engine's lines are counted and said (--engine
given); never dropped silently. Stamps going backwards are counted (ParseCounts.backwards).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from decodescope.errors import UsageError
from decodescope.records.window import EngineWindow
from decodescope.telemetry.logs import llamacpp, sglang, vllm
from decodescope.telemetry.logs.clock import Clock, strip_ansi
from decodescope.telemetry.logs.llamacpp import LlamacppAssembler
from decodescope.telemetry.logs.parse_counts import ParseCounts, Unparsed
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
    if isinstance(rec, vllm.VLine):  # a vLLM row without a record type of its own
        return f"vllm {rec.kind}"
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


def _kind_info(kind: type) -> tuple[int, int, str | None]:
    """(position of `t_s` or -1, position of `pid` or -1, the format name when one per type)
    of a record type (records are NamedTuples)."""
    names = kind._fields  # type: ignore[attr-defined]
    return (names.index("t_s") if "t_s" in names else -1,
            names.index("pid") if "pid" in names else -1, _OTHER_FORMATS.get(kind))


_KINDS: dict[type, tuple[int, int, str | None]] = {}


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
        self._newest_te = -math.inf  # llama.cpp: the newest elapsed stamp, its records
        self._at_newest: list[Any] = []

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

    def _duplicate(self, rec: Any, kind: Any, t: float | None) -> bool:
        """True for a copy of a recent record: same fields (NaN equal to NaN: `nan%` lines),
        stamps within DUP_WINDOW_S. llama.cpp records carry no clock time: a copy is the same
        record as the one just before it, or as a recent one with the same elapsed stamp
        (microseconds: two requests never share it). `t`: the record's clock stamp."""
        recent = self._recent
        if t is None:
            prev, self._prev = self._prev, rec
            if kind in _LLAMA_RECORDS:
                # A copy parses to the same record type: other types are never compared.
                if type(prev) is kind and _same_llama(prev, rec):
                    return True
                te = rec.t_elapsed_s
                if te is not None:
                    # The stamp counts up from the server's start: a line past the newest
                    # stamp is no copy, and one at it can only copy a line at it (the
                    # records at the newest stamp, at most DUP_RECENT of them).
                    if te == self._newest_te:
                        at = self._at_newest
                        for r0 in at:
                            if type(r0) is kind and _same_llama(r0, rec):
                                return True
                        if len(at) < DUP_RECENT:
                            at.append(rec)
                    elif te > self._newest_te:
                        self._newest_te, self._at_newest = te, [rec]
                    else:
                        for t0, r0 in recent:
                            if t0 == te and type(r0) is kind and _same_llama(r0, rec):
                                return True
                    recent.append((te, rec))
            return False  # no clock: two equal lines may be two equal requests
        i = -1
        for t0, r0 in recent:
            if -DUP_WINDOW_S <= t - t0 <= DUP_WINDOW_S and type(r0) is kind:
                if i < 0:
                    i = _t_index(kind)
                if _same(r0[:i], rec[:i]) and _same(r0[i + 1:], rec[i + 1:]):
                    return True
        recent.append((t, rec))
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
        eng = self.engine
        name = eng.name if eng is not None else "unknown"
        try:
            if eng is not None:
                rec = eng.parse(text, self.clock, self.counts)
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
        counts = self.counts
        kind = type(rec)
        if kind is Unparsed:
            counts.lines_matched += 1
            counts.unparsed[rec.kind] += 1
            return []
        if self.tail[0]:
            e = _ENGINES.get(name)
            if self.growing or e is None or not e.complete(text, rec):
                counts.cut_lines += 1  # cut mid-line: no number from it
                return []
        if asm is None:  # another engine, --engine given
            counts.other_engines[name] += 1
            return []
        counts.lines_matched += 1
        info = _KINDS.get(kind)
        if info is None:
            info = _KINDS[kind] = _kind_info(kind)
        t = rec[info[0]] if info[0] >= 0 else None
        if self._duplicate(rec, kind, t):
            counts.duplicates += 1
            return []
        if t is not None:
            key = (name, rec[info[1]] if info[1] >= 0 else None)
            last = self.last_t.get(key)
            if last is not None and t < last - BACKWARDS_SLACK_S:
                counts.note_backwards(self.at[0], last, t)
            self.last_t[key] = t
        counts.lines_parsed += 1
        counts.formats[info[2] or format_of(rec)] += 1
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


_NO_NAN = frozenset((str, int, bool, type(None)))  # types whose unequal values differ


def _same_llama(a: Any, b: Any) -> bool:
    """_same of two llama.cpp records of one type: their fields are numbers read from digits,
    which are never NaN, but for a draft line's per-position rates (a printed `nan`)."""
    return a == b or (type(a) is llamacpp.LDraft and _same_record(a, b))


def _same_record(a: Any, b: Any) -> bool:
    """_same of two records of one type (field by field: most pairs differ in a field that
    cannot hold a NaN, told without a call)."""
    for x, y in zip(a, b):  # noqa: B905, SIM110 — one record type: one length; no generator
        if x != y and (type(x) in _NO_NAN or not _same(x, y)):
            return False
    return True


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
