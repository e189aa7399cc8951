"""Windows as columns: LogAccumulator.add for a whole batch of windows in numpy.

A bulk reader (bulk_sglang.py) hands the windows of a block as arrays, one value per
window, instead of one EngineWindow each: `add_columns` leaves the accumulator in the state
that `add` of each window, in order, leaves it in (same counters, same sums bit for bit: a
sum runs in window order through np.cumsum, as `+=` does; the figures through
figures.extend). It covers the windows the bulk readers make: one engine key per batch, a
clock time on every window, no request shapes; the kept windows are built by the caller.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from decodescope.telemetry.logs import figures
from decodescope.telemetry.logs.accumulate import (
    IDLE_GAP_FACTOR,
    IDLE_GAP_MIN_S,
    MAX_GAPS_KEPT,
    LogAccumulator,
)
from decodescope.telemetry.logs.log_summary import IdleGap
from decodescope.telemetry.logs.steps import FULL_COVERAGE


@dataclass
class WindowColumns:
    """One batch of windows of one engine key (pid, engine id, engine), in stream order.
    Float arrays; NaN stands for None."""

    engine: str
    engine_id: str | None
    pid: float | None
    t_start: Any
    t_end: Any  # never NaN: every window has a clock time
    running: Any
    rate: Any  # decode rate where the window enters the rate figures (add's `decode`), else NaN
    mal: Any
    acc: Any  # accepted tokens as add() sums them (0.0 when none)
    drafts: Any
    estimated: Any  # bool: acc and drafts are steps estimated from a printed MAL
    step: Any  # step rate where it is known and the window enters the rate figures
    drafts_rate: Any  # steps.StepInfo.drafts_rate of the rate windows (NaN: None)
    idle: Any  # bool
    zero_running: int  # rate windows, not idle, with 0 running (no step rate)
    flags: dict[str, Any] = field(default_factory=dict)  # name -> bool mask, in tuple order
    interval: float | None = None  # printed log_interval_s of every window (vLLM)
    gen: Any = None  # generation tokens (int64), every window; None: not printed
    counted: Any = None  # bool: acc and drafts are printed counts (ints), not estimates
    coverage: Any = None  # StepInfo.coverage of the rate windows with drafts (NaN: None)
    withheld: int = 0  # rate windows whose step rate the counts withhold


def _seq(start: float, xs: Any) -> float:
    """start + xs[0] + xs[1] + ..., one addition after the other (as `+=` in a loop)."""
    return float(np.cumsum(np.concatenate(([start], xs)))[-1]) if xs.size else start


def add_columns(acc: LogAccumulator, c: WindowColumns) -> None:
    """acc.add(w) for each window of `c`, except keeping the windows (the caller's)."""
    n = len(c.t_end)
    if not n:
        return
    acc.n += n
    firsts = []
    for pos, (name, mask) in enumerate(c.flags.items()):
        idx = np.flatnonzero(mask)
        if idx.size:
            firsts.append((int(idx[0]), pos, name, int(idx.size)))
    for _, _, name, k in sorted(firsts):  # a flag is first counted where it first occurs
        acc.flag_counts[name] = acc.flag_counts.get(name, 0) + k
    key = (c.pid, c.engine_id, c.engine)
    t0 = np.where(np.isnan(c.t_start), c.t_end, c.t_start)
    lo, hi = float(t0.min()), float(c.t_end.max())
    if acc._t0 is None or lo < acc._t0:
        acc._t0 = lo
    if acc._t1 is None or hi > acc._t1:
        acc._t1 = hi
    if c.interval is not None:
        ik = (c.engine, c.engine_id, c.interval)
        acc.intervals[ik] = acc.intervals.get(ik, 0) + n
    _gaps(acc, key, c)
    if c.gen is not None:
        acc._gen += int(c.gen.sum())
        acc._has_gen = True
    if c.counted is not None and c.counted.any():
        acc._acc += int(c.acc[c.counted].astype(np.int64).sum())
        acc._drafts += int(c.drafts[c.counted].astype(np.int64).sum())
        acc._has_counts = True
    est = c.estimated
    acc._est_acc = _seq(acc._est_acc, c.acc[est])
    acc._est_steps = _seq(acc._est_steps, c.drafts[est])
    eng = acc._engines.get(key)
    if eng is None:
        eng = acc._engines[key] = [0, 0.0, 0.0, None, None]
    eng[0] += n
    eng[1] = _seq(eng[1], c.acc)
    eng[2] = _seq(eng[2], c.drafts)
    if eng[3] is None:
        eng[3] = float(c.t_end[0])
    eng[4] = float(c.t_end[-1])
    figures.extend(acc._mal, c.mal)
    acc.zero_running += c.zero_running
    acc.step_withheld += c.withheld
    if c.coverage is not None:
        has = ~np.isnan(c.coverage)
        acc.partial_coverage += int(np.count_nonzero(c.coverage[has] < FULL_COVERAGE))
        acc._cov_drafts = _seq(acc._cov_drafts, c.drafts[has])
        acc._cov_steps = _seq(acc._cov_steps, c.drafts[has] / c.coverage[has])
    busy = ~c.idle
    acc.idle += int(n - np.count_nonzero(busy))
    rate, running = c.rate[busy], c.running[busy]
    figures.extend(acc._dec, rate)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_req = np.where(~np.isnan(running) & (running != 0), rate / running, np.nan)
    figures.extend(acc._dec_req, per_req)
    figures.extend(acc._step, c.step[busy])
    figures.extend(acc._drafts_rate, c.drafts_rate[busy])
    figures.extend(acc._run, running)
    acc._bins.add_many(c.t_start, c.t_end, c.engine_id, c.rate, c.acc, c.drafts, c.step,
                       c.running, c.flags)


def _gaps(acc: LogAccumulator, key: tuple[Any, ...], c: WindowColumns) -> None:
    """LogAccumulator._gap for each window: an idle gap before a window that ends more than
    IDLE_GAP_FACTOR durations after the window before and starts IDLE_GAP_MIN_S after it."""
    prev0 = acc._last_end.get(key)
    acc._last_end[key] = float(c.t_end[-1])
    prev = np.concatenate(([np.nan if prev0 is None else prev0], c.t_end[:-1]))
    with np.errstate(invalid="ignore"):
        d = c.t_end - c.t_start
        hit = ~np.isnan(prev) & (d > 0) & (c.t_end - prev > IDLE_GAP_FACTOR * d) \
            & (c.t_start - prev >= IDLE_GAP_MIN_S)
    idx = np.flatnonzero(hit)
    if not idx.size:
        return
    starts, ends = prev[idx].tolist(), c.t_start[idx].tolist()
    gaps = [IdleGap(c.engine_id, s, e) for s, e in zip(starts, ends, strict=True)]
    acc.gap_count += len(gaps)
    acc.gap_total_s = _seq(acc.gap_total_s, np.array([g.seconds for g in gaps]))
    acc._gaps.extend(gaps)
    if len(acc._gaps) > 4 * MAX_GAPS_KEPT:  # the same 20 as add's pruning: a stable sort
        acc._gaps = sorted(acc._gaps, key=lambda g: -g.seconds)[:MAX_GAPS_KEPT]
