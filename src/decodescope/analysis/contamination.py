"""Foreign load: the engine saw more requests than the probe had in flight (glossary:
CONTAMINATED). Such windows are flagged "contaminated"; the run gets a Finding.

Occupancy = running + waiting requests as the engine reports them. The probe's own requests
never exceed its concurrency (queued ones are still ours), so occupancy above it is someone
else's load.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from decodescope.records.findings import Finding
from decodescope.records.window import EngineWindow

# One gauge reading above the in-flight count can be our own previous request whose
# finish the engine has not yet counted (stats lag one step); a window is contaminated
# only when its mean occupancy is more than half a request above, i.e. both ends agree.
CONTAMINATION_MARGIN = 0.5

Span = Sequence[float]  # [t_start_s, t_end_s], epoch seconds


def occupancy(w: EngineWindow) -> float | None:
    if w.running is None:
        return None
    return w.running + (w.waiting or 0.0)


def overlaps(w: EngineWindow, spans: Sequence[Span]) -> bool:
    """Does the window overlap any span? (True when the window or spans have no times.)"""
    if not spans or w.t_start_s is None or w.t_end_s is None:
        return True
    return any(w.t_start_s < s[1] and w.t_end_s > s[0] for s in spans)


def is_contaminated(w: EngineWindow, in_flight: int) -> bool:
    occ = occupancy(w)
    return occ is not None and occ > in_flight + CONTAMINATION_MARGIN


def flag_contaminated(windows: list[EngineWindow], in_flight: int,
                      spans: Sequence[Span] = ()) -> list[EngineWindow]:
    """Windows during the probe's trials whose occupancy exceeds in_flight get the flag."""
    out = []
    for w in windows:
        if ("contaminated" not in w.flags and overlaps(w, spans)
                and is_contaminated(w, in_flight)):
            w = dataclasses.replace(w, flags=(*w.flags, "contaminated"))
        out.append(w)
    return out


def contamination(windows: Sequence[EngineWindow], in_flight: int | None,
                  spans: Sequence[Span] = ()) -> tuple[dict[str, Any] | None, Finding | None]:
    """result["contamination"] and its Finding (None when contaminated windows are absent)."""
    if in_flight is None:
        return None, None
    seen = [w for w in windows if overlaps(w, spans) and occupancy(w) is not None]
    if not seen:
        return None, None
    flagged = [w for w in seen if "contaminated" in w.flags or is_contaminated(w, in_flight)]
    max_occ = max(occupancy(w) or 0.0 for w in seen)
    summary = {"flagged": bool(flagged), "windows": len(flagged), "of_windows": len(seen),
               "max_running": round(max_occ, 2), "in_flight": in_flight,
               "sources": sorted({w.source for w in flagged})}
    if not flagged:
        return summary, None
    finding = Finding(
        "contamination",
        f"the engine had up to {max_occ:.1f} requests running or queued while the probe had "
        f"{in_flight} in flight ({len(flagged)} of {len(seen)} windows): foreign load",
        "Measure on an idle engine (or a dedicated replica); the per-request numbers of "
        "these windows describe a larger batch than the caliber's",
        context=", ".join(sorted({w.source for w in flagged})))
    return summary, finding
