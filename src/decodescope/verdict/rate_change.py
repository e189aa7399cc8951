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
from decodescope.verdict.side import steps_are_the_factor

if TYPE_CHECKING:
    from decodescope.verdict.side import Side
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
    # The component that carries the decode change (`carrier`): the largest share of the log
    # change, significant and beyond the minimum effect; None when no component does (the
    # decode rate did not change, or its largest mover is within noise).
    carried_by: str | None = None
    # Why no component carries it, worded from the same Change records the rows show (a
    # component beyond noise on its own row is never called "within noise" here).
    no_carrier: str | None = None

    @property
    def split_known(self) -> bool:
        return self.log_mal is not None and self.log_step is not None

    @property
    def log_rest(self) -> float | None:
        """ln(D2/D1) − ln(S2/S1) − ln(factor2/factor1): what the identity leaves over (the
        client's decode timing against the engine's counts, geometric means of per-unit
        values, prefill inside a window). Printed as its own term so the split closes."""
        if not self.split_known:
            return None
        return self.log_decode - (self.log_step or 0.0) - (self.log_mal or 0.0)

    def equation(self) -> str:
        """'ln(D2/D1) = -1.626 = ln(S2/S1) -0.340 + ln(T2/T1) -1.286' — terms that add up to
        the total within rounding: a remainder that shows at three decimals is its own term."""
        total = f"ln(D2/D1) = {self.log_decode:+.3f}"
        if not self.split_known:
            return total
        sym = "T" if self.acceptance_metric == "tokens per step" else "M"
        text = (f"{total} = ln(S2/S1) {self.log_step:+.3f} + ln({sym}2/{sym}1) "
                f"{self.log_mal:+.3f}")
        rest = self.log_rest
        if rest is not None and round(rest, 3) != 0.0:
            text += f" + unexplained {rest:+.3f}"
        if sym == "T":
            text += " (T: tokens per step; D = S × T)"
        return text

    def describe(self) -> str:
        if not self.split_known:  # name only what is missing (MAL may be known: 1, no drafts)
            missing = [n for n, v in ((self.acceptance_metric, self.log_mal),
                                      ("step rate", self.log_step)) if v is None]
            return f"split unknown: needs the engine's {' and '.join(missing)} on both sides"
        if self.share_mal is None or self.share_step is None:
            return (f"no delta to split (ln D₂/D₁ = {self.log_decode:+.3f}); "
                    f"ln M₂/M₁ = {self.log_mal:+.3f}, ln S₂/S₁ = {self.log_step:+.3f}")
        shares = (f"{self.acceptance_metric} {share(self.share_mal)} of the log-delta, step "
                  f"rate {share(self.share_step)}"
                  + (f", unexplained {share(self.residual)}" if self.residual is not None
                     and abs(self.residual) >= 0.05 else ""))
        if self.carried_by is not None:
            return f"{self.carried_by} carries it: {shares}"
        return f"{shares}; {self.no_carrier or 'no component carries it beyond noise'}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "log_rest": self.log_rest, "equation": self.equation()}


def share(x: float) -> str:
    """A share of a log-delta as a percentage ('95%'; never '-0%')."""
    v = round(x * 100)
    return f"{0 if v == 0 else v}%".replace("-", "−")


def carrier(d: Change, parts: list[tuple[str, Change]]) -> str | None:
    """The carrying component's name (see `carrier_why`)."""
    return carrier_why(d, parts)[0]


def carrier_why(d: Change, parts: list[tuple[str, Change]]) -> tuple[str | None, str | None]:
    """The component that carries the decode change d: of the components with a log change,
    the one with the largest |log change| (so the largest share of ln D₂/D₁) — and only when
    it moved in the decode rate's direction, beyond its minimum effect, and is significant
    after Holm's correction over the components. A component that is second largest never
    carries; a largest one within noise means none does (the split is then not known).

    The second value says, when none carries, why — from the components' own Change records
    (the rows "MAL changed?" / "step rate changed?" render the same records)."""
    from decodescope.verdict.stats import holm

    if not d.changed:
        if d.status == "no_data":
            return None, None
        what = "could not be decided" if d.status == "undecidable" else "did not change"
        return None, f"the decode rate {what} ({d.describe()}): no component carries it"
    if not parts:
        return None, None
    rejects = holm([x.p_value for _, x in parts])
    sign = 1.0 if (d.rel or 0.0) > 0 else -1.0
    moved = [(abs(x.log_ratio), name, x, rej) for (name, x), rej in zip(parts, rejects, strict=True)
             if x.log_ratio is not None]
    if not moved:
        return None, None
    _, name, x, rej = max(moved, key=lambda m: m[0])
    lr = x.log_ratio or 0.0
    if rej and abs(x.rel or 0.0) >= x.min_effect and lr * sign > 0:
        return name, None
    if lr * sign <= 0:
        why = f"moved against the decode rate ({x.describe()})"
    elif abs(x.rel or 0.0) < x.min_effect:
        why = f"moved less than the {x.min_effect:.0%} minimum effect ({x.describe()})"
    elif x.changed:  # beyond noise on its own row, not after the correction over components
        why = (f"moved {x.describe()} on its own, but not after Holm's correction over the "
               f"{len(parts)} components")
    else:
        why = f"did not move beyond noise ({x.describe()})"
    others = [f"{n} {y.describe()}" for n, y in parts if n != name and y.changed]
    return None, (f"{name}, the largest share, {why}: no component carries it"
                  + (f" ({'; '.join(others)}, a smaller share)" if others else ""))


def decompose(b: Side, c: Side, changes: dict[str, Change]) -> Decomposition | None:
    d, s = changes["decode"], changes["step_rate"]
    tps = changes.get("tokens_per_step")
    # Tokens per step is the exact acceptance factor (D = S × tokens per step); it stands in
    # for MAL where steps without a draft make them differ, and where a side has no MAL at all
    # because it did not draft (speculation off: MAL 1 by definition, one token per step), so
    # the split is known, never "needs engine MAL".
    # With partial drafting on either side (a drafter that drafts only where it finds a match)
    # D = S × tokens per step holds and D = S × MAL does not: the split must be the one that
    # closes, so tokens per step is the factor then, labelled so (steps_are_the_factor).
    use_tps = (tps is not None and tps.baseline is not None and tps.current is not None
               and (steps_are_the_factor(b, c) or changes["mal"].status == "no_data"))
    m = tps if (use_tps and tps is not None) else changes["mal"]
    metric = "tokens per step" if use_tps else "MAL"
    if d.baseline is None or d.current is None:
        return None
    d_b, d_c = d.baseline, d.current
    log_d = math.log(d.current / d.baseline)
    log_m, log_s = _log(m.baseline, m.current), _log(s.baseline, s.current)
    basis = "per-unit geometric means"
    if log_m is None or log_s is None:
        # Pooled engine counts on both sides, all three factors from one statistic and one
        # source (the engine's pooled decode = pooled step rate × pooled tokens per step),
        # and the acceptance factor the split names (never MAL under a T label).
        key = "tokens_per_step" if use_tps else "mal"
        pm = _log(_pooled(b, key), _pooled(c, key))
        ps = _log(_pooled(b, "step_rate"), _pooled(c, "step_rate"))
        pd_b, pd_c = _pooled(b, "decode_rate_per_request"), _pooled(c, "decode_rate_per_request")
        if pm is not None and ps is not None:
            log_m, log_s, basis = pm, ps, "pooled engine counts"
            if pd_b and pd_c:
                d_b, d_c, log_d = pd_b, pd_c, math.log(pd_c / pd_b)
                basis += f" (engine decode {pd_b:.1f} → {pd_c:.1f} tok/s)"
    share_m = share_s = residual = None
    if log_m is not None and log_s is not None and abs(log_d) >= th.MIN_LOG_DELTA_FOR_SHARES:
        share_m, share_s = log_m / log_d, log_s / log_d
        residual = 1.0 - share_m - share_s
    parts = [(n, x) for n, x in ((metric, m), ("step rate", s)) if x.status != "no_data"]
    carried, why = carrier_why(d, parts)
    return Decomposition(d_b, d_c, log_d, log_s, log_m, share_m, share_s, residual,
                         basis, metric, carried, why)


def _pooled(side: Side, key: str) -> float | None:
    """The side's pooled engine count for key, else its median (a side without pools)."""
    v = (side.pooled or {}).get(key)
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    return side.median("engine_decode_rate" if key == "decode_rate_per_request" else key)


def _log(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or a <= 0 or b <= 0:
        return None
    return math.log(b / a)
