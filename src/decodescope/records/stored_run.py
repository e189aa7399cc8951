"""A stored run as every layer above the store reads it: the run, its trials with their raw
request traces, its engine windows and series, and its derived result (`store.runs` reads and
writes them; analysis, verdict and report read them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from decodescope.records.trace import RequestTrace
from decodescope.records.window import EngineWindow


@dataclass
class StoredTrial:
    idx: int
    status: str  # "ok" | "failed"
    started_at: float
    wall_anchor_s: float  # epoch = perf_counter time + wall_anchor_s
    result: dict[str, Any] | None
    requests: list[RequestTrace] = field(default_factory=list)


@dataclass
class StoredRun:
    id: int
    created_at: float
    finished_at: float | None
    kind: str
    status: str
    url: str | None
    model: str | None
    engine: str | None
    simulated: bool
    caliber_ref: str | None
    caliber_identity: str | None
    caliber: dict[str, Any] | None
    labels: dict[str, str]
    warnings: list[dict[str, Any]]
    fingerprint: dict[str, Any] | None
    result: dict[str, Any] | None
    meta: dict[str, Any]
    trials: list[StoredTrial] = field(default_factory=list)
    windows: list[EngineWindow] = field(default_factory=list)
    series: dict[str, Any] = field(default_factory=dict)
    # Why the status reads as it does, when the store's word is not the whole story: a run
    # read as abandoned says whose process is gone.
    status_note: str | None = None
    # A failed run's cause: {"error", "error_kind", "trial", "request"} of the failing trace,
    # or {"error", "error_kind"} of what stopped the probe when no trace failed.
    failure: dict[str, Any] | None = None

    def to_dict(self, with_traces: bool = True) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in (
            "id", "created_at", "finished_at", "kind", "status", "url", "model", "engine",
            "simulated", "caliber_ref", "caliber_identity", "caliber", "labels", "warnings",
            "fingerprint", "result", "meta")}
        if self.status_note is not None:
            d["status_note"] = self.status_note
        if self.failure is not None:
            d["failure"] = self.failure
        d["trials"] = [
            {"idx": t.idx, "status": t.status, "started_at": t.started_at,
             "wall_anchor_s": t.wall_anchor_s, "result": t.result,
             **({"requests": [r.to_dict() for r in t.requests]} if with_traces else {})}
            for t in self.trials
        ]
        d["windows"] = [w.to_dict() for w in self.windows]
        if with_traces:
            d["series"] = self.series
        return d
