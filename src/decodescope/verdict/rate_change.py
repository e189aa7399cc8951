"""The decomposition of a decode-rate change: ln(D2/D1) = ln(S2/S1) + ln(M2/M1).

The MAL share is a content/caliber or acceptance effect, the step-rate share an engine or
hardware effect (glossary: "the identity"). Log ratios come from the same geometric means the
statistics use (per-unit values); when a side has no per-unit engine values, from its pooled
engine counts. The residual is what the identity leaves unexplained (no-draft steps of n-gram
speculation, prefill tokens inside a window, client-vs-engine timing).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from decodescope.verdict import thresholds as th
from decodescope.verdict.side_values import coverage_differs

if TYPE_CHECKING:
    from decodescope.verdict.side_values import Side
    from decodescope.verdict.stats import Change


@dataclass(frozen=True)
class Decomposition:
    decode_baseline: float
    decode_current: float
    log_decode: float  # ln(D2/D1)
    log_step: float | None  # ln(S2/S1)
    log_mal: float | None  # ln(M2/M1)
    share_mal: float | None  # ln(M2/M1) / ln(D2/D1); None when the delta is too small to split
    share_step: float | None
    residual: float | None  # 1 − share_mal − share_step
    basis: str  # "per-unit geometric means" | "pooled engine counts"
    acceptance_metric: str = "MAL"  # "tokens per step" when both sides have it (exact identity)

    @property
    def split_known(self) -> bool:
        return self.log_mal is not None and self.log_step is not None

    def describe(self) -> str:
        if not self.split_known:
            return "split unknown: needs engine MAL and step rate on both sides"
        if self.share_mal is None or self.share_step is None:
            return (f"no delta to split (ln D₂/D₁ = {self.log_decode:+.3f}); "
                    f"ln M₂/M₁ = {self.log_mal:+.3f}, ln S₂/S₁ = {self.log_step:+.3f}")
        name = "MAL" if self.acceptance_metric == "MAL" else f"MAL ({self.acceptance_metric})"
        return (f"{name} carries {share(self.share_mal)} of the log-delta, step rate "
                f"{share(self.share_step)}"
                + (f", unexplained {share(self.residual)}" if self.residual is not None
                   and abs(self.residual) >= 0.05 else ""))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def share(x: float) -> str:
    """A share of a log-delta as a percentage ('95%'; never '-0%')."""
    v = round(x * 100)
    return f"{0 if v == 0 else v}%".replace("-", "−")


def decompose(b: Side, c: Side, changes: dict[str, Change]) -> Decomposition | None:
    d, s = changes["decode"], changes["step_rate"]
    tps = changes.get("tokens_per_step")
    use_tps = (tps is not None and tps.baseline is not None and tps.current is not None
               and coverage_differs(b, c))
    m = tps if (use_tps and tps is not None) else changes["mal"]
    metric = "tokens per step" if use_tps else "MAL"
    if d.baseline is None or d.current is None:
        return None
    log_d = math.log(d.current / d.baseline)
    log_m, log_s = _log(m.baseline, m.current), _log(s.baseline, s.current)
    basis = "per-unit geometric means"
    if log_m is None or log_s is None:
        pm = _log(b.median("mal"), c.median("mal"))
        ps = _log(b.median("step_rate"), c.median("step_rate"))
        if pm is not None and ps is not None:
            log_m, log_s, basis = pm, ps, "pooled engine counts"
    share_m = share_s = residual = None
    if log_m is not None and log_s is not None and abs(log_d) >= th.MIN_LOG_DELTA_FOR_SHARES:
        share_m, share_s = log_m / log_d, log_s / log_d
        residual = 1.0 - share_m - share_s
    return Decomposition(d.baseline, d.current, log_d, log_s, log_m, share_m, share_s, residual,
                         basis, metric)


def _log(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or a <= 0 or b <= 0:
        return None
    return math.log(b / a)
