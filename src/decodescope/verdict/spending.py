"""Group-sequential boundaries from an alpha-spending function (Lan & DeMets 1983).

A test that looks K times at a growing sample (information fractions t₁ < … < t_K = 1) and
stops at the first look that crosses its boundary has a false-alarm rate above the per-look
level. Lan & DeMets (Biometrika 70:659–663, 1983) spend the overall α along the looks: the
chance of crossing for the first time at look k is α*(t_k) − α*(t_{k−1}), for a spending
function α* rising from 0 to α. The boundaries follow from the joint law of the standardised
statistics Z_k (Brownian motion: S_k = Z_k·√t_k has independent normal increments), computed
here by recursive numerical integration on a grid (Armitage, McPherson & Rowe 1969; Jennison &
Turnbull, *Group Sequential Methods*, 2000, ch. 19). Deterministic: no simulation.

Spending functions (Lan & DeMets 1983; Kim & DeMets 1987):

* "pocock":  α*(t) = α·ln(1 + (e − 1)·t) — nearly constant boundaries: early looks can stop;
* "obrien-fleming": α*(t) = s·(1 − Φ(z_{1−α/s}/√t)) for s sides — very strict early looks.

Each boundary c_k is turned into a nominal per-look significance level (two-sided
2·(1 − Φ(c_k)), one-sided 1 − Φ(c_k)); the A/B applies that level to the Student t interval of
its look (the significance-level approach for an estimated variance, Jennison & Turnbull
§11.4), since its pair sd is estimated, not known.

Pure: no I/O.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Literal

Spending = Literal["pocock", "obrien-fleming"]
SPENDINGS: tuple[str, ...] = ("pocock", "obrien-fleming")
_GRID = 601  # points per look's continuation region
_FAR = 10.0  # a one-sided region's open end, in sds of S_k


def spent(kind: str, alpha: float, t: float, sides: int) -> float:
    """α*(t): the error spent by information fraction t (0 ≤ t ≤ 1)."""
    from statistics import NormalDist

    if t <= 0.0:
        return 0.0
    t = min(t, 1.0)
    if kind == "pocock":
        return alpha * math.log(1.0 + (math.e - 1.0) * t)
    if kind == "obrien-fleming":
        z = NormalDist().inv_cdf(1.0 - alpha / sides)
        return sides * (1.0 - NormalDist().cdf(z / math.sqrt(t)))
    raise ValueError(f"unknown spending function {kind!r}: one of {', '.join(SPENDINGS)}")


@lru_cache(maxsize=64)
def boundaries(kind: str, alpha: float, fractions: tuple[float, ...],
               sides: int) -> tuple[float, ...]:
    """The z boundaries c_1 … c_K for looks at these information fractions: a two-sided test
    (sides=2) crosses when |Z_k| ≥ c_k, a one-sided one when Z_k ≥ c_k; the chance of a first
    crossing at look k under no effect is α*(t_k) − α*(t_{k−1})."""
    import numpy as np
    from scipy.optimize import brentq
    from scipy.special import ndtr  # the standard normal cdf, without scipy.stats' overhead

    def pdf(z: np.ndarray) -> np.ndarray:
        return np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)

    if sides not in (1, 2):
        raise ValueError("sides must be 1 or 2")
    if not fractions or any(b <= a for a, b in zip(fractions, fractions[1:], strict=False)) \
            or fractions[0] <= 0.0:
        raise ValueError("information fractions must be increasing and positive")
    out: list[float] = []
    grid: np.ndarray | None = None  # S values of the previous look's continuation region
    dens: np.ndarray | None = None  # the sub-density there (quadrature weights folded in)
    prev_t, prev_spent = 0.0, 0.0
    for t in fractions:
        target = spent(kind, alpha, t, sides) - prev_spent
        dt = t - prev_t
        sd = math.sqrt(dt)

        def crossing(c: float, t: float = t, sd: float = sd, grid: np.ndarray | None = grid,
                     dens: np.ndarray | None = dens) -> float:
            hi = c * math.sqrt(t)
            if grid is None or dens is None:
                return float(sides * ndtr(-c))
            p = ndtr((grid - hi) / sd)
            if sides == 2:
                p = p + ndtr((-hi - grid) / sd)
            return float(np.dot(dens, p))

        if target <= 1e-15 or crossing(12.0) >= target:
            c = 12.0
        else:
            c = float(brentq(lambda x, goal=target: crossing(x) - goal, 1e-6, 12.0, xtol=1e-7))
        out.append(c)
        hi = c * math.sqrt(t)
        lo = -hi if sides == 2 else -_FAR * math.sqrt(t)
        new = np.linspace(lo, hi, _GRID)
        w = np.full(_GRID, (hi - lo) / (_GRID - 1))
        w[0] = w[-1] = w[0] / 2.0  # trapezoid weights
        if grid is None or dens is None:
            f = pdf(new / sd) / sd
        else:
            f = pdf((new[:, None] - grid[None, :]) / sd).dot(dens) / sd
        grid, dens = new, f * w
        prev_t, prev_spent = t, prev_spent + target
    return tuple(out)


def nominal_levels(kind: str, alpha: float, fractions: tuple[float, ...],
                   sides: int) -> tuple[float, ...]:
    """Each look's nominal significance level (two-sided for sides=2, one-sided for 1)."""
    from statistics import NormalDist

    return tuple(sides * (1.0 - NormalDist().cdf(c))
                 for c in boundaries(kind, alpha, fractions, sides))
