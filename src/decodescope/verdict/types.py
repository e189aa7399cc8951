"""Value types shared by the verdict modules (triage, wording, evidence chain)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from decodescope.verdict.bands import Band
from decodescope.verdict.rate_change import Decomposition
from decodescope.verdict.side import Side, steps_are_the_factor
from decodescope.verdict.stats import Change

VerdictKind = Literal["CALIBER_MISMATCH", "REGRESSION", "IMPROVEMENT", "NO_CHANGE",
                      "CONTAMINATED", "INCONCLUSIVE"]
KINDS: tuple[VerdictKind, ...] = ("CALIBER_MISMATCH", "REGRESSION", "IMPROVEMENT", "NO_CHANGE",
                                  "CONTAMINATED", "INCONCLUSIVE")


@dataclass(frozen=True)
class CaliberRow:
    element: str
    baseline: str
    current: str

    @property
    def same(self) -> bool:
        return self.baseline == self.current


@dataclass(frozen=True)
class CaliberComparison:
    same: bool | None  # None: unknown (a log side) and nothing says they differ
    text: str  # the answer to "same caliber?"
    rows: tuple[CaliberRow, ...] = ()  # element by element, when both calibers are known


@dataclass(frozen=True)
class Context:
    """What the wording and evidence helpers need to phrase a decided verdict."""

    kind: VerdictKind
    cause: str | None
    baseline: Side
    current: Side
    changes: dict[str, Change]
    decomposition: Decomposition | None
    caliber: CaliberComparison
    bands: tuple[Band | None, Band | None]
    decode_source: str
    min_effect: float
    trials_needed: int | None
    band_table: Sequence[Band]


def acceptance(ch: dict[str, Change], b: Side, c: Side) -> Change:
    """The acceptance factor of the identity: MAL, or tokens per step when steps without a
    draft (n-gram) make the two differ on a side, or one side does not draft at all, and both
    sides have it."""
    tps = ch.get("tokens_per_step")
    if tps is not None and tps.status != "no_data" and steps_are_the_factor(b, c):
        return tps
    return ch["mal"]


def changed_word(x: Change) -> str:
    """'yes: −12.0% (95% CI …): beyond noise' / 'no: …: not significant' / 'unknown: …'."""
    if x.status == "no_data":
        return "unknown: " + x.describe()
    if x.status == "undecidable":
        return "undecided: " + x.describe()
    return ("yes: " if x.changed else "no: ") + x.describe()


def fmt_num(v: float | None, digits: int = 2) -> str:
    """A number as a person reads it: whole numbers bare ('1'), others to `digits` decimals
    ('0.80', never '0.804844'); '—' for no value."""
    if v is None:
        return "—"
    if abs(v - round(v)) < 1e-9:
        return str(int(round(v)))
    return f"{v:.{digits}f}"
