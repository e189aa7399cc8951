"""MAL bands: what content a measured mean acceptance length implies.

The seed's acceptance method, step 2: "mean acceptance length ≥ 4 ⇒ the content caliber
matches [a code task with long output]; 2.5–3 ⇒ it is ordinary text". Bands depend on the
stack's speculative method (MTP k=6 in the seed; n-gram on llama.cpp differs), so they are
configurable with a TOML file:

    [[band]]
    name = "code-like"          # short class name, printed beside the MAL
    min = 4.0                   # inclusive; omit for no lower bound
    # max = ...                 # exclusive; omit for no upper bound
    meaning = "code task, long output: the seed's parity probe measured 4.04–5.07"
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from decodescope.errors import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@dataclass(frozen=True)
class Band:
    name: str
    lo: float | None  # inclusive
    hi: float | None  # exclusive
    meaning: str = ""

    def contains(self, mal: float) -> bool:
        return (self.lo is None or mal >= self.lo) and (self.hi is None or mal < self.hi)

    @property
    def range_text(self) -> str:
        if self.lo is not None and self.hi is not None:
            return f"{self.lo:g}–{self.hi:g}"
        if self.lo is not None:
            return f"≥ {self.lo:g}"
        if self.hi is not None:
            return f"< {self.hi:g}"
        return "any"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# The seed's ordinary-text band is "2.5–3", but its own ordinary-text measurements read
# 2.48 (A/B c1 out1280), 2.62–3.14 (tonight) and 2.8–3.1 (chat samples): the default band is
# widened to 2.4–3.2 so the seed's own numbers fall inside it. The gap 3.2–4 is unclassified.
DEFAULT_BANDS: tuple[Band, ...] = (
    Band("code-like", 4.0, None,
         "code task / long output: the seed's parity probe measured MAL 4.04–5.07"),
    Band("ordinary text", 2.4, 3.2,
         "ordinary chat / long text: the seed measured MAL 2.48–3.14; low-100s tok/s is normal there"),
    Band("high-entropy text", None, 2.4,
         "varied, high-entropy text or a weak draft: little is accepted"),
)


def classify(mal: float | None, bands: Sequence[Band] = DEFAULT_BANDS) -> Band | None:
    """The first band containing mal; None when mal is None or falls between bands."""
    if mal is None:
        return None
    return next((b for b in bands if b.contains(mal)), None)


def describe(mal: float | None, bands: Sequence[Band] = DEFAULT_BANDS) -> str:
    """'4.52 (code-like, ≥ 4)' or '3.60 (between bands)'."""
    if mal is None:
        return "— (no engine MAL)"
    band = classify(mal, bands)
    if band is None:
        return f"{mal:.2f} (between bands)"
    return f"{mal:.2f} ({band.name}, {band.range_text})"


def load_bands(path: str | Path) -> tuple[Band, ...]:
    where = str(path)
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read the bands file: {exc.strerror or exc}", where=where,
                         remedy="Pass an existing TOML file to --bands") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"the bands file is not valid TOML: {exc}", where=where,
                         remedy="See docs/methodology.md (MAL bands) for the format") from None
    raw = data.get("band")
    if not isinstance(raw, list) or not raw:
        raise UsageError("the bands file has no [[band]] tables", where=where,
                         remedy="Write one [[band]] table per band: name, min and/or max, meaning")
    bands = [_band(item, i, where) for i, item in enumerate(raw)]
    _check_overlap(bands, where)
    return tuple(bands)


def _band(item: Any, i: int, where: str) -> Band:
    if not isinstance(item, dict):
        raise UsageError(f"band {i + 1} is not a table", where=where, remedy="Use [[band]] tables")
    unknown = set(item) - {"name", "min", "max", "meaning"}
    if unknown:
        raise UsageError(f"band {i + 1}: unknown key(s) {', '.join(sorted(unknown))}", where=where,
                         remedy="Keys: name, min, max, meaning")
    name = item.get("name")
    lo, hi = item.get("min"), item.get("max")
    if not isinstance(name, str) or not name:
        raise UsageError(f"band {i + 1} needs a name", where=where, remedy='name = "code-like"')
    for key, v in (("min", lo), ("max", hi)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise UsageError(f"band {name!r}: {key} must be a number", where=where,
                             remedy="MAL values are numbers such as 2.5")
    if lo is None and hi is None:
        raise UsageError(f"band {name!r} needs min and/or max", where=where,
                         remedy="min is inclusive, max exclusive")
    if lo is not None and hi is not None and lo >= hi:
        raise UsageError(f"band {name!r}: min {lo} is not below max {hi}", where=where,
                         remedy="min is inclusive, max exclusive")
    meaning = item.get("meaning", "")
    return Band(name, float(lo) if lo is not None else None,
                float(hi) if hi is not None else None, str(meaning))


def _check_overlap(bands: list[Band], where: str) -> None:
    inf = float("inf")
    spans = sorted(((b.lo if b.lo is not None else -inf), (b.hi if b.hi is not None else inf), b.name)
                   for b in bands)
    for (_, hi1, n1), (lo2, _, n2) in zip(spans, spans[1:], strict=False):
        if lo2 < hi1:
            raise UsageError(f"bands {n1!r} and {n2!r} overlap", where=where,
                             remedy="Each MAL value may fall in one band only")
