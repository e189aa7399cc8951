"""What runs beside a probe (Prometheus scraper, log tail, GPU sampler) plugs in here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from decodescope.records.findings import Finding
from decodescope.records.window import EngineWindow


@dataclass
class ObserverResult:
    windows: list[EngineWindow] = field(default_factory=list)
    series: dict[str, Any] = field(default_factory=dict)  # raw observations, stored by name
    findings: list[Finding] = field(default_factory=list)
    fingerprint: dict[str, Any] = field(default_factory=dict)  # merged into the run fingerprint


class Observer(Protocol):
    name: str

    def start(self) -> None: ...

    def mark(self, event: str, t_s: float) -> None:
        """Trial boundaries: event is "trial_start:<i>" / "trial_end:<i>"; t_s is perf_counter."""
        ...

    def stop(self) -> ObserverResult: ...
