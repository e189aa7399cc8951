"""One side of a comparison: per-unit values (trials of stored runs, or engine-log windows) plus
what is known about how they were taken (caliber, concurrency, fingerprint, contamination).

Pure: built from `StoredRun`s or `EngineWindow`s; `sides.py` does the I/O.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from decodescope.analysis.decompose import pool
from decodescope.caliber.spec import Caliber
from decodescope.store.runs import StoredRun
from decodescope.telemetry.window import EngineWindow
from decodescope.verdict import thresholds as th

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
            "median": {m: self.median(m) for m in METRICS},
        }


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
    idents = {r.caliber_identity for r in runs}
    if len(idents) > 1:
        notes.append("runs of different calibers pooled: " + ", ".join(sorted(str(i) for i in idents)))
    pooled = _pooled(runs)
    ids = tuple(r.id for r in runs)
    label = name or (f"run {first.id}" if len(runs) == 1 else "runs " + ",".join(map(str, ids)))
    when = _fmt_epoch(first.created_at)
    lab = ", ".join(f"{k}={v}" for k, v in first.labels.items())
    source = f"{label}: probe, {when}" + (f", label {lab}" if lab else "")
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
        notes=tuple(notes),
    )


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
        return f"engine saw {running:g} running requests, the probe sent {conc}"
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
    d = res.get("length_decay")
    if isinstance(d, dict):
        return _num(d.get("per_1k_pct"))
    return None


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _fmt_epoch(t: float | None) -> str:
    return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M") if t else "?"


# -- from engine windows -----------------------------------------------------------------------
def active(w: EngineWindow) -> bool:
    """A window with decode activity: tokens generated, a request running, counts trusted."""
    if "reset" in w.flags:
        return False
    if w.running is not None and w.running < 1:
        return False
    gen = w.generation_tokens
    if gen is not None:
        return gen >= th.MIN_WINDOW_GENERATION_TOKENS
    rate = w.decode_rate
    return rate is not None and rate > 0


def side_from_windows(name: str, windows: Sequence[EngineWindow], *, source: str | None = None,
                      engine: str | None = None) -> Side:
    """A log side: one unit per active engine window (idle windows are skipped and counted)."""
    act = [w for w in windows if active(w)]
    units = tuple(
        Unit(_clock(w.t_start_s) or f"window {i + 1}",
             engine_decode_rate=(w.decode_rate_per_request if w.running else w.decode_rate),
             mal=w.mal, tokens_per_step=_tokens_per_step(w), step_rate=_step_rate(w),
             running=w.running)
        for i, w in enumerate(act))
    durs = [d for w in act if (d := w.duration_s) is not None]
    starts = [w.t_start_s for w in act if w.t_start_s is not None]
    ends = [w.t_end_s for w in act if w.t_end_s is not None]
    notes = []
    skipped = len(windows) - len(act)
    if skipped:
        notes.append(f"{skipped} idle or reset window(s) skipped")
    eng = engine or next((w.engine for w in act), None)
    window_s = statistics.median(durs) if durs else None
    src = source or f"engine log {name}"
    if eng and eng.startswith("sim"):
        src += " [SIMULATED]"
    return Side(
        name=name, kind="log", unit_name="window", units=units, source=src, engine=eng,
        simulated=bool(eng and eng.startswith("sim")),
        t_start_s=min(starts) if starts else None, t_end_s=max(ends) if ends else None,
        window_s=window_s, pooled=pool(act) if act else None, notes=tuple(notes),
    )


def _step_rate(w: EngineWindow) -> float | None:
    """Decode steps (generated − accepted, drafted or not) per second per running request, as
    analysis.decompose counts them; the window's own drafts-based rate when counts are absent."""
    gen, acc, d = w.generation_tokens, w.accepted_tokens, w.duration_s
    if gen is not None and acc is not None and gen > acc and d and w.running:
        return (gen - acc) / d / w.running
    return w.step_rate


def _tokens_per_step(w: EngineWindow) -> float | None:
    """generated / (generated − accepted): every step emits its accepted drafts plus one."""
    gen, acc = w.generation_tokens, w.accepted_tokens
    if gen is None or acc is None or gen <= acc:
        return None
    return gen / (gen - acc)


def _clock(t: float | None) -> str | None:
    return datetime.fromtimestamp(t).strftime("%m-%d %H:%M:%S") if t is not None else None
