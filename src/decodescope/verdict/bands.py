"""MAL bands: what content a measured mean acceptance length implies.

The seed's acceptance method, step 2: "mean acceptance length ≥ 4 ⇒ the content caliber
matches [a code task with long output]; 2.5–3 ⇒ it is ordinary text". Bands depend on the
stack's speculative method (MTP k=6 in the seed; n-gram on llama.cpp differs), so they are
configurable with a TOML file. Bands only mean something for the speculative method and k they
were measured with: MAL 3.8 is "between bands" for MTP k=6 but near the ceiling (k + 1 = 4) for
n-gram k=3. A file may say which stack its bands are for (top level, or per band); the
built-in bands are for MTP-like drafting (every step drafts) with k=6, and triage uses bands
only for a side whose method and k, as read from the log, fit them (`bands_fit`):

    method = "ngram"            # optional: ngram | suffix | mtp | eagle | ... (family match)
    k = 3                       # optional: number of speculative tokens

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
    method: str | None = None  # the speculative method the band was measured with; None: any
    k: int | None = None  # the number of speculative tokens; None: any

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
         "code task / long output: the seed's parity probe measured MAL 4.04–5.07", "mtp", 6),
    Band("ordinary text", 2.4, 3.2,
         "ordinary chat / long text: the seed measured MAL 2.48–3.14; low-100s tok/s is normal "
         "there", "mtp", 6),
    Band("high-entropy text", None, 2.4,
         "varied, high-entropy text or a weak draft: little is accepted", "mtp", 6),
)

# Speculative methods that draft only where they find a match (not every step drafts); every
# other method (MTP, EAGLE, a draft model, Medusa ...) drafts every step.
MODEL_FREE = ("ngram", "suffix", "prompt_lookup", "lookup")


def method_family(method: str | None) -> str | None:
    """"model-free" (n-gram, suffix: not every step drafts) | "every-step" | None (unknown)."""
    if not method:
        return None
    m = method.lower()
    return "model-free" if any(m.startswith(x) for x in MODEL_FREE) else "every-step"


def bands_fit(bands: Sequence[Band], method: str | None, k: int | None,
              every_step_drafts: bool | None) -> tuple[bool, str]:
    """(do these bands apply to a stack with this method and k?, why not / what they are for).

    Bands that declare no method and no k apply to any stack (the user chose them). A declared
    k must equal the side's k; a declared method must be of the side's family (read from the
    launch config, else from the draft coverage: every step drafts or not)."""
    declared = [b for b in bands if b.method is not None or b.k is not None]
    if not declared:
        return True, "bands for any stack"
    want = declared[0]
    what = f"{want.method or 'any method'}{f' k={want.k}' if want.k else ''}"
    if method == "off":
        return False, f"bands are for {what}; speculative decoding is off"
    fam = method_family(method)
    if fam is None and every_step_drafts is not None:
        fam = "every-step" if every_step_drafts else "model-free"
    if want.method is not None:
        if fam is None:
            return False, f"bands are for {what}; this stack's speculative method is not known"
        if fam != method_family(want.method):
            stack = method or ("drafts every step" if fam == "every-step" else
                               "not every step drafts")
            return False, f"bands are for {what}; this stack: {stack}"
    if want.k is not None:
        if k is None:
            return False, f"bands are for {what}; this stack's k is not known"
        if k != want.k:
            return False, f"bands are for {what}; this stack has k={k}"
    return True, f"bands for {what}"


def classify(mal: float | None, bands: Sequence[Band] = DEFAULT_BANDS) -> Band | None:
    """The first band containing mal; None when mal is None or falls between bands."""
    if mal is None:
        return None
    return next((b for b in bands if b.contains(mal)), None)


def content_band(mal: float | None, every_step_drafts: bool | None,
                 bands: Sequence[Band] = DEFAULT_BANDS) -> Band | None:
    """The band of a side's MAL — only for the quantity the bands were made for: MAL where
    every step drafts (coverage ≈ 1). A drafter that drafts only where it finds a match
    (n-gram, suffix, llama.cpp lookup) has MAL over its drafted steps only (5.00 on varied
    prose drafted on 12 % of steps): its content shows in tokens per step and the drafted
    share, and no MAL band applies (None) — unless the bands were made for such a drafter
    (a bands file that declares an n-gram-like method)."""
    made_for_partial = any(method_family(b.method) == "model-free" for b in bands if b.method)
    if every_step_drafts is False and not made_for_partial:
        return None
    return classify(mal, bands)


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
    top_method, top_k = _stack(data, "the file", where)
    raw = data.get("band")
    if not isinstance(raw, list) or not raw:
        raise UsageError("the bands file has no [[band]] tables", where=where,
                         remedy="Write one [[band]] table per band: name, min and/or max, meaning")
    bands = [_band(item, i, where, top_method, top_k) for i, item in enumerate(raw)]
    _check_overlap(bands, where)
    return tuple(bands)


def _stack(data: dict[str, Any], what: str, where: str) -> tuple[str | None, int | None]:
    method, k = data.get("method"), data.get("k")
    if method is not None and (not isinstance(method, str) or not method):
        raise UsageError(f"{what}: method must be a name such as \"ngram\" or \"mtp\"",
                         where=where, remedy='method = "ngram"')
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise UsageError(f"{what}: k must be a whole number ≥ 1", where=where, remedy="k = 3")
    return (method.lower() if isinstance(method, str) else None), k


def _band(item: Any, i: int, where: str, top_method: str | None = None,
          top_k: int | None = None) -> Band:
    if not isinstance(item, dict):
        raise UsageError(f"band {i + 1} is not a table", where=where, remedy="Use [[band]] tables")
    unknown = set(item) - {"name", "min", "max", "meaning", "method", "k"}
    if unknown:
        raise UsageError(f"band {i + 1}: unknown key(s) {', '.join(sorted(unknown))}", where=where,
                         remedy="Keys: name, min, max, meaning, method, k")
    method, k = _stack(item, f"band {i + 1}", where)
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
                float(hi) if hi is not None else None, str(meaning),
                method or top_method, k or top_k)


def _check_overlap(bands: list[Band], where: str) -> None:
    inf = float("inf")
    spans = sorted(((b.lo if b.lo is not None else -inf), (b.hi if b.hi is not None else inf), b.name)
                   for b in bands)
    for (_, hi1, n1), (lo2, _, n2) in zip(spans, spans[1:], strict=False):
        if lo2 < hi1:
            raise UsageError(f"bands {n1!r} and {n2!r} overlap", where=where,
                             remedy="Each MAL value may fall in one band only")
