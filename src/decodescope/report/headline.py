"""The one decode-rate number of a run, as the verdict uses it (pure).

The verdict (verdict/triage.py) compares per-trial decode rates: the engine's
(`trials[i].engine_decode_rate`) when it has them for at least MIN_UNITS trials, else the
client's (`trials[i].decode_rate`). Who decides is decided once, in the analysis
(`analysis.run_quantities.who_decides`, stored as the result's `deciding`); the number shown for a
run is that source's median over trials — the result's `quantities["decode_rate"]` record —
and every table (`runs list`, `probe`, `runs show`, `sweep`) shows this one record.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median
from typing import Any

from decodescope.analysis.run_quantities import deciding_of, quantities_of


@dataclass(frozen=True)
class Headline:
    decode_rate: float | None  # median over ok trials, tok/s per request
    source: str | None  # "engine" | "client" | None (no trial has a rate)
    trials: int  # trials the median is taken over
    statistic: str = "median over trials"
    reason: str | None = None  # why this source decides

    def text(self) -> str:
        if self.decode_rate is None:
            return "—"
        return f"{self.decode_rate:.1f} tok/s ({self.source}, median of {self.trials} trials)"


def headline(result: dict[str, Any] | None) -> Headline:
    """The run's `decode_rate` quantity and the one decision of who decides."""
    decision = deciding_of(result)
    q = quantities_of(result)["decode_rate"]
    if q.value is None:
        return Headline(None, None, 0, q.statistic, decision.get("reason"))
    return Headline(q.value, decision.get("source"), q.n, q.statistic, decision.get("reason"))


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
