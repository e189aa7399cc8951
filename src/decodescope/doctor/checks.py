"""Doctor checks other than proxies: endpoint health, served model, /metrics and speculative
counters, engine log readability, timer resolution. Each returns findings (values, not prints).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import httpx

from decodescope.edge import HEALTH, METRICS, MODELS, side_request
from decodescope.fingerprint.endpoint import collect_endpoint
from decodescope.records.findings import Finding
from decodescope.redact import redact_text, redact_url

# A timer step above this quantizes ITL: a verify step under speculative decoding takes
# 5–25 ms, so a 1 ms tick is already a ≥4% error on one step.
TIMER_MAX_STEP_S = 1e-3
TIMER_PROBE_CALLS = 20_000  # consecutive reads to find the smallest non-zero step (~2 ms)
LOG_HEAD_BYTES = 1024 * 1024
LOG_TAIL_BYTES = 8 * 1024 * 1024

# Stats lines a parser can use, by engine (see shared engine-formats reference).
LOG_KEYWORDS: dict[str, tuple[str, ...]] = {
    "vllm": ("Avg generation throughput", "SpecDecoding metrics", "Speculative metrics"),
    "sglang": ("Decode batch",),
    "llamacpp": ("print_timing", "draft acceptance"),
}
SPEC_METRIC = re.compile(r"^([a-zA-Z_:]*(?:spec_decode|spec_accept)[a-zA-Z_:]*)(\{[^}]*\})?\s+(\S+)",
                         re.MULTILINE)


def _base(url: str) -> str:
    base = url.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


def check_endpoint(client: httpx.Client, url: str, model: str | None) -> list[Finding]:
    """Bounded (edge.side_request): an answer past its endpoint's size limit or deadline
    raises a ProtocolError naming the endpoint; run_doctor makes it an error finding (doctor's
    exit 2), keeping every other finding."""
    base = _base(url)
    shown = redact_url(url)
    out: list[Finding] = []
    try:
        health = side_request(client, "GET", base, HEALTH)
    except httpx.HTTPError as exc:
        return [Finding("endpoint.unreachable",
                        f"{shown} is unreachable: {redact_text(f'{type(exc).__name__}: {exc}')}",
                        remedy="start the server, or check host and port "
                               "(`decodescope doctor` reaches it directly, without proxies)",
                        severity="error")]
    if health.status == 503:
        out.append(Finding("endpoint.loading", "/health answers 503: the server is still loading",
                           remedy="wait until /health answers 200, then probe",
                           severity="warning"))
    elif health.status == 200:
        out.append(Finding("endpoint.healthy", "endpoint healthy (/health 200)", severity="info"))

    try:
        resp = side_request(client, "GET", base, MODELS)
    except httpx.HTTPError as exc:
        out.append(Finding("endpoint.models_failed", f"/v1/models failed: {type(exc).__name__}",
                           severity="error"))
        return out
    if resp.status in (401, 403):
        out.append(Finding("endpoint.auth", f"/v1/models answers {resp.status}: the server "
                           f"wants an API key", remedy="give the probe the server's API key",
                           severity="warning"))
    elif resp.status != 200:
        out.append(Finding("endpoint.models_failed",
                           f"/v1/models answers HTTP {resp.status}: not an OpenAI-compatible "
                           f"server at this URL?", remedy="point at the server's base URL "
                           "(http://host:port)", severity="error"))
    else:
        try:
            doc = resp.json()
        except ValueError:
            doc = None
        data = doc.get("data") if isinstance(doc, dict) else None
        ids = [str(m.get("id")) for m in data if isinstance(m, dict)] if isinstance(data, list) else []
        if model is not None and model not in ids:
            out.append(Finding("model.not_served",
                               f"model {model!r} is not served here (served: "
                               f"{', '.join(ids) or 'none'})",
                               remedy=f"use --model {ids[0]}" if ids else "check the server's "
                               "--served-model-name", severity="error"))
        elif ids:
            out.append(Finding("model.served", f"serves {', '.join(ids)}", severity="info"))
    items = collect_endpoint(client, url, model=model)
    kind, ver = items["engine"], items["engine_version"]
    if kind.collected:
        out.append(Finding("engine.detected", f"engine: {kind.value}"
                           + (f" {ver.value}" if ver.collected else ""), severity="info"))
    out.extend(check_metrics(client, base, kind.value if kind.collected else None))
    return out


def check_metrics(client: httpx.Client, base: str, engine: str | None) -> list[Finding]:
    try:
        resp = side_request(client, "GET", base, METRICS)
    except httpx.HTTPError as exc:
        return [Finding("metrics.failed", f"/metrics failed: {type(exc).__name__}",
                        severity="warning")]
    if resp.status != 200:
        how = {"llamacpp": "start llama-server with --metrics",
               "sglang": "start SGLang with --enable-metrics",
               "vllm": "vLLM serves /metrics by default: check the URL"}.get(
            str(engine), "enable the engine's Prometheus endpoint (llama.cpp --metrics, "
                         "SGLang --enable-metrics)")
        return [Finding("metrics.unavailable", f"/metrics answers HTTP {resp.status}: no "
                        f"engine windows from Prometheus (log windows still work)", remedy=how,
                        severity="warning")]
    spec = SPEC_METRIC.findall(resp.text)
    if not spec:
        return [Finding("metrics.no_spec", "/metrics available; no speculative-decoding counters: "
                        "spec decoding looks off (or this engine does not export them)",
                        severity="info")]
    names = sorted({name for name, _labels, _v in spec})
    positions = {m for _n, labels, _v in spec for m in re.findall(r'position="(\d+)"', labels)}
    k = f"k={len(positions)}, " if positions else ""
    return [Finding("metrics.spec", f"/metrics available; speculative decoding on "
                    f"({k}{len(names)} spec metrics, e.g. {names[0]})", severity="info")]


def _read_head_tail(path: Path) -> str:
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(LOG_HEAD_BYTES)
        if size > LOG_HEAD_BYTES + LOG_TAIL_BYTES:
            f.seek(size - LOG_TAIL_BYTES)
        tail = f.read(LOG_TAIL_BYTES)
    return (head + b"\n" + tail).decode("utf-8", "replace")


def check_log(log_path: str) -> list[Finding]:
    path = Path(log_path)
    if not path.exists():
        return [Finding("log.missing", f"engine log {log_path} does not exist",
                        remedy="pass the file the engine writes to (e.g. `vllm serve ... 2>&1 | "
                               "tee engine.log`)", severity="error")]
    if not path.is_file():
        return [Finding("log.not_file", f"engine log {log_path} is not a file", severity="error")]
    try:
        text = _read_head_tail(path)
    except OSError as exc:
        return [Finding("log.unreadable", f"cannot read {log_path}: {exc.strerror or exc}",
                        remedy="fix its permissions or run as the engine's user",
                        severity="error")]
    if not text.strip():
        return [Finding("log.empty", f"engine log {log_path} is empty",
                        remedy="check that the engine writes there", severity="warning")]
    found = {engine: [k for k in keys if k in text] for engine, keys in LOG_KEYWORDS.items()}
    found = {e: ks for e, ks in found.items() if ks}
    if not found:
        return [Finding("log.unrecognised",
                        f"{log_path} has no known stats lines ({', '.join(sorted({k for ks in LOG_KEYWORDS.values() for k in ks}))})",
                        remedy="vLLM: do not pass --disable-log-stats; SGLang: Decode batch lines "
                               "need decoding traffic; llama.cpp: print_timing lines appear after "
                               "each request (use --log-file)", severity="warning")]
    out = [Finding("log.recognised", f"engine log readable: {engine} format "
                   f"({', '.join(keys)})", severity="info") for engine, keys in found.items()]
    if "vllm" in found and "Avg generation throughput" in found["vllm"] and not any(
            k in found["vllm"] for k in ("SpecDecoding metrics", "Speculative metrics")):
        out.append(Finding("log.no_spec_lines", "vLLM log has no SpecDecoding lines: speculative "
                           "decoding off, or no drafts yet", severity="info"))
    return out


def min_clock_step(read: Callable[[], float] = time.perf_counter,
                   calls: int = TIMER_PROBE_CALLS) -> float | None:
    """Smallest non-zero difference between consecutive reads (None: never advanced)."""
    fn = read
    best: float | None = None
    last = fn()
    for _ in range(calls):
        now = fn()
        d = now - last
        if d > 0 and (best is None or d < best):
            best = d
        last = now
    return best


def check_timer() -> list[Finding]:
    out: list[Finding] = []
    clocks: tuple[tuple[Literal["perf_counter", "monotonic"], Callable[[], float]], ...] = (
        ("perf_counter", time.perf_counter), ("monotonic", time.monotonic))
    for name, fn in clocks:
        info = time.get_clock_info(name)
        step = min_clock_step(fn)
        text = (f"timer {name}: resolution {info.resolution:.0e} s, smallest measured step "
                + (f"{step * 1e9:.0f} ns" if step is not None else "none (never advanced)"))
        if step is None or step > TIMER_MAX_STEP_S:
            out.append(Finding("timer.coarse", text + ": ITL samples will be quantized",
                               remedy="run on a host with a high-resolution clock",
                               severity="warning"))
        else:
            out.append(Finding("timer.ok", text, severity="info"))
    return out
