"""History: when did the decode rate change, and what changed with it.

A history is a series of points in time order — stored runs of one caliber on one endpoint or
label, or engine windows — each with its decode rate and, where the engine gave them, its step
rate and tokens per step (or MAL). `detect` finds the change points and attributes each one:

1. **Spikes** (`find_spikes`): a run whose log decode rate lies more than SPIKE_Z robust sds
   from the median of the MIN_SEGMENT runs before it *and* from that of the MIN_SEGMENT runs
   after it is an outlier: reported, never a change point, and left out of detection (a step
   change differs from one side only).
2. **Candidates**: a maintained change-point library (`ruptures`, kernel change-point
   detection with a linear kernel — penalised least squares solved by PELT in C; the choice is
   measured in bench/bench_history.py, docs/methodology.md §10) over the log decode rate, and
   over the log tokens-per-step series when it exists (a content change moves it with little
   noise); plus every place where the stack fingerprint changes (a restart under another
   launch, engine version, host: known in advance, so tested at a laxer level).
3. **Confirmation** (`_confirm`): each candidate is a two-sample test of the log run means of
   its two neighbouring segments, with each segment's learned between-run spread — or the
   prior PRIOR_RUN_SD when a segment has fewer than MIN_SPREAD_RUNS runs, as every verdict
   does (verdict/run_spread.py) — a Welch t interval, and the minimum effect MIN_EFFECT.
   A segment needs MIN_SEGMENT runs on its own side of the midpoint between the two levels
   (`_segments_hold`: a level never rests on one or two runs). The weakest failing candidate is dropped and the rest
   retested until every one stands.
4. **Attribution** (`_attribute`): the levels before/after with their intervals, the component
   that carries the change (verdict.rate_change.carrier over step rate and tokens per step),
   the fingerprint diff across it (fingerprint.diff), and a word: a change the control series
   shows within CONTROL_TOLERANCE runs is ENVIRONMENT; else a stack change across it makes it
   a REGRESSION / IMPROVEMENT of the stack; else tokens per step (MAL) carrying it is a
   CONTENT_SHIFT (content or caliber); else SHIFT (the rate moved, the fingerprint saw no
   change, and no control tells environment from endpoint).

Pure: no store, no network. `points_from_runs` turns stored runs into points.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from decodescope.records.stored_run import StoredRun
from decodescope.verdict import run_spread as rs
from decodescope.verdict import thresholds as th
from decodescope.verdict.rate_change import carrier
from decodescope.verdict.server_state import ServerState, states_for_runs
from decodescope.verdict.stack import stack_key, usable
from decodescope.verdict.stats import Change, t_cdf, t_quantile

# -- rules (docs/methodology.md §10) ------------------------------------------------------------
# A change needs this many runs on each side: two runs agreeing by chance are not a level.
MIN_SEGMENT = 3
# A run this many robust sds away from the runs on both sides of it is a spike, not a level.
# 4: under normal noise 6 in 100,000 runs would be flagged by chance per side; both sides ⇒ less.
SPIKE_Z = 4.0
# Significance of a candidate found by scanning the data (many implicit looks): 0.001, Otava's
# default; of a candidate at a stack change (one look, decided before seeing the rates): the
# verdicts' own level, 1 − CONFIDENCE — the question triage answers for the runs before and
# after a restart.
SCAN_ALPHA = 0.001
STACK_ALPHA = 1.0 - th.CONFIDENCE
# The library's penalty per change point, in units of the noise variance × ln(n): a loose
# first pass (BIC is 2); confirmation decides.
PENALTY_FACTOR = 3.0
# A scanned candidate this close to a stack change (or to a change of tokens per step, which
# is far less noisy than the rate) is that change: the restart is the known place. A control's
# change this close (in the target's runs, converted to time) is the same event.
SNAP_RUNS = 5
CONTROL_TOLERANCE = 5
# Fleet: when at least this share of at least FLEET_MIN series change together, and no control
# is given, the common cause is likely the probing side.
FLEET_SHARE = 0.5
FLEET_MIN = 4

Word = Literal["REGRESSION", "IMPROVEMENT", "CONTENT_SHIFT", "ENVIRONMENT", "SHIFT"]
Method = Literal["kernel", "pelt", "binseg", "otava"]
DEFAULT_METHOD: Method = "kernel"


@dataclass(frozen=True)
class Point:
    """One unit of a history: a stored run (or an engine window)."""

    key: str  # "run 42", or a window's time
    t: float  # epoch seconds
    decode: float  # the run's decode rate (geometric mean of its trials), tok/s
    step_rate: float | None = None  # steps/s (geometric mean)
    tokens_per_step: float | None = None  # or MAL, when tokens per step is not known
    acceptance_metric: str = "tokens per step"
    within_var: float = 0.0  # variance of the run's mean log decode rate from its trials
    stack: tuple[str, ...] | None = None  # verdict.run_spread.stack_key
    fingerprint: dict[str, Any] | None = None
    restart: bool = False  # the engine restarted just before it (a counter reset, Prometheus)
    # The state of the run's server (verdict.server_state): fresh, inside a warm-up; None when
    # unknown (an engine window, a run whose fingerprint has no process start).
    server: ServerState | None = None


@dataclass(frozen=True)
class Level:
    """A stretch without a change: its level, interval and learned spread."""

    first: int  # index of its first and last point (inclusive)
    last: int
    runs: int
    decode: float  # geometric mean of the runs' decode rates
    lo: float
    hi: float
    spread: rs.RunSpread

    def to_dict(self) -> dict[str, Any]:
        return {"first": self.first, "last": self.last, "runs": self.runs,
                "decode": self.decode, "ci": [self.lo, self.hi],
                "spread": self.spread.to_dict()}


def server_record(s: ServerState | None) -> dict[str, Any]:
    """A point's server state as a record (JSON): fresh / in_warmup / warming are None when
    unknown, never False; `left_out`: inside a warm-up with an end, out of the levels."""
    if s is None:
        return {"known": False, "since_start_s": None, "fresh": None, "in_warmup": None,
                "warming": None, "position": None, "of_runs": None, "left_out": False,
                "mark": server_mark(None), "text": "unknown (no server process start)"}
    return {"known": s.since_start_s is not None, "since_start_s": s.since_start_s,
            "fresh": s.fresh_known, "in_warmup": s.in_warmup_known, "warming": s.warming_known,
            "position": s.position, "of_runs": s.of_runs or None, "left_out": s.left_out,
            "mark": server_mark(s), "text": s.text().split(": ", 1)[-1]}


def server_mark(s: ServerState | None) -> str:
    """The short marker every output shows for a point: "fresh" (a fresh-server run), "server
    warm-up" (inside one), "fresh, server warm-up",
    "" (warm, known), "?" (unknown)."""
    if s is None or s.warming_known is None:
        return "?"
    return ", ".join(w for w, on in (("fresh", s.fresh), ("server warm-up", s.in_warmup)) if on)


def span(keys: Sequence[str]) -> str:
    """"run 11", "runs 11, 12", "runs 11–14"; other keys: "A … B"."""
    if len(keys) == 1:
        return keys[0]
    if all(k.startswith("run ") for k in keys):
        nums = [k[4:] for k in keys]
        return "runs " + (", ".join(nums) if len(nums) == 2 else f"{nums[0]}–{nums[-1]}")
    return f"{keys[0]} … {keys[-1]}"


def _utc(t: float) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


@dataclass(frozen=True)
class RestartState:
    """Runs on a warming server at a change point: after it (a restart) or just before it."""

    left_out: tuple[str, ...]  # runs inside a warm-up with an end, out of the level after it
    fresh_after: tuple[str, ...]  # warming runs counted in the level after it
    before: tuple[str, ...]  # warming runs that end the stretch before it
    measured_from: str | None  # the first run of the level after it (when runs were left out)
    server_start: float | None  # the process start of the first warming run after it
    first_since_s: float | None  # that run's seconds after it

    def text(self) -> str:
        parts = []
        after = self.left_out or self.fresh_after
        start = (f"fresh: its server started {_utc(self.server_start)}, {after[0]} "
                 f"{_dur(self.first_since_s or 0.0)} after" if after and
                 self.server_start is not None else "its server's start unknown")
        if self.left_out:
            parts.append(f"{span(self.left_out)} after it ran on a server warming up ({start}; "
                         "inside the server warm-up its stored runs show): left out, the "
                         f"level after it is measured from {self.measured_from} on")
        if self.fresh_after:
            who = (f"{span(self.fresh_after)} still ran on a fresh server" if self.left_out else
                   f"{span(self.fresh_after)} after it ran on a server warming up ({start})")
            parts.append(f"{who}: counted in the level after it (no server warm-up with an end "
                         "in its stored runs)")
        if self.before:
            parts.append(f"{span(self.before)} before it ran on a server warming up: this change "
                         "may be the end of a server warm-up (the server's state), not the stack's")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"warm_up_left_out": list(self.left_out), "fresh_after": list(self.fresh_after),
                "warming_before": list(self.before), "measured_from": self.measured_from,
                "server_start": self.server_start, "text": self.text()}


def _dur(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min"


@dataclass(frozen=True)
class ChangePoint:
    index: int  # first point after it (of the new level, or of a server warm-up left out)
    before: str  # key of the last point before it and the first after
    after: str
    t: float
    decode: Change
    step_rate: Change | None
    tokens_per_step: Change | None
    carried_by: str | None
    fingerprint_changes: list[dict[str, Any]]  # evidence rows with status "changed"
    stack_changed: bool | None  # None: a side's fingerprint is missing
    control: str | None  # the control's change it matches, in words
    word: Word
    origin: str  # "scan" | "stack change" | "restart" | "tokens per step"
    # The stored runs whose fingerprints were diffed, when they are not the points themselves
    # (a Prometheus history with `--fingerprints`).
    fingerprints_from: tuple[str, str] | None = None
    server: RestartState | None = None  # runs on a warming server around it (none: None)

    @property
    def label(self) -> str:
        if self.word == "SHIFT" and self.origin == "restart":
            return "SHIFT at an engine restart (what it restarted with is unseen)"
        return {"REGRESSION": "REGRESSION of the stack", "IMPROVEMENT": "IMPROVEMENT of the stack",
                "CONTENT_SHIFT": "content or caliber shift", "ENVIRONMENT": "ENVIRONMENT",
                "SHIFT": "SHIFT (no stack change seen, no control)"}[self.word]

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "between": [self.before, self.after], "t": self.t,
                "word": self.word, "label": self.label, "origin": self.origin,
                "decode": self.decode.to_dict(),
                "step_rate": self.step_rate.to_dict() if self.step_rate else None,
                "tokens_per_step": (self.tokens_per_step.to_dict()
                                    if self.tokens_per_step else None),
                "carried_by": self.carried_by, "stack_changed": self.stack_changed,
                "fingerprint_changes": self.fingerprint_changes, "control": self.control,
                "fingerprints_from": list(self.fingerprints_from) if self.fingerprints_from
                else None,
                "server_state": self.server.to_dict() if self.server else None}


@dataclass(frozen=True)
class History:
    points: list[Point]
    changes: list[ChangePoint]
    levels: list[Level]
    spikes: list[int]  # indices of outlying runs (never change points)
    method: str
    status: Literal["ok", "inconclusive"]
    why: str | None = None  # why inconclusive
    control: History | None = None
    notes: list[str] = field(default_factory=list)
    warm_up: list[int] = field(default_factory=list)  # indices of runs left out as warm-up

    @property
    def regression(self) -> bool:
        return any(c.word == "REGRESSION" for c in self.changes)

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "why": self.why, "method": self.method,
                "points": [{"key": p.key, "t": p.t, "decode": p.decode,
                            "step_rate": p.step_rate, "tokens_per_step": p.tokens_per_step,
                            "server_state": server_record(p.server)}
                           for p in self.points],
                "spikes": [self.points[i].key for i in self.spikes],
                "warm_up_left_out": [self.points[i].key for i in self.warm_up],
                "server_state": server_lines(self),
                "changes": [c.to_dict() for c in self.changes],
                "levels": [lv.to_dict() for lv in self.levels],
                "control": self.control.to_dict() if self.control else None,
                "notes": self.notes}


# -- spikes --------------------------------------------------------------------------------
def robust_scale(x: Sequence[float]) -> float:
    """The noise sd of a series with level shifts and outliers: MAD of first differences/√2."""
    if len(x) < 3:
        return th.PRIOR_RUN_SD
    d = [abs(b - a) for a, b in zip(x, x[1:], strict=False)]
    return max(1.4826 * statistics.median(d) / math.sqrt(2.0), 1e-6)


def find_spikes(x: Sequence[float], scale: float | None = None) -> list[int]:
    """Indices of single outlying runs: beyond SPIKE_Z·scale from the median of the
    MIN_SEGMENT points on each side, in the same direction on both."""
    s = robust_scale(x) if scale is None else scale
    out = []
    w = MIN_SEGMENT
    for i in range(len(x)):
        left, right = x[max(0, i - w):i], x[i + 1:i + 1 + w]
        if len(left) < 1 or len(right) < 1:
            continue
        dl, dr = x[i] - statistics.median(left), x[i] - statistics.median(right)
        if abs(dl) > SPIKE_Z * s and abs(dr) > SPIKE_Z * s and dl * dr > 0:
            out.append(i)
    return out


# -- candidates from the library -----------------------------------------------------------
def candidates(x: Sequence[float], scale: float, method: Method = DEFAULT_METHOD) -> list[int]:
    """Change-point candidates (index of the first point of each new segment)."""
    n = len(x)
    if n < 2 * MIN_SEGMENT:
        return []
    if method == "otava":
        from otava.analysis import compute_change_points  # measured in bench only

        cps, _ = compute_change_points([float(v) for v in x], window_len=50, max_pvalue=0.001)
        return sorted({int(c.index) for c in cps})
    import numpy as np
    import ruptures as rpt

    sig = np.asarray(x, dtype=float).reshape(-1, 1)
    pen = PENALTY_FACTOR * scale * scale * math.log(n)
    algo: Any
    if method == "kernel":
        algo = rpt.KernelCPD(kernel="linear", min_size=MIN_SEGMENT).fit(sig)
    elif method == "pelt":
        algo = rpt.Pelt(model="l2", min_size=MIN_SEGMENT, jump=1).fit(sig)
    else:
        algo = rpt.Binseg(model="l2", min_size=MIN_SEGMENT, jump=1).fit(sig)
    return [int(b) for b in algo.predict(pen=pen) if 0 < b < n]


# -- segment statistics --------------------------------------------------------------------
def _spread(logs: Sequence[float], within: Sequence[float]) -> tuple[float, float | None, rs.RunSpread]:
    """(sd of a run mean, its df or None for the prior, the learned RunSpread to report)."""
    k = len(logs)
    if k < th.MIN_SPREAD_RUNS:
        p = rs.prior(k, why=f"{k} run{'s' if k != 1 else ''} in this stretch, "
                            f"{th.MIN_SPREAD_RUNS} needed to learn its spread")
        return th.PRIOR_RUN_SD, None, p
    m = math.fsum(logs) / k
    s2 = math.fsum((v - m) ** 2 for v in logs) / (k - 1)  # statistics.variance, in floats
    w = statistics.fmean(within) if within else 0.0
    from scipy.stats import chi2

    df = k - 1
    a = 1.0 - th.CONFIDENCE
    lo2 = df * s2 / float(chi2.ppf(1.0 - a / 2.0, df))
    hi2 = df * s2 / float(chi2.ppf(a / 2.0, df))
    learned = rs.RunSpread(sd=math.sqrt(max(0.0, s2 - w)), source="learned", runs=k,
                           df=float(df), lo=math.sqrt(max(0.0, lo2 - w)),
                           hi=math.sqrt(max(0.0, hi2 - w)), metric="decode rate")
    return math.sqrt(s2), float(df), learned


def _welch(a: Sequence[float], b: Sequence[float], wa: Sequence[float] = (),
           wb: Sequence[float] = ()) -> tuple[float, float, float, float | None]:
    """(log difference b − a, its se, two-sided p, df) with each side's run-mean spread."""
    sa, dfa, _ = _spread(a, wa)
    sb, dfb, _ = _spread(b, wb)
    va, vb = sa * sa / len(a), sb * sb / len(b)
    diff = statistics.fmean(b) - statistics.fmean(a)
    se = math.sqrt(va + vb)
    den = ((va * va / dfa) if dfa else 0.0) + ((vb * vb / dfb) if dfb else 0.0)
    df = ((va + vb) ** 2 / den) if den > 0 else None
    z = abs(diff) / se if se > 0 else math.inf
    if df is None:
        p = 2.0 * (1.0 - statistics.NormalDist().cdf(z))
    else:
        p = 2.0 * (1.0 - t_cdf(z, df)) if math.isfinite(z) else 0.0
    return diff, se, p, df


def _change(metric: str, a: Sequence[float], b: Sequence[float], alpha: float,
            wa: Sequence[float] = (), wb: Sequence[float] = ()) -> Change:
    """Before vs after as a verdict Change (geometric means, a 95 % Welch interval on the run
    means with each stretch's spread); 'up'/'down' only at p < alpha and beyond MIN_EFFECT."""
    diff, se, p, df = _welch(a, b, wa, wb)
    q = (t_quantile(0.5 + th.CONFIDENCE / 2.0, df) if df is not None
         else statistics.NormalDist().inv_cdf(0.5 + th.CONFIDENCE / 2.0))
    rel = math.expm1(diff)
    lo, hi = math.expm1(diff - q * se), math.expm1(diff + q * se)
    if p >= alpha:
        status = "not_significant"
    elif abs(rel) < th.MIN_EFFECT:
        status = "below_min_effect"
    else:
        status = "up" if rel > 0 else "down"
    return Change(metric, len(a), len(b), math.exp(statistics.fmean(a)),
                  math.exp(statistics.fmean(b)), rel, lo, hi, df, th.CONFIDENCE,
                  th.MIN_EFFECT, status, None, None, p)  # type: ignore[arg-type]


def _level(x: Sequence[float], within: Sequence[float], first: int, last: int) -> Level:
    seg = x[first:last + 1]
    sd, df, spread = _spread(seg, within[first:last + 1])
    m = statistics.fmean(seg)
    q = (t_quantile(0.5 + th.CONFIDENCE / 2.0, df) if df is not None
         else statistics.NormalDist().inv_cdf(0.5 + th.CONFIDENCE / 2.0))
    h = q * sd / math.sqrt(len(seg))
    return Level(first, last, len(seg), math.exp(m), math.exp(m - h), math.exp(m + h), spread)


# -- confirmation ------------------------------------------------------------------------------
def _confirm(x: Sequence[float], within: Sequence[float], cands: dict[int, str]) -> dict[int, str]:
    """Keep the candidates (index → origin) whose segments differ beyond noise; drop the
    weakest failing one at a time and retest with the merged segments."""
    kept = dict(cands)
    n = len(x)
    while kept:
        cps = sorted(kept)
        bounds = [0, *cps, n]
        worst: tuple[float, int] | None = None
        for j, c in enumerate(cps):
            a0, b1 = bounds[j], bounds[j + 2]
            left, right = x[a0:c], x[c:b1]
            if not _segments_hold(left, right):
                score = math.inf  # fails whatever the test: dropped first
            else:
                alpha = STACK_ALPHA if kept[c] == "stack change" else SCAN_ALPHA
                ch = _change("decode rate", left, right, alpha, within[a0:c], within[c:b1])
                score = -1.0 if ch.changed else (ch.p_value or 1.0) / alpha
            if score >= 0 and (worst is None or score > worst[0]):
                worst = (score, c)
        if worst is None:
            break
        del kept[worst[1]]
    return kept


def _segments_hold(left: Sequence[float], right: Sequence[float]) -> bool:
    """Each side has MIN_SEGMENT runs on its own side of the midpoint between the two levels:
    a stretch of three whose low mean rests on two runs is not a level."""
    if len(left) < MIN_SEGMENT or len(right) < MIN_SEGMENT:
        return False
    ml, mr = statistics.fmean(left), statistics.fmean(right)
    mid, up = (ml + mr) / 2.0, mr > ml
    return (sum(1 for v in left if (v < mid) == up) >= MIN_SEGMENT
            and sum(1 for v in right if (v > mid) == up) >= MIN_SEGMENT)


def _merge(scan: list[int], stack: list[int], tps: list[int]) -> dict[int, str]:
    """Candidates with their origin; a scanned one within SNAP_RUNS of a stack change is it."""
    out: dict[int, str] = {c: "stack change" for c in stack}
    for origin, cs in (("tokens per step", tps), ("scan", scan)):
        for c in cs:
            near = [s for s in out if abs(s - c) <= SNAP_RUNS]
            if not near:
                out[c] = origin
    return out


# -- attribution -----------------------------------------------------------------------------
FingerprintDiff = Callable[[dict[str, Any], dict[str, Any]], list[dict[str, Any]]]


def fingerprint_changes(a: dict[str, Any] | None, b: dict[str, Any] | None) -> list[dict[str, Any]] | None:
    """The changed evidence rows between two stored fingerprints (None: a side has none)."""
    if not isinstance(a, dict) or not isinstance(b, dict):
        return None
    from decodescope.fingerprint.diff import diff_fingerprints
    from decodescope.fingerprint.stack import Fingerprint

    rows = diff_fingerprints(Fingerprint.from_dict(a), Fingerprint.from_dict(b))
    return [r.to_dict() for r in rows if r.status == "changed"
            and r.check != "did the server restart?"]


def _attribute(pts: Sequence[Point], x: Sequence[float], within: Sequence[float], c: int,
               a0: int, b1: int, origin: str, control: History | None) -> ChangePoint:
    alpha = STACK_ALPHA if origin == "stack change" else SCAN_ALPHA
    left, right = pts[a0:c], pts[c:b1]
    d = _change("decode rate", x[a0:c], x[c:b1], alpha, within[a0:c], within[c:b1])

    def comp(name: str, get: Callable[[Point], float | None]) -> Change | None:
        la = [math.log(v) for v in map(get, left) if v]
        lb = [math.log(v) for v in map(get, right) if v]
        if len(la) < MIN_SEGMENT or len(lb) < MIN_SEGMENT:
            return None
        return _change(name, la, lb, alpha)

    metric = next((p.acceptance_metric for p in pts if p.tokens_per_step), "tokens per step")
    s = comp("step rate", lambda p: p.step_rate)
    m = comp(metric, lambda p: p.tokens_per_step)
    parts = [(n, ch) for n, ch in ((metric, m), ("step rate", s)) if ch is not None]
    carried = carrier(d, parts)
    prev, cur = pts[c - 1], pts[c]
    if prev.stack is None or cur.stack is None:
        stack_changed: bool | None = None
    else:
        stack_changed = prev.stack != cur.stack
    rows = fingerprint_changes(prev.fingerprint, cur.fingerprint) or []
    if stack_changed is None and rows:
        stack_changed = True
    ctl = None
    restarted = any(p.restart for p in pts[max(0, c - SNAP_RUNS):c + 1])
    if control is not None:
        for cc in control.changes:
            near = (abs(cc.t - cur.t) <= _time_tolerance(pts, c) if control.points
                    and cc.t and cur.t else False)
            same_dir = (cc.decode.rel or 0.0) * (d.rel or 0.0) > 0
            if near and same_dir:
                ctl = (f"the control moved {cc.decode.describe()} between "
                       f"{cc.before} and {cc.after}")
                break
    word = _word(ctl, stack_changed, restarted, carried, d.rel)
    if restarted and origin == "stack change" and stack_changed is None:
        origin = "restart"
    return ChangePoint(c, prev.key, cur.key, cur.t, d, s, m, carried, rows, stack_changed, ctl,
                       word, origin)


def _word(control: str | None, stack_changed: bool | None, restarted: bool,
          carried: str | None, rel: float | None) -> Word:
    if control is not None:
        return "ENVIRONMENT"
    if stack_changed:
        return "REGRESSION" if (rel or 0.0) < 0 else "IMPROVEMENT"
    if stack_changed is None and restarted:
        # The engine restarted here, but what it restarted with is unseen (Prometheus): a
        # launch change is likely, not known; the carrier still says which factor moved.
        return "SHIFT"
    if carried is not None and carried != "step rate":
        return "CONTENT_SHIFT"
    return "SHIFT"


def with_fingerprints(h: History, runs: Sequence[StoredRun]) -> History:
    """A history whose points carry no stack (Prometheus windows), its changes diffed with the
    fingerprints of stored runs of the same endpoint: the newest run before the change's last
    unchanged point and the oldest run from its first changed point on. A change with both
    runs gets its stack verdict (REGRESSION / IMPROVEMENT when the stack changed)."""
    from dataclasses import replace

    fps = sorted((r for r in runs if isinstance(r.fingerprint, dict)),
                 key=lambda r: (r.created_at, r.id))
    out = []
    for c in h.changes:
        if c.stack_changed is not None or c.index < 1:
            out.append(c)
            continue
        t_prev = h.points[c.index - 1].t
        before = [r for r in fps if r.created_at <= t_prev]
        after = [r for r in fps if r.created_at >= c.t]
        if not before or not after:
            out.append(c)
            continue
        a, b = before[-1], after[0]
        ka, kb = stack_key(a.fingerprint), stack_key(b.fingerprint)
        rows = fingerprint_changes(a.fingerprint, b.fingerprint) or []
        changed = (ka != kb) if (ka is not None and kb is not None) else (True if rows else None)
        word = _word(c.control, changed, c.origin == "restart", c.carried_by, c.decode.rel)
        out.append(replace(c, fingerprint_changes=rows, stack_changed=changed, word=word,
                           fingerprints_from=(f"run {a.id}", f"run {b.id}")))
    return replace(h, changes=out)


def _time_tolerance(pts: Sequence[Point], c: int) -> float:
    """CONTROL_TOLERANCE runs of the target, in seconds (its median spacing around c)."""
    lo, hi = max(1, c - 5), min(len(pts), c + 6)
    gaps = [pts[i].t - pts[i - 1].t for i in range(lo, hi)]
    return CONTROL_TOLERANCE * (statistics.median(gaps) if gaps else 0.0) + 1e-9


# -- the detector ----------------------------------------------------------------------------
def detect(points: Sequence[Point], *, control: Sequence[Point] | None = None,
           method: Method = DEFAULT_METHOD) -> History:
    """The change points of a history (time order), each attributed; `control`: the reference
    series (the same detector runs on it first)."""
    ctl = detect(control, method=method) if control else None
    pts = list(points)
    if len(pts) < 2 * MIN_SEGMENT:
        return History(pts, [], [], [], method, "inconclusive",
                       why=f"{len(pts)} runs: a change needs {MIN_SEGMENT} runs on each side",
                       control=ctl)
    # Runs inside a server's warm-up that its stored runs show the end of: the server's state,
    # not the stack's — out of detection and the levels, as the learned spread leaves a trend
    # out (run_spread.without_trends); marked, never a spike or a change point.
    warm = [i for i, p in enumerate(pts) if p.server is not None and p.server.left_out]
    base = [i for i in range(len(pts)) if i not in set(warm)]
    x_base = [math.log(pts[i].decode) for i in base]
    spikes = [base[j] for j in find_spikes(x_base)]
    keep = [i for i in base if i not in set(spikes)]
    kp = [pts[i] for i in keep]
    x = [math.log(pts[i].decode) for i in keep]
    within = [p.within_var for p in kp]
    scale = robust_scale(x)
    scan = candidates(x, scale, method)
    stack = [i for i in range(1, len(kp)) if kp[i].restart or (
        kp[i].stack is not None and kp[i - 1].stack is not None and kp[i].stack != kp[i - 1].stack)]
    tps_cands: list[int] = []
    tl = [p.tokens_per_step for p in kp]
    if all(v for v in tl):
        lt = [math.log(v) for v in tl if v]
        tps_cands = candidates(lt, robust_scale(lt), method)
    kept = _confirm(x, within, _merge(scan, stack, tps_cands))
    if ctl is not None and ctl.changes:
        kept = _place_with_control(kp, x, kept, ctl)
    cps = sorted(kept)
    bounds = [0, *cps, len(kp)]
    changes = [_attribute(kp, x, within, c, bounds[j], bounds[j + 2], kept[c], ctl)
               for j, c in enumerate(cps)]
    # back to indices of the full series
    changes = [_reindex(ch, keep[ch.index]) for ch in changes]
    if any(p.server is not None for p in pts):
        changes = [_with_server(ch, pts, keep, warm, bounds) for ch in changes]
    levels = [_level(x, within, bounds[j], bounds[j + 1] - 1) for j in range(len(bounds) - 1)]
    levels = [Level(keep[lv.first], keep[lv.last], lv.runs, lv.decode, lv.lo, lv.hi, lv.spread)
              for lv in levels]
    notes = []
    if warm:
        notes.append(f"{len(warm)} run{'s' if len(warm) != 1 else ''} inside a server warm-up "
                     "left out of the levels (the server's state, not the stack's; never a "
                     "spike or a change point): " + span([pts[i].key for i in warm]))
    if spikes:
        def name(i: int) -> str:
            s_ = pts[i].server
            return pts[i].key + (" (fresh server, not a spike of the stack)"
                                 if s_ is not None and s_.warming else "")

        notes.append(f"{len(spikes)} single outlying run{'s' if len(spikes) != 1 else ''} "
                     "left out (never a change point): "
                     + ", ".join(name(i) for i in spikes[:10])
                     + (" …" if len(spikes) > 10 else ""))
    return History(pts, changes, levels, spikes, method, "ok", control=ctl, notes=notes,
                   warm_up=warm)


def _with_server(ch: ChangePoint, pts: Sequence[Point], keep: Sequence[int],
                 warm: Sequence[int], bounds: Sequence[int]) -> ChangePoint:
    """A change with the runs on a warming server around it: left out between it and the run
    before it, warming at the start of the stretch after it, warming at the end of the one
    before it (`bounds`: the stretches, in indices of the kept runs)."""
    from dataclasses import replace

    c = keep.index(ch.index)
    j = list(bounds).index(c)
    prev = keep[c - 1]
    left_out = [i for i in warm if prev < i < ch.index]

    def warming(i: int) -> bool:
        s_ = pts[i].server
        return s_ is not None and s_.warming

    # Warming runs starting the stretch after it, when it is a restart (another server, or
    # one whose start is unknown, ran the run before it).
    fresh_after: list[int] = []
    restart = left_out or _server_start(pts[prev]) != _server_start(pts[ch.index]) \
        or _server_start(pts[prev]) is None
    for k in range(c, bounds[j + 1] if restart else c):
        if not warming(keep[k]):
            break
        fresh_after.append(keep[k])
    # Warming runs ending the stretch before it, on the server that runs on after it (no
    # restart at the change): the change may be that server's warm-up ending.
    before: list[int] = []
    start_after = _server_start(pts[ch.index])
    for k in range(c - 1, bounds[j - 1] - 1, -1):
        if not warming(keep[k]) or start_after is None or \
                _server_start(pts[keep[k]]) != start_after:
            break
        before.insert(0, keep[k])
    if not (left_out or fresh_after or before):
        return ch
    after = left_out or fresh_after
    first = pts[after[0]].server if after else None
    since = first.since_start_s if first is not None else None
    rs_ = RestartState(
        tuple(pts[i].key for i in left_out), tuple(pts[i].key for i in fresh_after),
        tuple(pts[i].key for i in before), pts[ch.index].key if left_out else None,
        pts[after[0]].t - since if after and since is not None else None, since)
    if left_out:  # the change is at the restart: before its first run, measured after them
        first_run = pts[left_out[0]]
        return replace(ch, server=rs_, index=left_out[0], after=first_run.key, t=first_run.t)
    return replace(ch, server=rs_)


def _server_start(p: Point) -> tuple[Any, ...] | None:
    """The point's server process: its stack and start (to the second); None when unknown."""
    s_ = p.server
    if s_ is None or s_.since_start_s is None or p.stack is None:
        return None
    return (*p.stack, round(p.t - s_.since_start_s))


def server_lines(h: History) -> list[str]:
    """The server state of a history's points in words: each run on a fresh server or inside
    a warm-up (its marker, how long after its server's start, left out or not), each warm-up
    once, and how many points have no known server state."""
    out: list[str] = []
    trends: dict[str, str] = {}
    for p in h.points:
        s_ = p.server
        if s_ is None or not s_.warming:
            continue
        when = (f", {_dur(s_.since_start_s)} after its server's process start"
                if s_.since_start_s is not None else "")
        out.append(f"{p.key} [{server_mark(s_)}]{when}"
                   + ("; left out of the levels" if s_.left_out else "; counted in its level"))
        if s_.warmup is not None and s_.since_start_s is not None:
            trends.setdefault(_utc(p.t - s_.since_start_s), s_.warmup.text())
    out += [f"server started {k}: {v}" for k, v in trends.items()]
    unknown = [p for p in h.points if p.server is None or p.server.warming_known is None]
    if unknown and len(unknown) == len(h.points):
        why = ("engine windows carry no server process start" if all(
            p.key.startswith("window") for p in unknown) else
            "no process start in the runs' fingerprints (a remote server, --no-fingerprint)")
        out.append(f"unknown for every point: {why}")
    elif unknown:
        out.append(f"unknown for {len(unknown)} of {len(h.points)} runs (no process start in "
                   f"their fingerprints): {span([p.key for p in unknown])}"
                   if len(unknown) <= 2 else
                   f"unknown for {len(unknown)} of {len(h.points)} runs (no process start in "
                   "their fingerprints)")
    elif not out:
        out.append("no fresh-server run, none inside a server warm-up")
    return out


def _z(seg: Sequence[float], k: int) -> float:
    """The two-sample z of seg[:k] vs seg[k:] with the pooled sd (a location score)."""
    a, b = seg[:k], seg[k:]
    if len(a) < 2 or len(b) < 2:
        return 0.0
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    ss = sum((v - ma) ** 2 for v in a) + sum((v - mb) ** 2 for v in b)
    sd = math.sqrt(ss / (len(seg) - 2)) or 1e-12
    return (mb - ma) / (sd * math.sqrt(1.0 / len(a) + 1.0 / len(b)))


def _place_with_control(pts: Sequence[Point], x: Sequence[float], kept: dict[int, str],
                        ctl: History) -> dict[int, str]:
    """A scanned change that the control shows too is one event seen twice: its place is
    where the two series together split best (the sum of the two-sample z² of both, the
    control's split at the same time), within SNAP_RUNS of the target's own estimate."""
    out = dict(kept)
    cps = sorted(kept)
    bounds = [0, *cps, len(x)]
    cx = [math.log(p.decode) for p in ctl.points]
    ct = [p.t for p in ctl.points]
    cb = [0, *sorted(c.index for c in ctl.changes), len(cx)]
    for j, c in enumerate(cps):
        if kept[c] != "scan":
            continue
        tol = _time_tolerance(pts, c)
        match = [cc for cc in ctl.changes if abs(cc.t - pts[c].t) <= tol]
        if not match:
            continue
        ci = match[0].index
        ca, cz = max(b for b in cb if b < ci), min(b for b in cb if b > ci)
        a0, b1 = bounds[j], bounds[j + 2]
        lo, hi = max(a0 + MIN_SEGMENT, c - SNAP_RUNS), min(b1 - MIN_SEGMENT, c + SNAP_RUNS)
        best, where = -1.0, c
        for k in range(lo, hi + 1):
            kc = min(range(ca, cz), key=lambda i: abs(ct[i] - pts[k].t))
            score = _z(x[a0:b1], k - a0) ** 2 + _z(cx[ca:cz], kc - ca) ** 2
            if score > best:
                best, where = score, k
        if where != c and where not in out:
            del out[c]
            out[where] = "scan"
    return out


def _reindex(ch: ChangePoint, index: int) -> ChangePoint:
    from dataclasses import replace

    return replace(ch, index=index)


def fleet_note(histories: dict[str, History]) -> list[str]:
    """When at least FLEET_SHARE of at least FLEET_MIN series change within CONTROL_TOLERANCE
    runs' time of one another, in one direction: a common cause, likely the probing side."""
    if len(histories) < FLEET_MIN:
        return []
    events = sorted((c.t, name, (c.decode.rel or 0.0) > 0) for name, h in histories.items()
                    for c in h.changes)
    out = []
    used: set[float] = set()
    for t, _, up in events:
        if t in used:
            continue
        tol = max((_time_tolerance(h.points, c.index) for h in histories.values()
                   for c in h.changes if c.t == t), default=0.0)
        group = {n for (tt, n, u) in events if abs(tt - t) <= tol and u == up}
        if len(group) >= FLEET_SHARE * len(histories):
            used.update(tt for (tt, n, u) in events if abs(tt - t) <= tol)
            out.append(f"{len(group)} of {len(histories)} series moved "
                       f"{'up' if up else 'down'} together (no control given): a common cause — "
                       "the probing host, the network, the time of day — is likelier than "
                       f"{len(group)} endpoints changing at once ({', '.join(sorted(group))})")
    return out


# -- stored runs -------------------------------------------------------------------------------
def _logs(run: StoredRun, key: str) -> list[float]:
    out = []
    for t in (run.result or {}).get("trials") or []:
        v = t.get(key) if t.get("status") == "ok" else None
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0:
            out.append(math.log(v))
    return out


def point_from_run(run: StoredRun, engine: bool,
                   server: ServerState | None = None) -> Point | None:
    """A run as a history point (None when it has no usable decode rate)."""
    if not usable(run):
        return None
    d = _logs(run, "engine_decode_rate" if engine else "decode_rate")
    if not d:
        return None
    s, tps = _logs(run, "engine_step_rate"), _logs(run, "engine_tokens_per_step")
    metric = "tokens per step"
    if not tps:
        tps, metric = _logs(run, "engine_mal"), "MAL"
    wv = statistics.variance(d) / len(d) if len(d) >= 2 else 0.0
    return Point(key=f"run {run.id}", t=run.created_at, decode=math.exp(statistics.fmean(d)),
                 step_rate=math.exp(statistics.fmean(s)) if s else None,
                 tokens_per_step=math.exp(statistics.fmean(tps)) if tps else None,
                 acceptance_metric=metric, within_var=wv, stack=stack_key(run.fingerprint),
                 fingerprint=run.fingerprint, server=server)


def points_from_runs(runs: Sequence[StoredRun]) -> list[Point]:
    """Stored runs (any order) as points in time order: the engine's decode rate when every
    usable run has it, else the client's (one basis for the whole history); each carries its
    server's state (verdict.server_state, among these runs)."""
    rs_ = sorted((r for r in runs if usable(r)), key=lambda r: (r.created_at, r.id))
    engine = engine_basis(rs_)
    states = states_for_runs(rs_)
    return [p for p in (point_from_run(r, engine, states.get(r.id)) for r in rs_)
            if p is not None]


def engine_basis(runs: Sequence[StoredRun]) -> bool:
    """Whether every usable run has the engine's decode rate (else the client's is used)."""
    us = [r for r in runs if usable(r)]
    return bool(us) and all(_logs(r, "engine_decode_rate") for r in us)


# -- for the exporter: changes as samples ------------------------------------------------------
# Runs at the end of a history that each lie beyond this many learned spreads from the last
# stretch's level, in one direction, are a "tail" worth an alert before a change can be
# confirmed (a confirmed change needs MIN_SEGMENT runs on the new level). One such run is not.
TAIL_Z = 2.0
TAIL_RUNS = 2


def tail_beyond_spread(h: History) -> int:
    """How many of the newest runs in a row lie more than TAIL_Z of the last stretch's spread
    below (negative count) or above (positive) its level; 0 when fewer than TAIL_RUNS do."""
    if not h.levels or not h.points:
        return 0
    lv = h.levels[-1]
    sd = lv.spread.sd or th.PRIOR_RUN_SD
    run, sign = 0, 0
    for p in reversed(h.points):
        z = (math.log(p.decode) - math.log(lv.decode)) / sd
        s = 1 if z > TAIL_Z else -1 if z < -TAIL_Z else 0
        if s == 0 or (sign and s != sign):
            break
        sign, run = s, run + 1
    return sign * run if run >= TAIL_RUNS else 0


def change_samples(h: History) -> list[tuple[str, dict[str, str], float]]:
    """The history as Prometheus samples (name, labels, value) for the exporter's /metrics:
    `decodescope_change_points` (confirmed changes in the range),
    `decodescope_change_last_time_seconds`, `decodescope_change_last_ratio` (after / before
    decode rate of the newest change, labelled with its word and carrier),
    `decodescope_change_regression` (1 when the newest change is a stack REGRESSION) and
    `decodescope_change_tail_runs` (newest runs in a row beyond the learned spread, signed)."""
    out: list[tuple[str, dict[str, str], float]] = [
        ("decodescope_change_points", {}, float(len(h.changes))),
        ("decodescope_change_tail_runs", {}, float(tail_beyond_spread(h))),
    ]
    if h.changes:
        c = h.changes[-1]
        labels = {"word": c.word, "carrier": c.carried_by or "none"}
        out.append(("decodescope_change_last_time_seconds", labels, c.t))
        if c.decode.rel is not None:
            out.append(("decodescope_change_last_ratio", labels, 1.0 + c.decode.rel))
        out.append(("decodescope_change_regression", labels,
                    1.0 if c.word == "REGRESSION" else 0.0))
    return out
