"""A log's engine windows summed up in the seed's terms, and `analyze_log` (the library entry).

decode = the window's decode rate (all running requests, tok/s); MAL per window and overall
(1 + Σaccepted / Σdrafts; printed MAL weighted by estimated request-steps when an engine
prints no counts); step rate = verification steps per second per running request; idle gaps
= spacing > 1.5 x window length. Idle windows (no tokens) and windows that may include an
idle period do not enter the decode and step-rate figures. Memory: O(windows) floats for the
medians (8 bytes per window and figure), never O(file size).
"""

from __future__ import annotations

import math
import os
from array import array
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from decodescope.analysis.summary import Summary, percentile
from decodescope.errors import UsageError
from decodescope.findings import Finding
from decodescope.telemetry.logs.bins import Binner, WindowBin
from decodescope.telemetry.logs.notes import notes_for
from decodescope.telemetry.logs.pipeline import Selection, iter_windows
from decodescope.telemetry.logs.records import ParseCounts
from decodescope.telemetry.logs.selectors import parse_time
from decodescope.telemetry.window import EngineWindow

SCHEMA_VERSION = 1
IDLE_GAP_FACTOR = 1.5  # a gap: next window ends more than 1.5 intervals after this one
IDLE_GAP_MIN_S = 2.0  # stamps have 1 s resolution: a shorter gap is rounding
MAX_GAPS_KEPT = 20  # the largest idle gaps listed; all are counted
SHORT_SPAN_S = 600.0  # spans shorter than this are shown with seconds
MAX_WINDOWS_KEPT = 1000  # windows listed in the result (the most recent); all are summarized
NOT_A_RATE = ("idle", "may_include_idle")  # flags that keep a window out of rate figures
FAST_SUMMARY_MIN_N = 5000  # above this, summary_of skips Summary.of's exact-fraction stdev


@dataclass(frozen=True)
class IdleGap:
    engine_id: str | None
    t_start_s: float
    t_end_s: float

    @property
    def seconds(self) -> float:
        return self.t_end_s - self.t_start_s

    def to_dict(self) -> dict[str, Any]:
        return {"engine_id": self.engine_id, "t_start_s": self.t_start_s,
                "t_end_s": self.t_end_s, "seconds": self.seconds}


@dataclass(frozen=True)
class EngineSeen:
    engine_id: str | None
    pid: int | None
    windows: int
    mal: float | None  # 1 + Σaccepted / Σdrafts of this engine's windows


@dataclass(frozen=True)
class LogSummary:
    path: str
    engine: str | None  # "vllm" | "sglang" | "llamacpp"; None when nothing was recognized
    windows_total: int
    windows_idle: int
    t_first_s: float | None
    t_last_s: float | None
    decode: Summary | None  # tok/s per window (aggregate over running requests)
    decode_per_request: Summary | None
    mal: Summary | None  # per window
    mal_overall: float | None
    mal_overall_estimated: bool  # printed MAL weighted by estimated steps (no counts printed)
    step_rate: Summary | None  # verification steps / s / running request, per window
    running: Summary | None
    generation_tokens: int | None
    drafts: int | None
    accepted_tokens: int | None
    idle_gaps: tuple[IdleGap, ...]  # the largest, by length
    idle_gap_count: int
    idle_gap_total_s: float
    engines: tuple[EngineSeen, ...]
    lines: dict[str, Any]
    since_s: float | None = None
    until_s: float | None = None
    bins: tuple[WindowBin, ...] = ()
    windows: tuple[EngineWindow, ...] = ()  # the most recent, up to max_windows
    notes: tuple[Finding, ...] = ()
    schema_version: int = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        def s(x: Summary | None) -> dict[str, Any] | None:
            return x.to_dict() if x is not None else None

        return {
            "schema_version": self.schema_version,
            "path": self.path,
            "engine": self.engine,
            "answer": self.headline(),
            "windows_total": self.windows_total,
            "windows_idle": self.windows_idle,
            "windows_listed": len(self.windows),
            "t_first_s": self.t_first_s, "t_last_s": self.t_last_s,
            "since_s": self.since_s, "until_s": self.until_s,
            "decode_tok_s": s(self.decode),
            "decode_per_request_tok_s": s(self.decode_per_request),
            "mal": s(self.mal),
            "mal_overall": self.mal_overall,
            "mal_overall_estimated": self.mal_overall_estimated,
            "step_rate_per_s": s(self.step_rate),
            "running": s(self.running),
            "generation_tokens": self.generation_tokens,
            "drafts": self.drafts,
            "accepted_tokens": self.accepted_tokens,
            "idle_gaps": [g.to_dict() for g in self.idle_gaps],
            "idle_gap_count": self.idle_gap_count,
            "idle_gap_total_s": self.idle_gap_total_s,
            "engines": [vars(e) for e in self.engines],
            "lines": self.lines,
            "bins": [b.to_dict() for b in self.bins],
            "windows": [w.to_dict() for w in self.windows],
            "notes": [n.to_dict() for n in self.notes],
            **self.extra,
        }

    def headline(self) -> str:
        """The answer first: engine, window count and span, decode, MAL, step rate."""
        name = {"vllm": "vLLM", "sglang": "SGLang", "llamacpp": "llama.cpp"}.get(
            self.engine or "", "engine")
        if self.windows_total == 0:
            return f"{name} log: no engine windows found"
        unit = "request" if self.engine == "llamacpp" else "window"
        unit += "" if self.windows_total == 1 else "s"
        parts = [f"{name} log, {self.windows_total} {unit}{_span(self.t_first_s, self.t_last_s)}:"]
        figures = []
        if self.decode is not None:
            figures.append(f"decode median {self.decode.median:.1f} tok/s "
                           f"(peak {self.decode.max:.1f})")
        if self.mal_overall is not None:
            figures.append(f"MAL {self.mal_overall:.2f}")
        if self.step_rate is not None:
            figures.append(f"step rate {self.step_rate.median:.1f}/s")
        if self.running is not None and self.running.median != 1:
            figures.append(f"{self.running.median:g} running")
        if not figures:
            figures.append("no decode activity")
        return " ".join(parts) + " " + ", ".join(figures)


def _span(t0: float | None, t1: float | None) -> str:
    if t0 is None or t1 is None:
        return ""
    a, b = datetime.fromtimestamp(t0), datetime.fromtimestamp(t1)
    hm = "%H:%M:%S" if t1 - t0 < SHORT_SPAN_S else "%H:%M"
    if a.date() == b.date():
        return f" {a:%m-%d} {a.strftime(hm)}\u2013{b.strftime(hm)}"
    return f" {a:%m-%d} {a.strftime(hm)} \u2013 {b:%m-%d} {b.strftime(hm)}"


class LogAccumulator:
    """Adds windows one at a time (follow mode prints them as they come) and sums them up."""

    def __init__(self, max_windows: int = MAX_WINDOWS_KEPT) -> None:
        self.n = self.idle = 0
        self._dec, self._dec_req = array("d"), array("d")
        self._mal, self._step, self._run = array("d"), array("d"), array("d")
        self._t0: float | None = None
        self._t1: float | None = None
        self._acc = self._drafts = 0
        self._est_acc = self._est_steps = 0.0
        self._gen = 0
        self._has_gen = self._has_counts = False
        self._last_end: dict[tuple[Any, ...], float] = {}
        self._gaps: list[IdleGap] = []
        self.gap_count, self.gap_total_s = 0, 0.0
        self._engines: dict[tuple[Any, ...], list[Any]] = {}
        self._bins = Binner()
        self._kept: deque[EngineWindow] = deque(maxlen=max_windows if max_windows > 0 else None)
        self.flag_counts: dict[str, int] = {}

    def add(self, w: EngineWindow) -> None:
        self.n += 1
        self._kept.append(w)
        flags = w.flags
        rate_ok = True
        if flags:
            fc = self.flag_counts
            for f in flags:
                fc[f] = fc.get(f, 0) + 1
            rate_ok = not any(f in NOT_A_RATE for f in flags)
        key = (w.printed.get("pid"), w.engine_id)
        t1 = w.t_end_s
        if t1 is not None:
            t0 = w.t_start_s if w.t_start_s is not None else t1
            if self._t0 is None or t0 < self._t0:
                self._t0 = t0
            if self._t1 is None or t1 > self._t1:
                self._t1 = t1
            self._gap(key, w)
        if w.generation_tokens is not None:
            self._gen += w.generation_tokens
            self._has_gen = True
        acc = drafts = 0.0
        mal = w.mal
        if w.drafts and w.accepted_tokens is not None:
            acc, drafts = w.accepted_tokens, w.drafts
            self._acc += w.accepted_tokens
            self._drafts += w.drafts
            self._has_counts = True
        elif mal is not None:
            steps = _estimated_steps(w, mal)
            if steps:
                acc, drafts = steps * (mal - 1.0), steps
                self._est_acc += acc
                self._est_steps += steps
        eng = self._engines.get(key)
        if eng is None:
            eng = self._engines[key] = [0, 0.0, 0.0]
        eng[0] += 1
        eng[1] += acc
        eng[2] += drafts
        if mal is not None:
            self._mal.append(mal)
        decode = step = None
        running = w.running
        if rate_ok:
            decode = w.decode_rate
            step = window_step_rate(w)
        if "idle" in flags:
            self.idle += 1
        else:
            if decode is not None:
                self._dec.append(decode)
                if running:
                    self._dec_req.append(decode / running)
            if step is not None:
                self._step.append(step)
            if running is not None:
                self._run.append(running)
        self._bins.add(w.t_start_s, t1, w.engine_id, decode, acc, drafts, step, running, flags)

    def _gap(self, key: tuple[Any, ...], w: EngineWindow) -> None:
        prev = self._last_end.get(key)
        assert w.t_end_s is not None
        self._last_end[key] = w.t_end_s
        d = w.duration_s
        if prev is None or d is None or w.t_start_s is None:
            return
        if w.t_end_s - prev > IDLE_GAP_FACTOR * d and w.t_start_s - prev >= IDLE_GAP_MIN_S:
            gap = IdleGap(w.engine_id, prev, w.t_start_s)
            self.gap_count += 1
            self.gap_total_s += gap.seconds
            self._gaps.append(gap)
            if len(self._gaps) > 4 * MAX_GAPS_KEPT:
                self._gaps = sorted(self._gaps, key=lambda g: -g.seconds)[:MAX_GAPS_KEPT]

    def finish(self, path: str, engine: str | None, counts: ParseCounts,
               selection: Selection | None = None) -> LogSummary:
        steps = self._drafts + self._est_steps
        mal_overall = 1.0 + (self._acc + self._est_acc) / steps if steps else None
        engines = tuple(
            EngineSeen(engine_id=k[1], pid=int(k[0]) if k[0] is not None else None,
                       windows=v[0], mal=1.0 + v[1] / v[2] if v[2] else None)
            for k, v in self._engines.items()
        )
        summary = LogSummary(
            path=path, engine=engine, windows_total=self.n, windows_idle=self.idle,
            t_first_s=self._t0, t_last_s=self._t1,
            decode=summary_of(self._dec), decode_per_request=summary_of(self._dec_req),
            mal=summary_of(self._mal), mal_overall=mal_overall,
            mal_overall_estimated=self._est_steps > 0,
            step_rate=summary_of(self._step), running=summary_of(self._run),
            generation_tokens=self._gen if self._has_gen else None,
            drafts=self._drafts if self._has_counts else None,
            accepted_tokens=self._acc if self._has_counts else None,
            idle_gaps=tuple(sorted(self._gaps, key=lambda g: -g.seconds)[:MAX_GAPS_KEPT]),
            idle_gap_count=self.gap_count, idle_gap_total_s=self.gap_total_s,
            engines=engines, lines=counts.to_dict(),
            since_s=selection.since_s if selection else None,
            until_s=selection.until_s if selection else None,
            bins=self._bins.bins(), windows=tuple(self._kept),
        )
        notes = notes_for(summary, counts, self.flag_counts, selection)
        return _replace_notes(summary, notes)


def summary_of(values: array[float]) -> Summary | None:
    """Summary.of, with a faster exact-enough path for many values.

    Summary.of computes stdev with exact fractions (statistics.stdev): about 1.4 us per value,
    seconds for a big log. Past FAST_SUMMARY_MIN_N values the same fields are computed with
    one sort and math.fsum (agrees to ~1e-12 relative; tests/test_logs_summary.py checks).
    """
    if len(values) <= FAST_SUMMARY_MIN_N:
        return Summary.of(values)
    xs = sorted(v for v in values if v == v)
    n = len(xs)
    if n < 2:
        return Summary.of(xs)
    med = _median_sorted(xs)
    mean = math.fsum(xs) / n
    ss = math.fsum((x - mean) ** 2 for x in xs)
    return Summary(
        n=n, mean=mean, stdev=math.sqrt(ss / (n - 1)), median=med,
        mad=_median_sorted(sorted(abs(x - med) for x in xs)),
        p5=percentile(xs, 5), p95=percentile(xs, 95), p99=percentile(xs, 99),
        min=xs[0], max=xs[-1],
    )


def _median_sorted(xs: list[float]) -> float:
    n = len(xs)
    mid = n // 2
    return xs[mid] if n % 2 else (xs[mid - 1] + xs[mid]) / 2


def _replace_notes(s: LogSummary, notes: tuple[Finding, ...]) -> LogSummary:
    from dataclasses import replace

    return replace(s, notes=notes)


def _estimated_steps(w: EngineWindow, mal: float) -> float | None:
    """Request-steps of a window that prints MAL but no counts (SGLang, llama.cpp)."""
    steps = w.printed.get("decode_steps")
    if steps is not None and w.running:
        return steps * w.running  # SGLang: each batch step verifies every running request
    if w.generation_tokens and mal > 0:
        return w.generation_tokens / mal  # llama.cpp: tokens / tokens-per-step
    return None


def window_step_rate(w: EngineWindow) -> float | None:
    """Verification steps / s / running request; from counts, else decode rate / MAL."""
    s = w.step_rate
    if s is not None:
        return s
    per_req = w.decode_rate_per_request
    if per_req is None:
        return None
    mal = w.mal
    if mal:
        return per_req / mal
    return per_req if "spec_off" in w.flags else None  # no drafts: one token per step


def analyze_log(path: str, since: str | float | datetime | None = None,
                until: str | float | datetime | None = None, engine: str | None = None,
                year: int | None = None, max_windows: int = MAX_WINDOWS_KEPT) -> LogSummary:
    """Read an engine log (vLLM / SGLang / llama.cpp) and sum up its windows.

    since/until: `HH:MM`, `MM-DD HH:MM[:SS]`, ISO date-time, epoch seconds or a datetime;
    engine: "vllm" | "sglang" | "llamacpp" | "auto"/None; year: the year of the first
    year-less line (default: from the file's mtime). Raises UsageError for a missing file.
    """
    check_log_path(path)
    selection = Selection(since=parse_time(since) if since is not None else None,
                          until=parse_time(until) if until is not None else None)
    counts = ParseCounts()
    readers: list[Any] = []
    acc = LogAccumulator(max_windows)
    for w in selection.apply(iter_windows(path, engine=engine, year=year, counts=counts,
                                          reader_out=readers)):
        acc.add(w)
    found = readers[0].engine.name if readers and readers[0].engine else None
    return acc.finish(path, found, counts, selection)


def check_log_path(path: str) -> None:
    if not os.path.exists(path):
        raise UsageError("log file not found", where=path,
                         remedy="Check the path; for a server started by systemd or docker, "
                                "save its log first (journalctl -u NAME > engine.log, "
                                "docker logs NAME > engine.log 2>&1)")
    if os.path.isdir(path):
        raise UsageError("log path is a directory", where=path, remedy="Give the log file itself")
    if not os.access(path, os.R_OK):
        raise UsageError("log file is not readable", where=path,
                         remedy="Check its permissions (or run with sudo)")
