"""A reported quantity: one number as every output shows it, with what it is.

Built once where the number is computed (analysis for a run, the verdict for a comparison);
the terminal, JSON, Markdown and HTML renderers render these records and never recompute.
Two outputs that show the same quantity show the same record, so the same statistic and the
same number (docs/methodology.md, "Reported quantities").

    Quantity("decode rate", 812.4, "tok/s", "median over trials", 3, "trials", "engine")
    .text()  -> "812.4 tok/s (engine, median over 3 trials)"
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

Source = Literal["client", "engine", "log"]
# The statistics a quantity may be; docs/methodology.md says why each is used where it is.
MEDIAN = "median over trials"  # a run's number: robust to one odd trial
GEOMEAN = "geometric mean"  # a comparison side: the statistic the change's percent compares
POOLED = "pooled counts"  # sums of the engine's counters over the windows (no per-unit value)
STATISTICS = (MEDIAN, GEOMEAN, POOLED)


@dataclass(frozen=True)
class Quantity:
    name: str  # glossary word: "decode rate", "step rate", "MAL", "tokens per step"
    value: float | None  # None: no data, or withheld (see `withheld`)
    unit: str  # "tok/s", "steps/s", "tokens/step", "" (MAL is a count ratio)
    statistic: str  # one of STATISTICS
    n: int  # the basis: how many `basis` units the statistic is taken over (0: none)
    basis: str  # "trials" | "windows" | "window blocks" | "engine windows"
    source: Source | None  # who measured it
    interval: tuple[float, float] | None = None  # 95% CI of the value, when one is computed
    withheld: str | None = None  # why there is no value although there are measurements
    digits: int = 1

    def __post_init__(self) -> None:
        if self.statistic not in STATISTICS:
            raise ValueError(f"Quantity.statistic must be one of {STATISTICS}, "
                             f"not {self.statistic!r}")

    def number(self) -> str:
        """The value alone, as every renderer prints it ('812.4'; '—' for none)."""
        return "—" if self.value is None else f"{self.value:.{self.digits}f}"

    def basis_text(self) -> str:
        """'median over 3 trials', 'geometric mean of 4 trials', 'pooled counts of 6 engine
        windows'."""
        if self.statistic == MEDIAN:
            return f"median over {self.n} {self.basis}"
        if self.statistic == GEOMEAN:
            return f"geometric mean of {self.n} {self.basis}"
        return f"pooled counts of {self.n} {self.basis}" if self.n else "pooled counts"

    def text(self) -> str:
        """'812.4 tok/s (engine, median over 3 trials)'; '—' with the reason when withheld."""
        if self.value is None:
            return f"— ({self.withheld})" if self.withheld else "—"
        unit = f" {self.unit}" if self.unit else ""
        src = f"{self.source}, " if self.source else ""
        return f"{self.number()}{unit} ({src}{self.basis_text()})"

    def cell(self) -> str:
        """The value in a table whose column names the source: '812.4 tok/s median (n=3)',
        '4.10 (pooled counts of 6 engine windows)', '— (why withheld)'."""
        if self.value is None:
            return f"— ({self.withheld})" if self.withheld else "—"
        unit = f" {self.unit}" if self.unit else ""
        if self.statistic == MEDIAN:
            return f"{self.number()}{unit} median (n={self.n})"
        if self.statistic == GEOMEAN:
            return f"{self.number()}{unit} geomean (n={self.n})"
        return f"{self.number()}{unit} ({self.basis_text()})"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["interval"] = list(self.interval) if self.interval else None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Quantity:
        iv = d.get("interval")
        return cls(name=d["name"], value=d.get("value"), unit=d.get("unit", ""),
                   statistic=d["statistic"], n=int(d.get("n") or 0),
                   basis=d.get("basis", "trials"), source=d.get("source"),
                   interval=(float(iv[0]), float(iv[1])) if iv else None,
                   withheld=d.get("withheld"), digits=int(d.get("digits", 1)))
