"""One summary type for every metric (n, mean, stdev, median, MAD, percentiles, min, max)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Summary:
    n: int
    mean: float
    stdev: float | None  # None with n < 2
    median: float
    mad: float  # median absolute deviation
    p5: float
    p95: float
    p99: float
    min: float
    max: float

    @classmethod
    def of(cls, values: Iterable[float | None]) -> Summary | None:
        """Summary of the non-None values; None when there are none ("no data")."""
        xs = sorted(float(v) for v in values if v is not None and not math.isnan(v))
        if not xs:
            return None
        med = statistics.median(xs)
        mean = math.fsum(xs) / len(xs)
        # fsum-based sample stdev: exact enough, and ~50x faster than statistics.stdev's fractions
        stdev = (math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (len(xs) - 1))
                 if len(xs) > 1 else None)
        return cls(
            n=len(xs),
            mean=mean,
            stdev=stdev,
            median=med,
            mad=statistics.median(abs(x - med) for x in xs),
            p5=percentile(xs, 5),
            p95=percentile(xs, 95),
            p99=percentile(xs, 99),
            min=xs[0],
            max=xs[-1],
        )

    @property
    def cv(self) -> float | None:
        """Coefficient of variation (stdev / mean)."""
        if self.stdev is None or self.mean == 0:
            return None
        return self.stdev / abs(self.mean)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def percentile(sorted_xs: list[float], q: float) -> float:
    """Linear-interpolated percentile of an already sorted, non-empty list."""
    if len(sorted_xs) == 1:
        return sorted_xs[0]
    pos = (len(sorted_xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)
