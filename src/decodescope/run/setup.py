"""Wiring of what runs beside a probe: Prometheus scraper, log tail, fingerprint.

Shared by `decodescope probe`, the demos, `sweep` and `run.probe_side`; each part is optional
and degrades to a warning, never to a failed probe.
"""

from __future__ import annotations

import os
from typing import Any

from decodescope.errors import UsageError
from decodescope.probe import client as cl
from decodescope.run.observer_protocol import Observer
from decodescope.run.observers import LogTailObserver, PrometheusObserver
from decodescope.run.runner import ProbeSettings
from decodescope.telemetry.detect import EngineInfo


def engine_name(info: EngineInfo) -> str:
    """The engine label windows carry: "vllm", "llamacpp", ..., "sim-vllm" when simulated."""
    return f"sim-{info.kind}" if info.simulated else info.kind


def build_observers(settings: ProbeSettings, info: EngineInfo, *, log_path: str | None,
                    scrape: bool, scrape_interval_s: float) -> list[Observer]:
    observers: list[Observer] = []
    conc = settings.caliber.concurrency
    if scrape:
        observers.append(PrometheusObserver(
            settings.url, engine_name(info), interval_s=scrape_interval_s, in_flight=conc,
            headers=cl.auth_headers(settings.api_key), proxy=settings.proxy))
    if log_path is not None:
        if not os.path.isfile(log_path):
            raise UsageError(f"no such log file: {log_path}", where="--log",
                             remedy="Pass the engine's live log file (the one it is writing now)")
        kind = info.kind if info.kind in ("vllm", "sglang", "llamacpp") else None
        observers.append(LogTailObserver(log_path, kind, in_flight=conc))
    return observers


def collect_fp(settings: ProbeSettings, log_path: str | None,
               watch_repos: tuple[str, ...]) -> dict[str, Any] | None:
    """The stack fingerprint (fingerprint/collect.py) as a dict, or None when that part of
    the package is unavailable or fails: the probe goes on without it."""
    try:
        import httpx

        from decodescope.fingerprint.collect import collect_fingerprint
    except ImportError:
        return None
    try:
        with httpx.Client(trust_env=False, proxy=settings.proxy, timeout=3.0,
                          headers=cl.auth_headers(settings.api_key)) as client:
            fp = collect_fingerprint(settings.url, model=settings.model, log_path=log_path,
                                     watch_repos=watch_repos, client=client)
    except Exception:  # the fingerprint is best-effort by design
        return None
    to_dict = getattr(fp, "to_dict", None)
    out = to_dict() if callable(to_dict) else fp
    return out if isinstance(out, dict) else None
