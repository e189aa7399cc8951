"""A sweep of one server: several calibers (the caliber matrix), or one caliber under several
loads (the throughput–latency curve). `decodescope sweep` parses its options, calls these and
renders what they return.

    caliber_sweep(...)     one probe per caliber; their Sides (verdict.matrix judges them)
    plan_load_sweep(...)   the load axis, its values and one derived caliber per point
    load_sweep(...)        one probe per load point; the stored runs and their goodput
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from decodescope.analysis.goodput import sweep_goodput
from decodescope.caliber.derive import derive_caliber
from decodescope.caliber.spec import Caliber
from decodescope.errors import UsageError
from decodescope.records.findings import Finding
from decodescope.records.stored_run import StoredRun
from decodescope.run.probe_side import ProbeOptions, probe_point, probe_side
from decodescope.store import runs as sr
from decodescope.store.db import Store
from decodescope.verdict.side import Side


def caliber_sweep(store: Store, url: str, cals: list[Caliber], opts: ProbeOptions, *,
                  announce: Callable[[str], None] | None = None,
                  warn: Callable[[Finding], None] | None = None) -> list[Side]:
    """One probe per caliber, labelled sweep=<the calibers>; their Sides in order."""
    opts.labels.setdefault("sweep", ",".join(c.ref for c in cals))
    sides = []
    for cal in cals:
        side, _missed = probe_side(store, url, cal, opts, announce=announce, warn=warn)
        sides.append(side)
    return sides


@dataclass(frozen=True)
class LoadPlan:
    """The points of a load sweep: the axis swept, its values, one caliber per value."""

    axis: str  # "concurrency" or "request_rate"
    values: list[float]
    calibers: list[Caliber]
    slo: bool  # goodput limits were given


def plan_load_sweep(cal: Caliber, concs: list[float], rates: list[float],
                    extra: dict[str, Any], slo: str | None = None) -> LoadPlan:
    """The sweep's axis, values and one derived caliber per point (with the goodput limits
    `slo`, as `probe --slo`, on every one)."""
    axis, values, cals = load_points(cal, concs, rates, extra)
    if slo is not None:
        from decodescope.caliber.slo import parse_slo

        limits = parse_slo(slo)
        cals = [dataclasses.replace(c, slo=limits) for c in cals]
    return LoadPlan(axis, values, cals, slo is not None)


def load_points(cal: Caliber, concs: list[float], rates: list[float],
                extra: dict[str, Any]) -> tuple[str, list[float], list[Caliber]]:
    """The sweep's axis, values and one derived caliber per point."""
    if concs and rates and len(concs) > 1:
        raise UsageError("sweep one load at a time: --concurrency and --request-rate are both "
                         "lists", where="sweep",
                         remedy="With --request-rate R,R,..., --concurrency takes one value "
                                "(the cap on requests in flight)")
    if rates:
        cap = int(concs[0]) if concs else None
        return "request_rate", rates, [derive_caliber(cal, concurrency=cap, request_rate=r, **extra)
                                       for r in rates]
    return "concurrency", concs, [derive_caliber(cal, concurrency=int(c), **extra)
                                  for c in concs]


@dataclass(frozen=True)
class LoadSweepRuns:
    """What a load sweep measured: one stored run per point, and the goodput per point (None
    without goodput limits)."""

    axis: str
    values: list[float]
    runs: list[StoredRun]
    goodput: dict[str, Any] | None


def load_sweep(store: Store, url: str, plan: LoadPlan, opts: ProbeOptions, *, tag: str,
               warmup: int = 1, slo_target: float = 0.99,
               on_created: Callable[[int], None] | None = None,
               announce: Callable[[str], None] | None = None,
               warn: Callable[[Finding], None] | None = None) -> LoadSweepRuns:
    """One probe per point of `plan`, labelled sweep=`tag`, load_axis and load=<value>;
    `on_created` names every run as it is created (what Ctrl-C keeps)."""
    opts.labels.setdefault("sweep", tag)
    opts.labels.setdefault("load_axis", plan.axis)
    runs: list[StoredRun] = []
    for v, cal in zip(plan.values, plan.calibers, strict=True):
        opts.labels["load"] = f"{v:g}"
        outcome = probe_point(store, url, cal, opts, warmup=warmup, what=f"{plan.axis} {v:g}",
                              on_created=on_created, announce=announce, warn=warn)
        runs.append(sr.get_run(store, outcome.run_id))
    good = sweep_goodput(plan.axis, plan.values, [(r.result or {}).get("goodput") for r in runs],
                         slo_target) if plan.slo else None
    return LoadSweepRuns(plan.axis, plan.values, runs, good)
