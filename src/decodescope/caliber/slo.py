"""`--slo ttft=200ms,tpot=50ms` or a named preset: the limits a request must meet to count
toward goodput (analysis/goodput.py; docs/methodology.md, "Goodput").

Presets are MLPerf Inference's server-scenario limits (mlcommons/inference,
loadgen/mlperf.conf: `<model>.Server.ttft_latency` / `tpot_latency`, milliseconds). MLPerf
holds a run to them at its 99th percentile; here they are per-request limits, so a run that
MLPerf's limits would pass has a goodput of at least 99 %.
"""

from __future__ import annotations

import re

from decodescope.caliber.spec import SloSpec
from decodescope.errors import UsageError

# name -> (TTFT ms, TPOT ms), from loadgen/mlperf.conf
PRESETS: dict[str, tuple[float, float]] = {
    "mlperf-llama2-70b": (2000, 200),
    "mlperf-llama2-70b-interactive": (450, 40),
    "mlperf-mixtral-8x7b": (2000, 200),
    "mlperf-llama3.1-405b": (6000, 175),
    "mlperf-llama3.1-405b-interactive": (4500, 80),
    "mlperf-llama3.1-8b": (2000, 100),
    "mlperf-llama3.1-8b-interactive": (500, 30),
    "mlperf-deepseek-r1": (2000, 80),
    "mlperf-deepseek-r1-interactive": (1500, 15),
}
_LIMIT = re.compile(r"\s*(ttft|tpot|e2e)\s*=\s*([0-9]*\.?[0-9]+)\s*(ms|s)?\s*$", re.I)
_REMEDY = ("Write limits as ttft=200ms,tpot=50ms,e2e=10s (ms or s; ms without a unit), or a "
           "preset: " + ", ".join(PRESETS))


def parse_slo(text: str) -> SloSpec:
    """`ttft=200ms,tpot=50ms`, `e2e=10s`, or a preset name (docs/methodology.md)."""
    name = text.strip().lower()
    if name in PRESETS:
        ttft, tpot = PRESETS[name]
        return SloSpec(ttft_ms=ttft, tpot_ms=tpot, preset=name)
    limits: dict[str, float] = {}
    for part in text.split(","):
        m = _LIMIT.match(part)
        if m is None:
            raise UsageError(f"--slo {text!r}: {part.strip()!r} is neither a limit nor a preset",
                             where="--slo", remedy=_REMEDY)
        key, value, unit = m.group(1).lower(), float(m.group(2)), (m.group(3) or "ms").lower()
        if key in limits:
            raise UsageError(f"--slo {text!r} gives {key} twice", where="--slo", remedy=_REMEDY)
        ms = value * 1000.0 if unit == "s" else value
        if not 0 < ms <= 86_400_000:
            raise UsageError(f"--slo {text!r}: {key} must be above 0 and at most a day",
                             where="--slo", remedy=_REMEDY)
        limits[key] = ms
    return SloSpec(ttft_ms=limits.get("ttft"), tpot_ms=limits.get("tpot"), e2e_ms=limits.get("e2e"))
