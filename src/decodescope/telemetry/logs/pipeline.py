"""File -> candidate lines -> records -> engine windows, with engine auto-detection.

`iter_windows` is the stream (an iterator, constant memory); `select_window_times` applies
`--since/--until`. The engine is given or detected from the first line that parses; after
that only its keywords are searched.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from decodescope.errors import UsageError
from decodescope.telemetry.logs import llamacpp, sglang, vllm
from decodescope.telemetry.logs.clock import Clock, strip_ansi
from decodescope.telemetry.logs.llamacpp import LlamacppAssembler
from decodescope.telemetry.logs.reader import (
    FOLLOW_POLL_S,
    check_log_path,
    follow_blocks,
    matching_lines,
    read_lines,
)
from decodescope.telemetry.logs.records import ParseCounts, Unparsed
from decodescope.telemetry.logs.selectors import TimeSpec
from decodescope.telemetry.logs.sglang import SglangAssembler
from decodescope.telemetry.logs.vllm_windows import VllmAssembler
from decodescope.telemetry.window import EngineWindow

ENGINE_NAMES = ("vllm", "sglang", "llamacpp")
IDLE_FLUSH_S = 2.0  # follow mode: emit held windows after this long without new lines
# Some log shippers (a docker log driver plus a sidecar, journald forwarding twice) write every
# line twice within a millisecond. A record equal to a recent one in everything but its stamp,
# stamped within DUP_WINDOW_S of it, is such a copy: counted (ParseCounts.duplicates), dropped.
# Two engines never print the same record: pid and engine id are part of it.
DUP_WINDOW_S = 0.05
DUP_RECENT = 16  # records remembered for the comparison (copies arrive next to each other)


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


_ENGINES = {
    "vllm": _Engine("vllm", vllm.KEYWORDS, vllm.LEAN_KEYWORDS, vllm.parse, VllmAssembler),
    "sglang": _Engine("sglang", sglang.KEYWORDS, sglang.LEAN_KEYWORDS, sglang.parse,
                      SglangAssembler),
    "llamacpp": _Engine("llamacpp", llamacpp.KEYWORDS, llamacpp.LEAN_KEYWORDS, llamacpp.parse,
                        LlamacppAssembler),
}
_ALL_KEYWORDS = tuple(kw for e in _ENGINES.values() for kw in e.keywords)


def format_of(rec: Any) -> str:
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


class LineReader:
    """Turns candidate lines into windows; owns the engine choice, clock and counters."""

    def __init__(self, engine: str | None, clock: Clock, counts: ParseCounts) -> None:
        if engine is not None and engine not in _ENGINES:
            raise UsageError(f"unknown engine {engine!r}",
                             remedy=f"Use one of: {', '.join(ENGINE_NAMES)}, auto")
        self.clock, self.counts = clock, counts
        self.engine: _Engine | None = _ENGINES[engine] if engine else None
        self._asm: _Assembler | None = self.engine.assembler(counts) if self.engine else None
        self._recent: deque[tuple[float, str]] = deque(maxlen=DUP_RECENT)

    @property
    def assembler(self) -> Any:
        """The engine's window assembler (None until the engine is known)."""
        return self._asm

    def _duplicate(self, rec: Any) -> bool:
        """True for a copy of a recent record (same fields, stamps within DUP_WINDOW_S)."""
        t = getattr(rec, "t_s", None)
        if t is None:
            return False  # no clock: two equal lines may be two equal requests
        key = repr(rec._replace(t_s=None))
        for t0, k0 in self._recent:
            if k0 == key and abs(t - t0) <= DUP_WINDOW_S:
                return True
        self._recent.append((t, key))
        return False

    def keywords(self) -> tuple[bytes, ...]:
        if self.engine is None:
            return _ALL_KEYWORDS
        if self._asm is not None and self._asm.config_known:
            return self.engine.lean_keywords
        return self.engine.keywords

    def feed(self, raw: bytes | bytearray) -> list[EngineWindow]:
        text = raw.decode("utf-8", "replace")
        if "\x1b" in text:
            text = strip_ansi(text)
        if text.endswith("\r"):
            text = text.rstrip("\r")
        try:
            if self.engine is not None:
                rec = self.engine.parse(text, self.clock, self.counts)
            else:
                rec = self._detect(raw, text)
        except (ValueError, OverflowError, IndexError):  # a number the patterns let through
            rec = Unparsed(f"{self.engine.name if self.engine else 'unknown'}.malformed")
        if rec is None:
            return []
        self.counts.lines_matched += 1
        if isinstance(rec, Unparsed):
            self.counts.unparsed[rec.kind] += 1
            return []
        if self._duplicate(rec):
            self.counts.duplicates += 1
            return []
        self.counts.lines_parsed += 1
        self.counts.formats[format_of(rec)] += 1
        assert self._asm is not None
        return self._asm.feed(rec)

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
                self.engine, self._asm = e, e.assembler(self.counts)
                return rec
        return first_unparsed

    def flush(self) -> list[EngineWindow]:
        return self._asm.flush() if self._asm is not None else []


def iter_windows(path: str, *, engine: str | None = None, year: int | None = None,
                 counts: ParseCounts | None = None, follow: bool = False,
                 stop: Callable[[], bool] | None = None, poll_s: float = FOLLOW_POLL_S,
                 sleep: Callable[[float], None] = time.sleep,
                 reader_out: list[LineReader] | None = None) -> Iterator[EngineWindow]:
    """Engine windows of a log file, in line order (a few lines are held back per engine).

    engine: "vllm" | "sglang" | "llamacpp" | None (detect). year: year of the first
    year-less line (default: from the file's mtime). follow: keep reading as the file grows
    until `stop()` is true (`sleep` is the wait between polls: a seam for tests). `counts`
    receives the line counters.
    """
    counts = counts if counts is not None else ParseCounts()
    if not follow:
        check_log_path(path)
    try:
        mtime = os.stat(path).st_mtime
    except FileNotFoundError:  # follow mode waits for the file
        mtime = None
    lr = LineReader(None if engine in (None, "auto") else engine, Clock(year, mtime), counts)
    if reader_out is not None:
        reader_out.append(lr)
    if not follow:
        for raw in read_lines(path, lr.keywords, counts):
            yield from lr.feed(raw)
        yield from lr.flush()
        return
    idle_polls = 0
    for block in follow_blocks(path, counts, stop=stop or (lambda: False), poll_s=poll_s,
                               sleep=sleep):
        if block is None:
            idle_polls += 1
            if poll_s > 0 and idle_polls * poll_s >= IDLE_FLUSH_S:
                idle_polls = 0
                yield from lr.flush()
            continue
        idle_polls = 0
        for raw in matching_lines(block, 0, len(block), lr.keywords()):
            yield from lr.feed(raw)
    yield from lr.flush()


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
