"""collect_fingerprint: everything the stack fingerprint holds, best-effort, never raising.

Order: a GPU sampler starts first and runs while the endpoint, process, packages, log and repos
are read, so the fingerprint carries a short clock sample even outside a probe (labelled as
such; the probe replaces it with samples taken under its own load via
`Fingerprint.with_gpu_samples`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

import httpx

from decodescope.edge import deadline_at_most
from decodescope.fingerprint.backend import collect_backend
from decodescope.fingerprint.endpoint import collect_endpoint
from decodescope.fingerprint.host import collect_host
from decodescope.fingerprint.nvml import NO_LOAD_LABEL, GpuSampler, collect_gpu, sampled_items
from decodescope.fingerprint.packages import collect_packages
from decodescope.fingerprint.process import collect_process
from decodescope.fingerprint.repos import collect_repos
from decodescope.fingerprint.stack import Fingerprint, Item
from decodescope.redact import redact_obj, redact_url

# Shortest clock sample taken while collecting: a few reads so min/median/max exist.
MIN_SAMPLE_S = 0.5


def _guarded(section: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Collectors never raise by design; this is the last net for a bug in one of them."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # pragma: no cover - defensive
        return {"collector_error": Item.missing(f"{section} collector failed: "
                                                f"{type(exc).__name__}: {exc}")}


def _redacted_sections(sections: dict[str, dict[str, Item]]) -> dict[str, dict[str, Item]]:
    """Belt and braces: one more deep redaction over every value before the object exists."""
    out: dict[str, dict[str, Item]] = {}
    for name, items in sections.items():
        out[name] = {k: Item(value=redact_obj(it.value), status=it.status,
                             why=redact_obj(it.why)) for k, it in items.items()}
    return out


def collect_fingerprint(url: str, *, model: str | None = None, log_path: str | None = None,
                        watch_repos: Iterable[str] = (), client: httpx.Client | None = None,
                        timeout_s: float = 3.0, nvml: Any | None = None,
                        sample_gpu: bool = True) -> Fingerprint:
    """The stack fingerprint of the server behind `url` (never raises).

    `client`: an httpx.Client to reach the endpoint (its auth headers are used, never stored);
    by default a direct one (`trust_env=False`). `nvml`: a pynvml-like module (test seam).
    """
    t0 = time.monotonic()
    taken_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    sampler = GpuSampler(label=NO_LOAD_LABEL, nvml=nvml) if sample_gpu else None
    if sampler is not None:
        sampler.start()
    own_client = client is None
    http = client or httpx.Client(trust_env=False, timeout=timeout_s)
    try:
        with deadline_at_most(max(timeout_s, 1.0)):  # each side request, in all
            endpoint = _guarded("endpoint", collect_endpoint, http, url, model=model)
    finally:
        if own_client:
            http.close()
    engine_item = endpoint.get("engine")
    engine = engine_item.value if engine_item is not None and engine_item.collected else None

    try:
        process, server = collect_process(url)
    except Exception as exc:  # pragma: no cover - defensive
        process, server = {"collector_error": Item.missing(f"process collector failed: {exc}")}, None
    try:
        packages, interp, pkg_dir = collect_packages(server, engine)
    except Exception as exc:  # pragma: no cover - defensive
        packages = {"collector_error": Item.missing(f"packages collector failed: {exc}")}
        interp, pkg_dir = None, None
    sections: dict[str, dict[str, Item]] = {
        "endpoint": endpoint,
        "process": process,
        "packages": packages,
        "backend": _guarded("backend", collect_backend, log_path),
        "repos": _guarded("repos", collect_repos, tuple(watch_repos), server, interp, pkg_dir),
        "host": _guarded("host", collect_host),
    }
    if sampler is not None:
        remaining = MIN_SAMPLE_S - (time.monotonic() - t0)
        if remaining > 0 and sampler.running:
            time.sleep(remaining)
        samples = sampler.stop()
    gpu = _guarded("gpu", collect_gpu, nvml)
    if sampler is not None and "nvml" not in gpu:
        gpu.update(sampled_items(samples))
    sections["gpu"] = gpu
    return Fingerprint(taken_at=taken_at, url=redact_url(url),
                       sections=_redacted_sections(sections),
                       duration_s=round(time.monotonic() - t0, 3))
