"""One side of a comparison: per-unit values (trials of stored runs, or engine-log windows) plus
what is known about how they were taken (caliber, concurrency, fingerprint, contamination).

Pure: built from `StoredRun`s or `EngineWindow`s; `side_resolve.py` does the I/O.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from decodescope.analysis.decay import decay_pct
from decodescope.analysis.decompose import pool
from decodescope.caliber.spec import Caliber
from decodescope.records.stored_run import StoredRun
from decodescope.records.window import EngineWindow
from decodescope.verdict import thresholds as th
from decodescope.verdict.imported_run import imported_label, imported_of, run_elements

SideKind = Literal["run", "log"]
METRICS = ("decode_rate", "engine_decode_rate", "mal", "tokens_per_step", "step_rate", "running")
ENGINE_SOURCES = ("prometheus", "log", "request")  # pooled engine numbers, best first


@dataclass(frozen=True)
class Unit:
    """One trial of a probe, or one engine window of a log: the unit of statistics."""

    label: str
    decode_rate: float | None = None  # client, tok/s of one request (steady state)
    engine_decode_rate: float | None = None  # engine, tok/s per running request
    mal: float | None = None
    # Tokens per decode step: MAL when every step drafts (MTP, EAGLE); lower with n-gram
    # speculation, whose steps without a match emit one token outside MAL. The exact identity
    # is decode rate = step rate × tokens per step.
    tokens_per_step: float | None = None
    step_rate: float | None = None  # decode steps / s / running request
    running: float | None = None
    stall_time_share: float | None = None  # share of the steady state lost to stalls (runs)

    def get(self, metric: str) -> float | None:
        v: float | None = getattr(self, metric)
        return v


@dataclass(frozen=True)
class Side:
    name: str  # "run 42", "pipeline.log@09-15 23:30..23:45"
    kind: SideKind
    unit_name: str  # "trial" | "window"
    units: tuple[Unit, ...]
    source: str  # where the numbers come from, for the side-by-side table
    caliber: Caliber | None = None
    caliber_ref: str | None = None
    caliber_identity: str | None = None
    concurrency: int | None = None  # requests the probe had in flight (None for log windows)
    engine: str | None = None
    url: str | None = None
    simulated: bool = False
    fingerprint: dict[str, Any] | None = None
    contamination: str | None = None  # why the numbers carry foreign load; None: none seen
    t_start_s: float | None = None
    t_end_s: float | None = None
    window_s: float | None = None  # median engine-window length (log sides)
    pooled: dict[str, Any] | None = None  # engine counts pooled over the side (decompose.pool)
    length_decay_pct: float | None = None  # % per 1K output tokens, when the run has one
    run_ids: tuple[int, ...] = ()
    notes: tuple[str, ...] = field(default=())
    # Log sides: speculative decoding as the log shows it (LogSpec), the block size of the
    # units and how many partial windows were trimmed.
    spec_method: str | None = None  # "off" | launch-config method | None: not logged
    spec_k: int | None = None
    draft_coverage: float | None = None  # drafted steps / steps (1.0: every step drafts)
    every_step_drafts: bool | None = None
    block_windows: int = 1
    windows_trimmed: int = 0
    # Set on both sides by `triage --assume-same-caliber`: the user asserts one caliber.
    caliber_asserted: bool = False
    # Runs: stalls as analysis.run_result summarises them ({"count", "time_share", ...}) and
    # why a run missed its caliber (None: it did not).
    stalls: dict[str, Any] | None = None
    caliber_missed: str | None = None
    selector: str | None = None  # what the user typed for this side (for runnable next steps)
    caliber_path: str | None = None  # the caliber's .toml file, when it came from a file
    # Caliber elements by name (None: unknown) and the peer tool, for a run imported from a
    # peer's result file and the run compared with it (verdict/imported.py).
    elements: dict[str, str | None] | None = None
    imported_from: str | None = None
    imported: dict[str, Any] | None = None  # the run's `imported` record (tool, realized, ...)

    @property
    def speculative(self) -> bool | None:
        """False when the log shows speculative decoding off on this side; True when it shows
        drafts; None when unknown (runs: see MAL / tokens per step)."""
        if self.spec_method == "off":
            return False
        if self.kind == "log" and (self.spec_k or self.values("mal")):
            return True
        return None

    def values(self, metric: str) -> list[float]:
        return [v for u in self.units if (v := u.get(metric)) is not None]

    def median(self, metric: str) -> float | None:
        vs = self.values(metric)
        if vs:
            return statistics.median(vs)
        if self.pooled and metric in ("mal", "step_rate", "tokens_per_step"):
            v = self.pooled.get(metric)
            return float(v) if v is not None else None
        if self.pooled and metric == "engine_decode_rate":
            v = self.pooled.get("decode_rate_per_request")
            return float(v) if v is not None else None
        return None

    def typical(self, metric: str) -> float | None:
        """The side's number for a metric as a comparison shows it: the geometric mean of the
        per-unit values (the statistic the change's percent compares, verdict.stats), else
        the pooled engine count (no per-unit values); None without either."""
        vs = [v for v in self.values(metric) if math.isfinite(v) and v > 0]
        if vs:
            return math.exp(statistics.fmean(math.log(v) for v in vs))
        return self.median(metric) if not self.values(metric) else None

    def typical_statistic(self, metric: str) -> str:
        """records.quantity's name of the statistic `typical` used."""
        return "geometric mean" if self.values(metric) else "pooled counts"

    @property
    def coverage(self) -> float | None:
        """Drafted steps / steps on this side: the log's, else the pooled engine counts', else
        from the identity (tokens per step − 1) / (MAL − 1) = drafts / steps."""
        if self.draft_coverage is not None:
            return self.draft_coverage
        v = (self.pooled or {}).get("draft_coverage")
        if isinstance(v, (int, float)):
            return float(v)
        tps, mal = self.median("tokens_per_step"), self.median("mal")
        if tps is not None and mal is not None and mal > 1.0 + 1e-9:
            return (tps - 1.0) / (mal - 1.0)
        return None

    @property
    def drafts_every_step(self) -> bool | None:
        """True: every step drafts (MTP, EAGLE: MAL is the content signal, and MAL bands
        apply); False: n-gram / suffix / lookup drafting, which drafts only where it finds a
        match (content shows in tokens per step and the drafted share); None: unknown or
        speculative decoding off."""
        if self.spec_method == "off":
            return None
        if self.every_step_drafts is not None:
            return self.every_step_drafts
        cov = self.coverage
        return None if cov is None else cov >= th.FULL_DRAFT_COVERAGE

    def span(self, metric: str) -> tuple[float, float] | None:
        vs = self.values(metric)
        return (min(vs), max(vs)) if vs else None

    @property
    def has_engine(self) -> bool:
        return bool(self.values("mal") or self.values("step_rate") or self.values("engine_decode_rate")
                    or (self.pooled and self.pooled.get("mal") is not None))

    def when(self) -> str:
        if self.t_start_s is None:
            return ""
        a = datetime.fromtimestamp(self.t_start_s)
        if self.t_end_s is None:
            return a.strftime("%m-%d %H:%M")
        b = datetime.fromtimestamp(self.t_end_s)
        end = b.strftime("%H:%M") if a.date() == b.date() else b.strftime("%m-%d %H:%M")
        return f"{a.strftime('%m-%d %H:%M')}–{end}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "kind": self.kind, "unit_name": self.unit_name,
            "units": [u.__dict__ for u in self.units], "source": self.source,
            "caliber_ref": self.caliber_ref, "caliber_identity": self.caliber_identity,
            "concurrency": self.concurrency, "engine": self.engine, "url": self.url,
            "simulated": self.simulated, "contamination": self.contamination,
            "t_start_s": self.t_start_s, "t_end_s": self.t_end_s, "window_s": self.window_s,
            "pooled": self.pooled, "length_decay_pct": self.length_decay_pct,
            "run_ids": list(self.run_ids), "notes": list(self.notes),
            "spec_method": self.spec_method, "spec_k": self.spec_k,
            "draft_coverage": self.draft_coverage, "every_step_drafts": self.every_step_drafts,
            "block_windows": self.block_windows, "windows_trimmed": self.windows_trimmed,
            "caliber_asserted": self.caliber_asserted, "selector": self.selector,
            "caliber_path": self.caliber_path,
            "stalls": self.stalls, "caliber_missed": self.caliber_missed,
            "elements": self.elements, "imported_from": self.imported_from,
            "median": {m: self.median(m) for m in METRICS},
        }


def spec_state(b: Side, c: Side) -> str | None:
    """"off" when the current side ran without speculative decoding and the baseline with it,
    "on" for the reverse, None when both sides agree (or it is unknown). A side without
    speculation has tokens per step (1 by definition) but no MAL."""
    def has_spec(s: Side) -> bool | None:
        spec = getattr(s, "speculative", None)
        if spec is not None:
            return bool(spec)
        if s.values("mal"):
            return True
        if s.values("tokens_per_step"):
            return False
        return None

    hb, hc = has_spec(b), has_spec(c)
    if hb is True and hc is False:
        return "off"
    if hb is False and hc is True:
        return "on"
    return None


def kind_words(side: Side, plural: bool = False) -> str:
    """What a side is, in the words every sentence about it uses: "stored run" (a probe's run),
    "imported `vllm bench serve` run" (plural: "... files"), "Prometheus windows" or "log
    windows" — never a run called windows."""
    if side.kind == "run":
        tool = (side.imported or {}).get("tool")
        if tool:
            return f"imported `{tool}` " + ("files" if plural else "run")
        base = "imported run" if side.imported_from else "stored run"
        return base + ("s" if plural else "")
    return "Prometheus windows" if side.name.startswith("prom") else "log windows"


def windows_words(b: Side, c: Side) -> str:
    """The window sides of a pair, named: "log windows", "Prometheus windows", or both; a pair
    of runs by their kinds ("imported `aiperf` files", "stored runs"), never as windows."""
    kinds = dict.fromkeys(kind_words(s) for s in (b, c) if s.kind != "run")
    return " and ".join(kinds or dict.fromkeys(kind_words(s, plural=True) for s in (b, c)))


def steps_are_the_factor(b: Side, c: Side) -> bool:
    """True when tokens per step, not MAL, is the acceptance factor of the pair's split: steps
    without a draft make the two differ on a side (n-gram), or one side does not draft at all
    (speculative decoding off: MAL 1 by definition there, one token per step), or drafting is
    partial on a side (a drafter that drafts only where it finds a match): D = S × tokens per
    step holds there and D = S × MAL does not, so only that split closes."""
    return (coverage_differs(b, c) or spec_state(b, c) is not None
            or b.drafts_every_step is False or c.drafts_every_step is False)


def coverage_differs(b: Side, c: Side) -> bool:
    """True when, on either side, tokens per step sits clearly below MAL (steps without a
    draft): then both are named, since MAL alone would overstate the acceptance factor."""
    for side in (b, c):
        tps, mal = side.median("tokens_per_step"), side.median("mal")
        if tps is not None and mal and tps / mal < th.FULL_DRAFT_COVERAGE:
            return True
    return False


# -- from stored runs --------------------------------------------------------------------------
def side_from_runs(runs: Sequence[StoredRun], name: str | None = None) -> Side:
    """A side made of one or more stored runs (a baseline of several runs pools their trials).
    Every run must carry a derived result (`run.result`)."""
    if not runs:
        raise ValueError("side_from_runs needs at least one run")
    first = runs[0]
    units: list[Unit] = []
    notes: list[str] = []
    contamination = None
    decays = []
    for run in runs:
        res = run.result or {}
        for t in res.get("trials") or []:
            if t.get("status") != "ok":
                continue
            tag = f"run {run.id} trial {t.get('idx', 0) + 1}" if len(runs) > 1 else f"trial {t.get('idx', 0) + 1}"
            units.append(Unit(
                tag,
                decode_rate=_num(t.get("decode_rate")),
                engine_decode_rate=_num(t.get("engine_decode_rate")),
                mal=_num(t.get("engine_mal")),
                tokens_per_step=_num(t.get("engine_tokens_per_step")),
                step_rate=_num(t.get("engine_step_rate")),
                running=_num(t.get("engine_running")),
                stall_time_share=_num(t.get("stall_time_share")),
            ))
        why = contamination_of(run)
        if why and contamination is None:
            contamination = f"run {run.id}: {why}"
        decay = _decay(res)
        if decay is not None:
            decays.append(decay)
        if run.status != "complete":
            notes.append(f"run {run.id} is {run.status}")
    cal = _caliber(first)
    missed = [f"run {r.id} missed its caliber" for r in runs
              if (r.result or {}).get("caliber_status") == "missed"]
    stalls = _stalls(runs)
    idents = {r.caliber_identity for r in runs}
    if len(idents) > 1:
        notes.append("runs of different calibers pooled: " + ", ".join(sorted(str(i) for i in idents)))
    pooled = _pooled(runs)
    ids = tuple(r.id for r in runs)
    cpath = next((str(p) for r in runs if isinstance(p := (r.meta or {}).get("caliber_path"), str)),
                 None)
    label = name or (f"run {first.id}" if len(runs) == 1 else "runs " + ",".join(map(str, ids)))
    when = _fmt_epoch(first.created_at)
    lab = ", ".join(f"{k}={v}" for k, v in first.labels.items())
    source = f"{label}: probe, {when}" + (f", label {lab}" if lab else "")
    imported = imported_label(first)  # a peer's result file (decodescope.peers, stored by store/peer_import.py)
    if imported:
        source = f"{label}: imported from {imported}, {when}" + (f", label {lab}" if lab else "")
    if first.simulated:
        source += " [SIMULATED]"
    return Side(
        name=label, kind="run", unit_name="trial", units=tuple(units), source=source,
        caliber=cal, caliber_ref=first.caliber_ref, caliber_identity=first.caliber_identity,
        concurrency=(cal.concurrency if cal else _concurrency(first)), engine=first.engine,
        url=first.url, simulated=any(r.simulated for r in runs), fingerprint=first.fingerprint,
        contamination=contamination, t_start_s=min(r.created_at for r in runs),
        t_end_s=max((r.finished_at or r.created_at) for r in runs), pooled=pooled,
        length_decay_pct=statistics.fmean(decays) if decays else None, run_ids=ids,
        notes=tuple(notes), stalls=stalls, caliber_missed="; ".join(missed) or None,
        caliber_path=cpath, elements=run_elements(first) if len(runs) == 1 else None,
        imported_from=imported, imported=imported_of(first) if len(runs) == 1 else None,
    )


def _stalls(runs: Sequence[StoredRun]) -> dict[str, Any] | None:
    """The runs' stall summaries (analysis.run_result "stalls"); several runs: counts summed,
    time share averaged."""
    found = [st for r in runs if isinstance(st := (r.result or {}).get("stalls"), dict)]
    if not found:
        return None
    if len(found) == 1:
        return dict(found[0])
    shares = [float(x["time_share"]) for x in found
              if isinstance(x.get("time_share"), (int, float))]
    out = dict(found[0])
    out["count"] = sum(int(x.get("count") or 0) for x in found)
    out["time_share"] = statistics.fmean(shares) if shares else None
    return out


def contamination_of(run: StoredRun) -> str | None:
    """Why a run's engine numbers carry foreign load, or None when none was seen."""
    res = run.result or {}
    c = res.get("contamination")
    if isinstance(c, dict):  # analysis.contamination: {"flagged", "max_running", "in_flight", ...}
        if c.get("flagged"):
            return (f"engine had up to {c.get('max_running')} requests running or queued while "
                    f"the probe had {c.get('in_flight')} in flight ({c.get('windows')} of "
                    f"{c.get('of_windows')} windows)")
        return None
    if "contamination" in res:  # analysed, nothing seen (or no occupancy data)
        return None
    # Results written before contamination analysis existed: findings, then the pooled gauge.
    for f in res.get("findings") or []:
        if str(f.get("code", "")).startswith("contamination"):
            return str(f.get("cause"))
    conc = _concurrency(run)
    running = (_pooled([run]) or {}).get("running_max")
    if conc is not None and running is not None and running > conc + th.FOREIGN_RUNNING_TOLERANCE:
        return f"engine saw {running:.3g} running requests, the probe sent {conc}"
    return None


def _pooled(runs: Sequence[StoredRun]) -> dict[str, Any] | None:
    for src in ENGINE_SOURCES:
        ws = [w for r in runs for w in r.windows if w.source == src and "reset" not in w.flags]
        if ws:
            return pool(ws)
    if len(runs) == 1:
        eng = (runs[0].result or {}).get("engine") or {}
        for src in ENGINE_SOURCES:
            if eng.get(src):
                return dict(eng[src])
    return None


def _caliber(run: StoredRun) -> Caliber | None:
    if not run.caliber:
        return None
    try:
        return Caliber.from_dict(run.caliber)
    except (TypeError, ValueError, KeyError):
        return None  # a caliber stored by another version: identities still compare


def _concurrency(run: StoredRun) -> int | None:
    c = (run.caliber or {}).get("concurrency") or run.meta.get("concurrency")
    return int(c) if isinstance(c, (int, float)) else None


def _decay(res: dict[str, Any]) -> float | None:
    return decay_pct(res.get("length_decay"))  # None below its minimum output length


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _fmt_epoch(t: float | None) -> str:
    return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M") if t else "?"


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
