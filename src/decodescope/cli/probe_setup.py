"""Wiring of what runs beside a probe: Prometheus scraper, log tail, fingerprint.

Kept apart from cli/probe.py so the probe command stays thin; each part is optional and
degrades to a warning, never to a failed probe.
"""

from __future__ import annotations

from typing import Any

from decodescope.probe.observe import Observer
from decodescope.probe.runner import ProbeSettings
from decodescope.telemetry.detect import EngineInfo


def build_observers(settings: ProbeSettings, info: EngineInfo, *, log_path: str | None,
                    scrape: bool, scrape_interval_s: float) -> list[Observer]:
    observers: list[Observer] = []
    return observers


def collect_fp(settings: ProbeSettings, log_path: str | None,
               watch_repos: tuple[str, ...]) -> dict[str, Any] | None:
    return None
