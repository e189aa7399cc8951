"""A comparison's reported quantities: each side's decode rate, MAL, tokens per step and step
rate as `records.quantity.Quantity` records, built once from the numbers the change is
computed from (`Side.typical`: the geometric mean of the per-unit values, as `Change.baseline`
and `.current`, so the headline's arrow, its percent and the side-by-side table agree).

Pure: from the Sides and the verdict's decode source.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from decodescope.records.quantity import Quantity, Source
from decodescope.verdict import thresholds as th
from decodescope.verdict.side import Side
from decodescope.verdict.stats import t_quantile

# key, metric of Side, name, unit, digits
_METRICS = (
    ("client_decode_rate", "decode_rate", "decode rate", "tok/s", 1),
    ("engine_decode_rate", "engine_decode_rate", "decode rate", "tok/s", 1),
    ("mal", "mal", "MAL", "", 2),
    ("tokens_per_step", "tokens_per_step", "tokens per step", "tokens/step", 2),
    ("step_rate", "step_rate", "step rate", "steps/s", 1),
)


def decode_metric(decode_source: str, side: Side, which: str) -> str:
    """The Side metric whose values the decode change compares on this side ("baseline" or
    "current"): the engine's, the client's, or — mixed — the one that side had more of."""
    if decode_source == "engine":
        return "engine_decode_rate"
    if decode_source.startswith("client"):
        return "decode_rate"
    if decode_source.startswith("mixed"):
        return "engine_decode_rate" if f"engine {which}" in decode_source else "decode_rate"
    eng, cli = side.values("engine_decode_rate"), side.values("decode_rate")
    return "engine_decode_rate" if len(eng) >= len(cli) else "decode_rate"


def side_quantities(side: Side, decode_source: str, which: str) -> dict[str, Quantity]:
    """One side's quantities: `decode_rate` (the deciding source's), `client_decode_rate`,
    `engine_decode_rate`, `mal`, `tokens_per_step`, `step_rate`."""
    basis = side.unit_name + "s"
    out: dict[str, Quantity] = {}
    for key, metric, name, unit, digits in _METRICS:
        src: Source = "client" if metric == "decode_rate" else (
            "log" if side.kind == "log" else "engine")
        value = side.typical(metric)
        stat = side.typical_statistic(metric) if value is not None else "geometric mean"
        n = len(side.values(metric)) if stat == "geometric mean" else int(
            (side.pooled or {}).get("windows") or 0)
        out[key] = Quantity(name, value, unit, stat, n,
                            basis if stat == "geometric mean" else "engine windows", src,
                            interval=_interval(side.values(metric)) if stat == "geometric mean"
                            else None, digits=digits)
    deciding = decode_metric(decode_source, side, which)
    out["decode_rate"] = out["engine_decode_rate" if deciding == "engine_decode_rate"
                             else "client_decode_rate"]
    return out


def _interval(values: list[float]) -> tuple[float, float] | None:
    """95% interval of a geometric mean: the Student t interval of the mean log, back-
    transformed (None with fewer than MIN_UNITS positive values)."""
    logs = [math.log(v) for v in values if math.isfinite(v) and v > 0]
    if len(logs) < th.MIN_UNITS:
        return None
    m, sd = statistics.fmean(logs), statistics.stdev(logs)
    half = t_quantile(0.5 + th.CONFIDENCE / 2.0, len(logs) - 1) * sd / math.sqrt(len(logs))
    return math.exp(m - half), math.exp(m + half)


def comparison_quantities(b: Side, c: Side, decode_source: str
                          ) -> dict[str, tuple[Quantity, Quantity]]:
    qb, qc = side_quantities(b, decode_source, "baseline"), side_quantities(c, decode_source,
                                                                            "current")
    return {k: (qb[k], qc[k]) for k in qb}


def to_dict(qs: dict[str, tuple[Quantity, Quantity]]) -> dict[str, Any]:
    return {k: {"baseline": a.to_dict(), "current": b.to_dict()} for k, (a, b) in qs.items()}
