"""The caliber matrix of a sweep: decode rate, MAL and step rate per caliber on one server, and
how much the headline number moves with the caliber alone (pure)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from decodescope.verdict.bands import DEFAULT_BANDS, Band, content_band
from decodescope.verdict.rate_change import share
from decodescope.verdict.side import Side


@dataclass(frozen=True)
class MatrixRow:
    caliber_ref: str
    caliber_identity: str | None
    run_ids: tuple[int, ...]
    decode_rate: float | None  # median per trial; engine when present
    decode_source: str  # "engine" | "client" | "none"
    mal: float | None
    step_rate: float | None
    band: str | None
    trials: int


@dataclass(frozen=True)
class Matrix:
    rows: tuple[MatrixRow, ...]
    spread: float | None  # fastest / slowest decode rate
    fastest: str | None
    slowest: str | None
    share_mal: float | None  # of ln(D_fast / D_slow)
    share_step: float | None
    simulated: bool = False
    # the acceptance factor of the split: MAL, or tokens per step where the calibers have no
    # MAL because the server does not draft (speculation off: one token per step)
    acceptance_metric: str = "MAL"

    @property
    def summary(self) -> str:
        if self.spread is None:
            return "fewer than two calibers with a decode rate: no spread"
        text = (f"headline number varies {self.spread:.1f}x with caliber "
                f"({self.slowest} → {self.fastest})")
        if self.share_mal is not None and self.share_step is not None:
            text += (f"; {self.acceptance_metric} explains {share(self.share_mal)}, step rate "
                     f"{share(self.share_step)}")
        else:
            text += "; split unknown (no engine MAL or tokens per step / step rate)"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"rows": [asdict(r) for r in self.rows], "spread": self.spread,
                "fastest": self.fastest, "slowest": self.slowest, "share_mal": self.share_mal,
                "share_step": self.share_step, "summary": self.summary,
                "simulated": self.simulated, "acceptance_metric": self.acceptance_metric}


def _row(side: Side, bands: Sequence[Band]) -> MatrixRow:
    eng = side.median("engine_decode_rate") if side.values("engine_decode_rate") else None
    cli = side.median("decode_rate")
    decode, src = (eng, "engine") if eng is not None else ((cli, "client") if cli is not None
                                                           else (None, "none"))
    mal = side.median("mal")
    band = content_band(mal, side.drafts_every_step, bands)  # none for n-gram-like drafting
    return MatrixRow(side.caliber_ref or side.name, side.caliber_identity, side.run_ids, decode,
                     src, mal, side.median("step_rate"), band.name if band else None,
                     len(side.units))


def caliber_matrix(sides: Sequence[Side], bands: Sequence[Band] = DEFAULT_BANDS) -> Matrix:
    rows = tuple(_row(s, bands) for s in sides)
    rated = [r for r in rows if r.decode_rate]
    sim = any(s.simulated for s in sides)
    if len(rated) < 2:
        return Matrix(rows, None, None, None, None, None, sim)
    fast = max(rated, key=lambda r: r.decode_rate or 0.0)
    slow = min(rated, key=lambda r: r.decode_rate or 0.0)
    spread = (fast.decode_rate or 0.0) / (slow.decode_rate or 1.0)
    share_m = share_s = None
    ln_d = math.log(spread)
    tps = {id(r): s.median("tokens_per_step") for r, s in zip(rows, sides, strict=True)}
    fa, sa, metric = fast.mal, slow.mal, "MAL"
    if not (fa and sa) and tps[id(fast)] and tps[id(slow)]:
        fa, sa, metric = tps[id(fast)], tps[id(slow)], "tokens per step"
    if ln_d > 0 and fa and sa and fast.step_rate and slow.step_rate:
        share_m = math.log(fa / sa) / ln_d
        share_s = math.log(fast.step_rate / slow.step_rate) / ln_d
    return Matrix(rows, spread, fast.caliber_ref, slow.caliber_ref, share_m, share_s, sim,
                  metric)


def render_matrix(m: Matrix) -> str:
    head = f"{'caliber':<28}{'decode tok/s':>14}  {'source':<7}{'MAL':>6}  {'band':<18}{'step rate':>10}{'trials':>8}"
    lines = [m.summary + (" [SIMULATED]" if m.simulated else ""), "", head]
    for r in m.rows:
        lines.append(f"{r.caliber_ref:<28}{_f(r.decode_rate):>14}  {r.decode_source:<7}"
                     f"{_f(r.mal, '{:.2f}'):>6}  {(r.band or '—'):<18}{_f(r.step_rate):>10}"
                     f"{r.trials:>8}")
    return "\n".join(lines)


def _f(v: float | None, fmt: str = "{:.1f}") -> str:
    return "—" if v is None else fmt.format(v)
