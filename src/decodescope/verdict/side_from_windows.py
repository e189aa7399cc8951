"""A side from engine windows (a log range or a Prometheus range): the steady windows, made
into units of adjacent windows (blocks sized by their lag-1 correlation), with what the log
said of speculative decoding.

Pure: from `EngineWindow`s.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from decodescope.analysis.decompose import pool
from decodescope.records.window import EngineWindow
from decodescope.verdict import thresholds as th
from decodescope.verdict.side import Side, Unit

# -- from engine windows -----------------------------------------------------------------------
# Log windows are not trials. Two corrections make them units a Welch interval can use
# (docs/methodology.md, "Log windows as units"):
# 1. Partial windows are trimmed: a window in which a request started or ended, or the running
#    count changed, holds less than a full window of decode and reads low (a true −25 % step
#    rate read −32 % with them in). A window is steady when the window before it (same engine)
#    ends where it starts, was busy too, and printed the same running count.
# 2. Adjacent windows are not independent (one request spans many windows: MAL and step rate
#    drift together), so units are blocks of b adjacent steady windows with
#    b = (1 + ρ) / (1 − ρ) from the lag-1 autocorrelation ρ (the variance inflation of an AR(1)
#    series), within each block rates are ratios of sums (tokens / request-seconds).
ADJACENT_TOLERANCE_S = 2.0  # stamps have 1 s resolution; two of them


MIN_WINDOWS_FOR_RHO = 8  # fewer steady windows: ρ is not estimated (blocks of 1, noted)


MAX_RHO = 0.8  # blocks of at most 9 windows


MIN_BLOCKS = 3  # never fewer blocks than this when there are windows for them


SHORT_STRETCH_WINDOWS = 3  # busy stretches shorter than this (median): windows hold idle time


@dataclass(frozen=True)
class LogSpec:
    """What the log says about speculative decoding on a side."""

    method: str | None  # "off" | launch-config method ("ngram", "mtp", ...) | None: unknown
    k: int | None
    coverage: float | None  # drafted steps / steps where known (1.0: every step drafts)
    every_step_drafts: bool | None  # True: MTP / EAGLE-like; False: n-gram-like; None: unknown

    def describe(self) -> str:
        if self.method == "off":
            return "speculative decoding off (no speculative line in the log): MAL 1 by definition"
        what = self.method or ("drafts every step" if self.every_step_drafts else
                               "not every step drafts" if self.every_step_drafts is False
                               else "method not logged")
        k = f", k={self.k}" if self.k else ""
        cov = (f", {self.coverage:.0%} of steps drafted"
               if self.coverage is not None and self.coverage < 0.97 else "")
        return f"{what}{k}{cov}"


MODEL_FREE_METHODS = ("ngram", "suffix", "ngram-simple", "ngram-map-k", "ngram-mod",
                      "ngram-cache", "ngram-map-k4v", "prompt_lookup")


def log_spec(windows: Sequence[EngineWindow], logged: dict[str, Any] | None = None) -> LogSpec:
    """Speculative method, k and draft coverage of a log side (see steps.py for coverage)."""
    from decodescope.telemetry.logs.steps import FULL_COVERAGE, step_info

    logged = logged or {}
    spec_seen = any(w.drafts or w.mal is not None or w.accepted_tokens for w in windows)
    off_flags = bool(windows) and all("spec_off" in w.flags for w in windows)
    if (not spec_seen and logged.get("off")) or off_flags:
        return LogSpec("off", None, 0.0, None)
    ks = [int(w.printed["spec_k"]) for w in windows if w.printed.get("spec_k")]
    if not ks:  # windows built elsewhere: every draft of k tokens → draft tokens / drafts = k
        ratios = {w.draft_tokens / w.drafts for w in windows if w.drafts and w.draft_tokens}
        if len(ratios) == 1 and float(next(iter(ratios))).is_integer():
            ks = [int(next(iter(ratios)))]
    k = max(set(ks), key=ks.count) if ks else (logged.get("k") or None)
    drafts = steps = 0.0
    for w in windows:
        info = step_info(w)
        if w.drafts and info.coverage:
            drafts += w.drafts
            steps += w.drafts / info.coverage
    coverage = drafts / steps if steps else None
    method = logged.get("method")
    if method:
        every: bool | None = str(method).lower() not in MODEL_FREE_METHODS
    elif coverage is not None:
        every = coverage >= FULL_COVERAGE
    else:
        every = None
    return LogSpec(str(method).lower() if method else None, int(k) if k else None, coverage, every)


def active(w: EngineWindow) -> bool:
    """A window with decode activity: tokens generated, a request running, counts trusted."""
    if "reset" in w.flags or "idle" in w.flags or "may_include_idle" in w.flags:
        return False
    if w.running is not None and w.running < 1:
        return False
    gen = w.generation_tokens
    if gen is not None:
        return gen >= th.MIN_WINDOW_GENERATION_TOKENS
    rate = w.decode_rate
    return rate is not None and rate > 0


def steady(windows: Sequence[EngineWindow],
           before: Sequence[EngineWindow] | None = None) -> list[bool]:
    """Per window: active, and not partial (see the comment above). Windows without clock
    time (llama.cpp requests: each is a whole request) are steady when active. `before`: the
    windows just before the selected range (context for the first ones, not judged); None:
    no context known, so the first window of each engine is not judged (kept when active)."""
    out = []
    last: dict[tuple[Any, ...], EngineWindow] = {}
    for w in before or ():
        last[(w.printed.get("pid"), w.engine_id)] = w
    for w in windows:
        key = (w.printed.get("pid"), w.engine_id)
        prev = last.get(key)
        last[key] = w
        if not active(w):
            out.append(False)
            continue
        if w.t_start_s is None or w.t_end_s is None or (prev is None and before is None):
            out.append(True)
            continue
        ok = (prev is not None and prev.t_end_s is not None and active(prev)
              and abs(w.t_start_s - prev.t_end_s) <= ADJACENT_TOLERANCE_S
              and (prev.running is None or w.running is None or prev.running == w.running))
        out.append(ok)
    return out


@dataclass(frozen=True)
class _Win:
    t0: float | None
    t1: float | None
    weight: float  # request-seconds (duration × running), 1 when unknown
    decode: float | None  # tok/s per running request
    step: float | None
    mal: float | None
    mal_weight: float
    running: float | None
    contiguous: bool  # follows the previous unit's window directly (same stretch)


def _lag1(xs: list[float | None], links: list[bool]) -> float | None:
    """Lag-1 autocorrelation of log values over adjacent pairs (links[i]: i follows i − 1)."""
    vals = [math.log(x) for x in xs if x is not None and x > 0]
    if len(vals) < MIN_WINDOWS_FOR_RHO:
        return None
    m = statistics.fmean(vals)
    den = sum((v - m) ** 2 for v in vals)
    if den <= 0:
        return 0.0
    num = 0.0
    pairs = 0
    for i in range(1, len(xs)):
        a, b = xs[i - 1], xs[i]
        if links[i] and a is not None and b is not None and a > 0 and b > 0:
            num += (math.log(a) - m) * (math.log(b) - m)
            pairs += 1
    if pairs < MIN_WINDOWS_FOR_RHO - 1:
        return None
    rho = num / den * len(vals) / pairs  # normalise to the pairs actually linked
    # White noise gives |ρ| up to ~1.96/√n by chance: only a significant ρ counts.
    return rho if rho > 1.96 / math.sqrt(pairs) else 0.0


def block_size(wins: Sequence[_Win]) -> tuple[int, float | None]:
    """(b, ρ): windows per block from the largest lag-1 autocorrelation of the unit metrics."""
    links = [w.contiguous for w in wins]
    rhos = [r for r in (_lag1([w.decode for w in wins], links), _lag1([w.step for w in wins], links),
                        _lag1([w.mal for w in wins], links)) if r is not None]
    if not rhos:
        return 1, None
    rho = min(max(max(rhos), 0.0), MAX_RHO)
    b = math.ceil((1.0 + rho) / (1.0 - rho) - 1e-9)
    b = max(1, min(b, len(wins) // MIN_BLOCKS))
    return b, max(rhos)


def _blocks(wins: Sequence[_Win], b: int) -> list[list[_Win]]:
    if b <= 1:
        return [[w] for w in wins]
    out = [list(wins[i:i + b]) for i in range(0, len(wins), b)]
    if len(out) > 1 and len(out[-1]) * 2 < b:  # a short tail joins the block before it
        out[-2].extend(out.pop())
    return out


def _wmean(pairs: Sequence[tuple[float | None, float]]) -> float | None:
    num = den = 0.0
    for v, wt in pairs:
        if v is not None:
            num += v * wt
            den += wt
    return num / den if den > 0 else None


def _unit(ws: Sequence[_Win], label: str) -> Unit:
    dec = _wmean([(w.decode, w.weight) for w in ws])
    step = _wmean([(w.step, w.weight) for w in ws])
    mal = _wmean([(w.mal, w.mal_weight) for w in ws])
    runs = [w.running for w in ws if w.running is not None]
    tps = dec / step if (dec is not None and step) else None
    return Unit(label, engine_decode_rate=dec, mal=mal, tokens_per_step=tps, step_rate=step,
                running=statistics.fmean(runs) if runs else None)


def _normalise(w: EngineWindow, spec: LogSpec) -> EngineWindow:
    """vLLM prints no SpecDecoding line for an interval without drafts: with speculative
    decoding on, such a stats window had 0 drafts (one token per step)."""
    if (spec.method != "off" and w.engine.endswith("vllm") and w.drafts is None
            and w.accepted_tokens is None and w.mal is None and w.generation_tokens is not None
            and "spec_line_only" not in w.flags):
        return replace(w, drafts=0, accepted_tokens=0, flags=(*w.flags, "no_spec_line"))
    return w


def side_from_windows(name: str, windows: Sequence[EngineWindow], *, source: str | None = None,
                      engine: str | None = None, logged_spec: dict[str, Any] | None = None,
                      trim: bool = True, block: int | None = None,
                      before: Sequence[EngineWindow] | None = None) -> Side:
    """A log side: one unit per block of adjacent steady engine windows (see above).

    logged_spec: what the whole log said about speculative decoding (LogSummary.spec);
    trim=False keeps partial windows; block fixes the block size (None: from ρ); before: the
    windows just before the range (they tell whether the first window is partial; None: not
    known, the first window is kept; [] : nothing before it, the first window is partial)."""
    from decodescope.telemetry.logs.steps import step_info

    spec = log_spec(windows, logged_spec)
    ws = [_normalise(w, spec) for w in windows]
    ctx = None if before is None else [_normalise(w, spec) for w in before]
    keep = steady(ws, ctx) if trim else [active(w) for w in ws]
    act = [w for w in ws if active(w)]
    used = [w for w, k in zip(ws, keep, strict=True) if k]
    wins: list[_Win] = []
    prev_end: dict[tuple[Any, ...], float | None] = {}
    last_key: tuple[Any, ...] | None = None
    for w in used:
        key = (w.printed.get("pid"), w.engine_id)
        d = w.duration_s
        weight = d * (w.running or 1.0) if d else 1.0
        info = step_info(w, every_step_drafts=spec.every_step_drafts)
        if spec.method == "off":
            dec = w.decode_rate_per_request if w.running else w.decode_rate
            mal: float | None = 1.0
            step = dec
            mal_w = weight
        else:
            dec = w.decode_rate_per_request if w.running else w.decode_rate
            mal, step = w.mal, info.rate
            mal_w = float(w.drafts) if w.drafts else weight
        pe = prev_end.get(key)
        contiguous = (last_key == key and pe is not None and w.t_start_s is not None
                      and abs(w.t_start_s - pe) <= ADJACENT_TOLERANCE_S)
        prev_end[key], last_key = w.t_end_s, key
        wins.append(_Win(w.t_start_s, w.t_end_s, weight, dec, step, mal, mal_w, w.running,
                         contiguous))
    rho: float | None = None
    if block is None:
        b, rho = block_size(wins)
    else:
        b = max(1, block)
    units = tuple(
        _unit(grp, _block_label(grp, i))
        for i, grp in enumerate(_blocks(wins, b)))
    durs = [d for w in used if (d := w.duration_s) is not None]
    starts = [w.t_start_s for w in act if w.t_start_s is not None]
    ends = [w.t_end_s for w in act if w.t_end_s is not None]
    notes = []
    skipped = len(ws) - len(act)
    if skipped:
        notes.append(f"{skipped} idle or reset window(s) skipped")
    trimmed = len(act) - len(used)
    if trimmed:
        notes.append(f"{trimmed} partial window(s) trimmed: a request started or ended inside, "
                     "or the running count changed (they read low)")
    if b > 1:
        notes.append(f"units are blocks of {b} adjacent windows: adjacent windows are not "
                     f"independent (lag-1 autocorrelation {rho:.2f})" if rho is not None else
                     f"units are blocks of {b} adjacent windows")
    elif rho is None and block is None and len(wins) >= MIN_BLOCKS:
        notes.append(f"only {len(wins)} steady windows: their dependence is not estimated; "
                     "the interval treats them as independent")
    stretches = _stretches(ws)
    if stretches and statistics.median(stretches) < SHORT_STRETCH_WINDOWS:
        notes.append(f"busy stretches are short (median {statistics.median(stretches):g} "
                     "windows): requests shorter than the log interval put idle time inside "
                     "the windows, so their rates read low and partial windows cannot all be "
                     "found; probe instead (decodescope probe) for per-request rates")
    if spec.method == "off":
        notes.append("speculative decoding off on this side (no speculative line in the log): "
                     "MAL 1 by definition, one token per step")
    elif spec.every_step_drafts is False:
        cov = f"{spec.coverage:.0%}" if spec.coverage is not None else "unknown"
        notes.append(f"{spec.method or 'n-gram-like'} drafting drafts only where it finds a "
                     f"match ({cov} of steps drafted here): steps = generated − accepted, "
                     "estimated from the printed throughput")
    withheld = sum(1 for w in used if step_info(w).withheld)
    if withheld:
        notes.append(f"step rate withheld for {withheld} window(s): generated − accepted below "
                     "the drafts")
    eng = engine or next((w.engine for w in act), None)
    window_s = statistics.median(durs) if durs else None
    src = source or f"engine log {name}"
    if eng and eng.startswith("sim"):
        src += " [SIMULATED]"
    return Side(
        name=name, kind="log", unit_name="window" if b == 1 else "window block", units=units,
        source=src, engine=eng, simulated=bool(eng and eng.startswith("sim")),
        t_start_s=min(starts) if starts else None, t_end_s=max(ends) if ends else None,
        window_s=window_s, pooled=pool(used) if used else None, notes=tuple(notes),
        spec_method=spec.method, spec_k=spec.k, draft_coverage=spec.coverage,
        every_step_drafts=spec.every_step_drafts, block_windows=b,
        windows_trimmed=trimmed,
    )


def _stretches(ws: Sequence[EngineWindow]) -> list[int]:
    """Lengths (in windows) of the runs of adjacent busy windows, per engine."""
    out: list[int] = []
    cur: dict[tuple[Any, ...], tuple[int, float | None]] = {}
    for w in ws:
        if w.t_end_s is None:
            continue
        key = (w.printed.get("pid"), w.engine_id)
        n, end = cur.get(key, (0, None))
        if not active(w):
            if n:
                out.append(n)
            cur[key] = (0, w.t_end_s)
            continue
        joined = end is not None and w.t_start_s is not None \
            and abs(w.t_start_s - end) <= ADJACENT_TOLERANCE_S
        if n and not joined:
            out.append(n)
            n = 0
        cur[key] = (n + 1, w.t_end_s)
    out.extend(n for n, _ in cur.values() if n)
    return out


def _block_label(grp: Sequence[_Win], i: int) -> str:
    a = _clock(grp[0].t0)
    if len(grp) == 1:
        return a or f"window {i + 1}"
    b = _clock(grp[-1].t1)
    return f"{a}–{b} ({len(grp)} windows)" if a and b else f"block {i + 1} ({len(grp)} windows)"


def _clock(t: float | None) -> str | None:
    return datetime.fromtimestamp(t).strftime("%m-%d %H:%M:%S") if t is not None else None
