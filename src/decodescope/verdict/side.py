"""One side of a comparison: its per-unit values (trials of stored runs, or engine windows)
plus what is known about how they were taken (caliber, concurrency, fingerprint,
contamination), and what a pair of sides says of itself (speculative decoding off/on, which
factor splits the decode rate, how each side is worded). Built by side_from_runs.py and
side_from_windows.py; `side_resolve.py` does the I/O.

Pure.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from decodescope.caliber.spec import Caliber
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


def speculates(s: Side) -> bool | None:
    """Whether a side ran with speculative decoding: True / False, None when unknown. A side
    without speculation has tokens per step (1 by definition) but no MAL."""
    spec = getattr(s, "speculative", None)
    if spec is not None:
        return bool(spec)
    if s.values("mal"):
        return True
    if s.values("tokens_per_step"):
        return False
    return None


def spec_state(b: Side, c: Side) -> str | None:
    """"off" when the current side ran without speculative decoding and the baseline with it,
    "on" for the reverse, None when both sides agree (or it is unknown)."""
    hb, hc = speculates(b), speculates(c)
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


def fmt_epoch(t: float | None) -> str:
    return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M") if t else "?"
