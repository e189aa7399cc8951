"""Decomposition of a probe: engine decode rate, MAL and step rate over the probe's own window,
beside the client's numbers (glossary: decode rate ≈ step rate × MAL).

Engine windows come from Prometheus scrapes (source="prometheus"), the engine log
(source="log") or per-request engine reports (source="request", llama.cpp `timings`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from decodescope.telemetry.window import EngineWindow


def pool(windows: Iterable[EngineWindow]) -> dict[str, Any] | None:
    """Pool windows by summing counts (never by averaging printed rates)."""
    ws = list(windows)
    if not ws:
        return None
    gen = _sum(w.generation_tokens for w in ws)
    drafts = _sum(w.drafts for w in ws)
    acc = _sum(w.accepted_tokens for w in ws)
    dtok = _sum(w.draft_tokens for w in ws)
    durs = [w.duration_s for w in ws]
    dur = sum(d for d in durs if d is not None) if all(d is not None for d in durs) else None
    running = [w.running for w in ws if w.running is not None]
    mean_running = (sum(running) / len(running)) if running else None
    mal = (1 + acc / drafts) if (drafts and acc is not None) else None
    if mal is None:
        reported = [w.mal for w in ws if w.mal is not None]
        mal = sum(reported) / len(reported) if reported else None
    decode = gen / dur if (gen is not None and dur) else None
    per_req = decode / mean_running if (decode is not None and mean_running) else None
    step = None
    if drafts is not None and dur and mean_running:
        step = drafts / dur / mean_running
    elif per_req is not None and mal:
        step = per_req / mal
    return {
        "windows": len(ws),
        "sources": sorted({w.source for w in ws}),
        "duration_s": dur,
        "generation_tokens": gen,
        "drafts": drafts,
        "draft_tokens": dtok,
        "accepted_tokens": acc,
        "decode_rate": decode,
        "decode_rate_per_request": per_req,
        "mal": mal,
        "acceptance_rate": (acc / dtok) if (acc is not None and dtok) else None,
        "step_rate": step,
        "running_mean": mean_running,
        "running_max": max(running) if running else None,
    }


def _sum(xs: Iterable[int | None]) -> int | None:
    vals = list(xs)
    if not vals or any(v is None for v in vals):
        return None
    return int(sum(v for v in vals if v is not None))
