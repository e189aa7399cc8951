"""Windows -> LogSummary, one window at a time, and `analyze_log` (the library entry).

Idle windows (no tokens) and windows that may include an idle period do not enter the decode
and step-rate figures. Memory is bounded whatever the log's size: each figure is a
figures.Figure (exact up to 131,072 values, then a log-bucket histogram: median and
percentiles within 0.05 %), the most recent `max_windows` windows (0 = all: the one thing
that grows, on request), the 20 longest idle gaps, 48 time bins.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from decodescope.records.findings import Finding
from decodescope.records.window import EngineWindow
from decodescope.telemetry.logs.bins import Binner
from decodescope.telemetry.logs.figures import (
    EXACT_MAX,
    REL_ERROR,
    Figure,
)
from decodescope.telemetry.logs.log_summary import EngineSeen, IdleGap, LogSummary, RequestShape
from decodescope.telemetry.logs.notes import notes_for
from decodescope.telemetry.logs.parse_counts import ParseCounts
from decodescope.telemetry.logs.pipeline import iter_windows
from decodescope.telemetry.logs.reader import check_followable, check_log_path, head_bytes
from decodescope.telemetry.logs.selectors import Selection, parse_time
from decodescope.telemetry.logs.steps import FULL_COVERAGE, step_info

IDLE_GAP_FACTOR = 1.5  # a gap: next window ends more than 1.5 intervals after this one
IDLE_GAP_MIN_S = 2.0  # stamps have 1 s resolution: a shorter gap is rounding
MAX_GAPS_KEPT = 20  # the largest idle gaps listed; all are counted
MAX_WINDOWS_KEPT = 1000  # windows listed in the result (the most recent); all are summarized
NOT_A_RATE = ("idle", "may_include_idle")  # flags that keep a window out of rate figures
_NOT_A_RATE = frozenset(NOT_A_RATE)
MAX_SHAPES = 12  # request shapes listed; requests of further shapes are counted together
MOST_STEPS = 0.5  # a request that drafted on at least half its steps: "most steps drafted"
OVERLAP_KEPT = 256  # recent requests kept to count how many ran at once

class LogAccumulator:
    """Adds windows one at a time (follow mode prints them as they come) and sums them up."""

    def __init__(self, max_windows: int = MAX_WINDOWS_KEPT) -> None:
        self.n = self.idle = 0
        self._dec, self._dec_req = Figure(), Figure()
        self._mal, self._step, self._run = Figure(), Figure(), Figure()
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
        # Step-rate bookkeeping: windows whose step rate is unknown (drafts only, partial
        # coverage) or withheld (counts contradict), and drafts vs steps where both are known.
        self.step_unknown = self.step_withheld = self.partial_coverage = 0
        self.zero_running = 0  # windows with drafts or tokens but 0 running: no step rate
        self.intervals: dict[tuple[str, str | None, float], int] = {}  # (engine, id, s) -> n
        self._cov_drafts = self._cov_steps = 0.0
        self._drafts_rate = Figure()
        self.spec: dict[str, Any] = {}
        self._shapes: dict[tuple[int | None, str], _Shape] = {}
        self._shapes_other = 0
        self._spans: deque[tuple[float, float]] = deque(maxlen=OVERLAP_KEPT)
        self._unsorted = 0  # neighbours in _spans whose ends are out of order
        self._max_at_once: int | None = None

    def add(self, w: EngineWindow) -> None:
        self.n += 1
        self._kept.append(w)
        flags = w.flags
        printed = w.printed
        rate_ok = True
        idle = False
        if flags:
            fc = self.flag_counts
            for f in flags:
                fc[f] = fc.get(f, 0) + 1
            rate_ok = _NOT_A_RATE.isdisjoint(flags)
            idle = "idle" in flags
        key = (printed.get("pid"), w.engine_id, w.engine)
        iv = printed.get("log_interval_s")
        if iv is not None and not (flags and "interval_default" in flags):
            ik = (w.engine, w.engine_id, iv)
            self.intervals[ik] = self.intervals.get(ik, 0) + 1
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
            eng = self._engines[key] = [0, 0.0, 0.0, None, None]
        eng[0] += 1
        eng[1] += acc
        eng[2] += drafts
        if t1 is not None:  # the span of each engine: two servers overlap, a restart does not
            if eng[3] is None:
                eng[3] = t1
            eng[4] = t1
        if mal is not None:
            self._mal.append(mal)
        decode = step = cov = tps = None
        running = w.running
        if rate_ok:
            decode = w.decode_rate
            info = step_info(w)
            step, cov, tps = info.rate, info.coverage, info.tokens_per_step
            if info.withheld:
                self.step_withheld += 1
            elif info.zero_running:
                if not idle:
                    self.zero_running += 1
            elif step is None and w.drafts:
                self.step_unknown += 1
            if cov is not None and w.drafts:
                if cov < FULL_COVERAGE:
                    self.partial_coverage += 1
                self._cov_drafts += w.drafts
                self._cov_steps += w.drafts / cov
            if info.drafts_rate is not None and not idle:
                self._drafts_rate.append(info.drafts_rate)
        if idle:
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
        if not idle and "predicted_n" in printed:  # a request (llama.cpp)
            self._request(w, decode, step, cov, tps)

    def _request(self, w: EngineWindow, decode: float | None, step: float | None,
                 coverage: float | None, tokens_per_step: float | None) -> None:
        """Requests by shape, and how many ran at once (a per-request log)."""
        p = w.printed
        if w.drafts == 0 or "spec_off" in w.flags:
            drafting = "no drafts"
        elif coverage is None:
            drafting = "drafts unknown"
        else:
            drafting = "most steps drafted" if coverage >= MOST_STEPS else "few steps drafted"
        key = (int(p["predicted_n"]), drafting)
        sh = self._shapes.get(key)
        if sh is None:
            if len(self._shapes) >= MAX_SHAPES:
                self._shapes_other += 1
                sh = None
            else:
                sh = self._shapes[key] = _Shape()
        if sh is not None:
            sh.n += 1
            if decode is not None:
                sh.decode.append(decode / (w.running or 1.0))
            if step is not None:
                sh.step.append(step)
            if w.drafts and w.accepted_tokens is not None:
                sh.acc += w.accepted_tokens
                sh.drafts += w.drafts
            if tokens_per_step and w.generation_tokens is not None:
                sh.gen += w.generation_tokens
                sh.steps += w.generation_tokens / tokens_per_step
        end = p.get("t_elapsed_s")
        if end is not None:
            start = end - p.get("decode_s", 0.0) - p.get("prompt_s", 0.0)
            at_once = 1 + self._note_span(start, end)
            self._max_at_once = max(self._max_at_once or 0, at_once)

    def _note_span(self, start: float, end: float) -> int:
        """The kept requests that ran during [start, end] (ended after `start`, began before
        `end`); then keeps this one. Requests are printed when they end, so the kept ones are
        almost always in end order: then only the newest few can end after `start`, and the
        count stops at the first that does not (the answer of counting all, in a few steps).
        `_unsorted` counts the neighbours out of end order (NaN counts as out of order)."""
        spans = self._spans
        if self._unsorted:
            n = sum(1 for s0, e0 in spans if e0 > start and s0 < end)
        else:
            n = 0
            for s0, e0 in reversed(spans):
                if not e0 > start:
                    break
                if s0 < end:
                    n += 1
        if len(spans) == spans.maxlen and len(spans) > 1 and not spans[0][1] <= spans[1][1]:
            self._unsorted -= 1  # the pair that leaves was out of end order
        if spans and not spans[-1][1] <= end:
            self._unsorted += 1
        spans.append((start, end))
        return n

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
                       windows=v[0], mal=1.0 + v[1] / v[2] if v[2] else None, engine=k[2],
                       t_first_s=v[3], t_last_s=v[4])
            for k, v in self._engines.items()
        )
        summary = LogSummary(
            path=path, engine=engine, windows_total=self.n, windows_idle=self.idle,
            t_first_s=self._t0, t_last_s=self._t1,
            decode=self._dec.summary(), decode_per_request=self._dec_req.summary(),
            mal=self._mal.summary(), mal_overall=mal_overall,
            mal_overall_estimated=self._est_steps > 0,
            step_rate=self._step.summary(), running=self._run.summary(),
            generation_tokens=self._gen if self._has_gen else None,
            drafts=self._drafts if self._has_counts else None,
            accepted_tokens=self._acc if self._has_counts else None,
            idle_gaps=tuple(sorted(self._gaps, key=lambda g: -g.seconds)[:MAX_GAPS_KEPT]),
            idle_gap_count=self.gap_count, idle_gap_total_s=self.gap_total_s,
            engines=engines, lines=counts.to_dict(),
            since_s=selection.since_s if selection else None,
            until_s=selection.until_s if selection else None,
            bins=self._bins.bins(), windows=tuple(self._kept),
            draft_coverage=(self._cov_drafts / self._cov_steps if self._cov_steps else None),
            drafts_rate=self._drafts_rate.summary(),
            windows_step_unknown=self.step_unknown, windows_steps_withheld=self.step_withheld,
            windows_partial_coverage=self.partial_coverage, spec=dict(self.spec),
            windows_zero_running=self.zero_running,
            intervals=tuple((e, i, s, n) for (e, i, s), n in self.intervals.items()),
            shapes=tuple(RequestShape(k[0], k[1], v.n, v.decode.summary(),
                                      1.0 + v.acc / v.drafts if v.drafts else None,
                                      v.step.summary(), v.gen / v.steps if v.steps else None)
                         for k, v in self._shapes.items()),
            shapes_other=self._shapes_other, max_at_once=self._max_at_once,
        )
        notes = notes_for(summary, counts, self.flag_counts, selection)
        figures = (self._dec, self._dec_req, self._mal, self._step, self._run, self._drafts_rate)
        if any(f.approx for f in figures):
            notes += (Finding(
                "logs.figures_approx",
                f"more than {EXACT_MAX:,} windows: medians, MAD and percentiles from a "
                f"log-bucket histogram (within {REL_ERROR:.2%}); n, mean, stdev, min, max exact",
                severity="info"),)
            return replace(summary, notes=notes, extra={"figures_rel_error": REL_ERROR})
        return replace(summary, notes=notes)


class _Shape:
    __slots__ = ("n", "decode", "step", "acc", "drafts", "gen", "steps")

    def __init__(self) -> None:
        self.n = 0
        self.decode, self.step = Figure(), Figure()
        self.acc = self.drafts = 0
        self.gen = self.steps = 0.0


def _estimated_steps(w: EngineWindow, mal: float) -> float | None:
    """Request-steps of a window that prints MAL but no counts (SGLang, llama.cpp)."""
    steps = w.printed.get("decode_steps")
    if steps is not None and w.running:
        return steps * w.running  # SGLang: each batch step verifies every running request
    if w.generation_tokens and mal > 0:
        return w.generation_tokens / mal  # llama.cpp: tokens / tokens-per-step
    return None


def window_step_rate(w: EngineWindow) -> float | None:
    """Verification steps / s / running request, or None when the window cannot tell (never
    the draft rate: see steps.py)."""
    return step_info(w).rate


def analyze_log(path: str, since: str | float | datetime | None = None,
                until: str | float | datetime | None = None, engine: str | None = None,
                year: int | None = None, max_windows: int = MAX_WINDOWS_KEPT,
                follow: bool = False,
                on_window: Callable[[EngineWindow], None] | None = None) -> LogSummary:
    """Read an engine log (vLLM / SGLang / llama.cpp) and sum up its windows.

    since/until: `HH:MM`, `MM-DD HH:MM[:SS]`, ISO date-time, epoch seconds or a datetime;
    engine: "vllm" | "sglang" | "llamacpp" | "auto"/None; year: the year of the first
    year-less line (default: from the file's mtime); the read is sequential, in bounded
    memory (a seek for --since/--until on a big file); follow: keep reading as the file grows
    (rotation and truncation survived) until Ctrl-C, which ends the tail and gives the summary
    so far; on_window: called with each selected window as it comes (`logs
    --json --max-windows 0` writes them out as it goes instead of keeping them). Raises UsageError for a missing file.
    """
    (check_followable if follow else check_log_path)(path)
    selection = Selection(since=parse_time(since) if since is not None else None,
                          until=parse_time(until) if until is not None else None)
    counts = ParseCounts()
    readers: list[Any] = []
    acc = LogAccumulator(max_windows)
    windows = iter_windows(path, engine=engine, year=year, counts=counts, reader_out=readers,
                           follow=follow, selection=None if follow else selection)
    try:
        for w in selection.apply(windows):
            acc.add(w)
            if on_window is not None:
                on_window(w)
    except KeyboardInterrupt:
        if not follow:
            raise
    found = readers[0].engine.name if readers and readers[0].engine else None
    acc.spec = spec_of(readers[0] if readers else None)
    return replace(acc.finish(path, found, counts, selection), simulated=is_simulated(path))


def spec_of(reader: Any) -> dict[str, Any]:
    """What the whole log said about speculative decoding (vLLM: method and k from the launch
    config and the spec lines, `off` without either); {} when the engine does not tell."""
    asm = getattr(reader, "assembler", None)
    info = getattr(asm, "spec_info", None)
    return dict(info()) if callable(info) else {}


SIM_MARK = b"decodescope SIMULATOR"  # first line of a log written by `decodescope sim`


def is_simulated(path: str) -> bool:
    """True for a log written by decodescope's simulator (its first line says so)."""
    return SIM_MARK in head_bytes(path, 4096)
