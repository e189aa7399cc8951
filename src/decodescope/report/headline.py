"""The one decode-rate number of a run, as the verdict uses it (pure).

The verdict (verdict/triage.py) compares per-trial decode rates: the engine's
(`trials[i].engine_decode_rate`) when it has them for at least MIN_UNITS trials, else the
client's (`trials[i].decode_rate`). The number shown for a run is the median of those
per-trial values, with its source: every table (`runs list`, `probe`, `runs show`, `sweep`)
shows this one statistic.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median
from typing import Any

from decodescope.verdict.thresholds import MIN_UNITS


@dataclass(frozen=True)
class Headline:
    decode_rate: float | None  # median over ok trials, tok/s per request
    source: str | None  # "engine" | "client" | None (no trial has a rate)
    trials: int  # trials the median is taken over

    def text(self) -> str:
        if self.decode_rate is None:
            return "—"
        return f"{self.decode_rate:.1f} tok/s ({self.source}, median of {self.trials} trials)"


def headline(result: dict[str, Any] | None) -> Headline:
    trials = [t for t in (result or {}).get("trials") or [] if t.get("status") == "ok"]
    eng = [t["engine_decode_rate"] for t in trials if t.get("engine_decode_rate") is not None]
    cli = [t["decode_rate"] for t in trials if t.get("decode_rate") is not None]
    if eng and len(eng) >= min(MIN_UNITS, len(trials)):
        return Headline(median(eng), "engine", len(eng))
    if cli:
        return Headline(median(cli), "client", len(cli))
    return Headline(None, None, 0)


def output_throughput_all(trial: dict[str, Any]) -> float | None:
    """Output tokens of all the trial's requests per second of its wall time (first send to
    last byte), from the stored per-trial result: mean output tokens × requests / span."""
    span, out, n = trial.get("trial_span_s"), trial.get("output_tokens"), trial.get("requests")
    if not span or out is None or not n or trial.get("status") != "ok" or span[1] <= span[0]:
        return None
    return float(out) * int(n) / (span[1] - span[0])


def median_or_none(xs: list[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return median(vals) if vals else None
