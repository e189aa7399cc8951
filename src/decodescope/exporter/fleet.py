"""The fleet rule: when most of a fleet moves together, it is the environment (pure).

Each check is judged against its own anchor's runs (verdict/anchor.py). When most of the
fleet's comparable checks — at least FLEET_MIN_CHECKS of them, and at least half — moved the
same direction beyond noise, and no control check (`control = true`: a reference endpoint kept
unchanged) says otherwise, the common cause is the probing host, the network or the time of
day, not N regressions: one fleet-wide finding ("N of M endpoints moved together ..."), and
the checks that moved with the fleet get the status ENVIRONMENT (exit 3: not comparable this
round), no per-endpoint alarm.

A check that moved *beyond* the fleet keeps its own verdict: its interval lies beyond the
fleet's shift (the movers' median change) by more than the larger of the minimum effect and
twice the movers' own scatter (1.4826 × MAD of their log changes). One endpoint 15 % slower
inside a fleet that slowed 5 % together still alarms.

"The fleet" is the latest fresh result of each check (one `--once` round; on a schedule, the
results not yet stale).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from decodescope.exporter.outcome import Outcome
from decodescope.verdict import thresholds as th

FLEET_MIN_CHECKS = 4  # fewer comparable checks: a fleet too small to tell the environment
FLEET_SHARE = 0.5  # at least this share of them moving one direction together
ENVIRONMENT = "ENVIRONMENT"
ENVIRONMENT_EXIT = 3  # not comparable this round, as CONTAMINATED (the host's load is foreign)
# the statuses of a comparable check: the judge had both sides
COMPARABLE = ("OK", "BELOW_FLOOR", "BELOW_BAND", "ABOVE_BAND")


@dataclass(frozen=True)
class FleetFinding:
    judged: int  # comparable checks with a judged change (M)
    direction: str | None = None  # "down" | "up": the fleet moved together; None: it did not
    moved: tuple[str, ...] = ()  # the checks that moved that way beyond noise (N)
    shift: float | None = None  # the movers' median relative change
    scatter: float | None = None  # their robust sd (log scale)
    environment: tuple[str, ...] = ()  # moved with the fleet: ENVIRONMENT, no alarm
    beyond: tuple[str, ...] = ()  # moved beyond the fleet: their own verdict stands
    controls_still: tuple[str, ...] = ()  # controls that did not move: no environment finding
    counts: Mapping[str, int] = field(default_factory=dict)  # "down"/"up" -> movers

    @property
    def is_environment(self) -> bool:
        return bool(self.environment)

    def text(self) -> str:
        n, m = len(self.moved), self.judged
        if self.direction is None:
            if m < FLEET_MIN_CHECKS:
                return (f"fleet: {m} comparable check(s), fewer than {FLEET_MIN_CHECKS}: no "
                        "fleet-wide finding; each check stands on its own")
            return (f"fleet: no common movement ({self.counts.get('down', 0)} down, "
                    f"{self.counts.get('up', 0)} up beyond noise of {m}); each check stands on "
                    "its own")
        way = "slower" if self.direction == "down" else "faster"
        shift = f"{100 * (self.shift or 0.0):+.1f} %"
        if self.controls_still:
            return (f"fleet: {n} of {m} endpoints moved {way} together (median {shift}), but "
                    f"control(s) {', '.join(self.controls_still)} did not: not the "
                    "environment; each check stands on its own")
        text = (f"fleet: {n} of {m} endpoints moved {way} together (median {shift}): the probing "
                f"host, network or time of day, not {n} "
                f"{'regressions' if self.direction == 'down' else 'improvements'}; "
                f"{len(self.environment)} reported as {ENVIRONMENT}, no alarm "
                f"({_names(self.environment)})")
        if self.beyond:
            text += (f"; beyond the fleet's shift, judged on their own: "
                     f"{', '.join(self.beyond)}")
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"judged": self.judged, "direction": self.direction, "moved": list(self.moved),
                "shift": self.shift, "scatter": self.scatter,
                "environment": list(self.environment), "beyond": list(self.beyond),
                "controls_still": list(self.controls_still), "counts": dict(self.counts),
                "text": self.text()}


def _names(names: tuple[str, ...], most: int = 8) -> str:
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def _log(x: float) -> float:
    return math.log1p(x)


def fleet_finding(outcomes: Mapping[str, Outcome],
                  controls: frozenset[str] | set[str] = frozenset()) -> FleetFinding:
    """The fleet-wide finding over each check's latest fresh outcome (name -> Outcome)."""
    comp = {n: o for n, o in outcomes.items()
            if o.ok and o.verdict in COMPARABLE and o.change is not None}
    m = len(comp)
    counts = {d: sum(1 for o in comp.values() if o.moved == d) for d in ("down", "up")}
    if m < FLEET_MIN_CHECKS:
        return FleetFinding(m, counts=counts)
    direction = max(("down", "up"), key=lambda d: counts[d])
    movers = sorted(n for n, o in comp.items() if o.moved == direction)
    if counts[direction] < FLEET_SHARE * m or len(movers) < 2:
        return FleetFinding(m, counts=counts)
    logs = [_log(comp[n].change or 0.0) for n in movers]
    centre = statistics.median(logs)
    shift = math.expm1(centre)
    scatter = 1.4826 * statistics.median([abs(x - centre) for x in logs])
    still = []
    for n in sorted(controls & set(comp)):
        o = comp[n]
        if o.moved != direction and o.change_lo is not None and o.change_hi is not None \
                and not o.change_lo <= shift <= o.change_hi:
            still.append(n)
    if still:
        return FleetFinding(m, direction, tuple(movers), shift, scatter,
                            controls_still=tuple(still), counts=counts)
    tol = max(_log(th.MIN_EFFECT), 2.0 * scatter)
    env: list[str] = []
    beyond: list[str] = []
    for n in movers:
        o = comp[n]
        if direction == "down":
            far = o.change_hi is not None and _log(o.change_hi) < centre - tol
        else:
            far = o.change_lo is not None and _log(o.change_lo) > centre + tol
        (beyond if far else env).append(n)
    return FleetFinding(m, direction, tuple(movers), shift, scatter, tuple(env), tuple(beyond),
                        counts=counts)


def as_reported(o: Outcome, name: str, finding: FleetFinding) -> Outcome:
    """The outcome as the fleet reports it: ENVIRONMENT (exit 3) when it moved with the fleet."""
    if name not in finding.environment:
        return o
    head = (f"{ENVIRONMENT} — moved with the fleet ({finding.text()}); this check alone said: "
            f"{o.headline or o.verdict}")
    return replace(o, verdict=ENVIRONMENT, exit_code=ENVIRONMENT_EXIT, headline=head)
