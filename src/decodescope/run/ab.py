"""Interleaved A/B: probe two live endpoints alternately under one caliber, one trial at a time
(A B, B A, A B, …), and stop as soon as the sequential paired test decides (verdict/ab.py).

Each side is one stored run (label `ab=<session>`, `side=A|B`) whose trials are added as
they complete, so `decodescope triage` and `report` read them like any probe; Ctrl-C keeps
both runs with their completed trials, marked interrupted. The decision uses the client's
steady-state decode rate of each trial (known the moment the trial ends, and measured the
same way on both sides); engine numbers are read afterwards for the evidence (step rate ×
MAL split, fingerprint diff).
"""

from __future__ import annotations

import asyncio
import gc
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from decodescope.caliber.conformance import check_request
from decodescope.errors import UsageError
from decodescope.probe import client as cl
from decodescope.probe.load_shape import RequestBodies
from decodescope.probe.prompt import RealizedPrompt
from decodescope.probe.request import build_body, endpoint_path
from decodescope.records.findings import Finding
from decodescope.records.request_metrics import compute
from decodescope.run import runner
from decodescope.run.observer_protocol import Observer
from decodescope.run.runner import ProbeSettings, count_tokens, prepare
from decodescope.store import runs as store_runs
from decodescope.store.db import Store
from decodescope.telemetry.detect import EngineInfo
from decodescope.verdict.ab import Design, Look, step

SIDES = ("A", "B")


@dataclass
class Side:
    name: str  # "A" | "B"
    settings: ProbeSettings
    info: EngineInfo
    model: str | None
    prompt: RealizedPrompt
    run_id: int = 0
    observers: list[Observer] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    rates: list[float | None] = field(default_factory=list)  # client decode rate per trial
    sent: int = 0
    warm: bool = False


@dataclass
class ABOutcome:
    run_a: int
    run_b: int
    log_ratios: list[float]  # ln(B / A) per pair, in order
    orders: list[str]  # "AB" | "BA" per pair
    looks: list[Look]  # every look taken, in order
    design: Design
    stopped: str  # "decided" | "max pairs"
    seconds: float

    @property
    def last(self) -> Look | None:
        return self.looks[-1] if self.looks else None


Progress = Callable[[int, str, Look | None], None]  # (pairs so far, order, look or None)


def order_of(pair: int) -> str:
    """A B, B A, A B, …: a drift linear over two trials enters successive pairs with opposite
    signs."""
    return "AB" if pair % 2 == 0 else "BA"


def run_ab(a: ProbeSettings, b: ProbeSettings, store: Store, design: Design, *,
           labels: dict[str, str] | None = None, scrape: bool = True,
           fingerprints: tuple[dict[str, Any] | None, dict[str, Any] | None] = (None, None),
           progress: Progress | None = None,
           on_created: Callable[[int, int], None] | None = None) -> ABOutcome:
    if not (a.caliber.load.classic and b.caliber.load.classic):
        raise UsageError("an A/B alternates single trials: the caliber must be a closed-loop "
                         "one (no --request-rate / --num-requests / --duration)",
                         where="ab", remedy="Use a caliber without a load shape")
    sides = []
    for name, s in zip(SIDES, (a, b), strict=True):
        info, model, prompt = prepare(s)
        sides.append(Side(name, s, info, model, prompt))
    session = time.strftime("%Y%m%dT%H%M%S")
    for sd, f, other in zip(sides, fingerprints, ("B", "A"), strict=True):
        cal = sd.settings.caliber
        sd.run_id = store_runs.create_run(
            store, url=runner._safe_url(sd.settings.url), model=sd.model, engine=sd.info.kind,
            caliber=cal.to_dict(), caliber_ref=cal.ref, caliber_identity=cal.identity,
            labels={**(labels or {}), "ab": session, "side": sd.name},
            simulated=sd.info.simulated, fingerprint=f,
            meta={"engine_info": sd.info.to_dict(), "prompt": sd.prompt.to_dict(),
                  "trials": design.max_pairs, "concurrency": cal.concurrency,
                  "warmup": sd.settings.warmup, "seed_schedule": runner.seed_schedule(cal),
                  "ab": {"session": session, "side": sd.name, "other_side": other,
                         "design": design.describe()}})
    if on_created is not None:
        on_created(sides[0].run_id, sides[1].run_id)
    if scrape:
        from decodescope.run.setup import build_observers

        for sd in sides:
            sd.observers = build_observers(sd.settings, sd.info, log_path=None, scrape=True,
                                           scrape_interval_s=0.25)
    for sd in sides:
        for ob in sd.observers:
            ob.start()
    status = "running"
    t0 = time.monotonic()
    out = ABOutcome(sides[0].run_id, sides[1].run_id, [], [], [], design, "max pairs", 0.0)
    gc.collect()
    gc.freeze()
    try:
        asyncio.run(_pairs(sides, store, design, out, progress))
        status = "complete"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    except BaseException:
        status = "failed"
        raise
    finally:
        gc.unfreeze()
        out.seconds = time.monotonic() - t0
        for sd in sides:
            runner._finish(store, sd.run_id, status, sd.observers, sd.findings)
    return out


async def _pairs(sides: list[Side], store: Store, design: Design, out: ABOutcome,
                 progress: Progress | None) -> None:
    by = {s.name: s for s in sides}
    conc = max(s.settings.caliber.concurrency for s in sides)
    async with cl.make_client(sides[0].settings.proxy, max_connections=max(8, conc)) as client:
        for pair in range(design.max_pairs):
            order = order_of(pair)
            for name in order:
                await _trial(client, by[name], store, pair)
            ra, rb = by["A"].rates[-1], by["B"].rates[-1]
            if ra is None or rb is None or ra <= 0 or rb <= 0:
                raise UsageError(f"pair {pair + 1}: no decode rate on side "
                                 f"{'A' if not ra else 'B'} (an output too short for its "
                                 "steady state?)", where="ab",
                                 remedy="Use a caliber whose output passes its steady-state "
                                        "start")
            out.log_ratios.append(math.log(rb) - math.log(ra))
            out.orders.append(order)
            lk = step(out.log_ratios, design)
            if lk is not None:
                out.looks.append(lk)
            if progress is not None:
                progress(len(out.log_ratios), order, lk)
            if lk is not None and lk.decision != "continue":
                out.stopped = "decided" if lk.decision in ("change", "equivalent") else \
                    "max pairs"
                return


async def _trial(client: Any, sd: Side, store: Store, idx: int) -> None:
    """One trial on one side, stored in that side's run as it completes (the runner's trial,
    for a closed-loop caliber)."""
    s, cal = sd.settings, sd.settings.caliber
    bodies = RequestBodies(cal, build_body(cal, sd.model, sd.prompt.text), sd.model)
    path = endpoint_path(cal)
    if not sd.warm:
        for w in range(s.warmup):
            warm = await cl.stream_request(client, s.url, path, bodies.warmup(w),
                                           api_key=s.api_key)
            if not warm.ok:
                break
        sd.warm = True
    for ob in sd.observers:
        plan = getattr(ob, "plan", None)
        if plan is not None:
            plan(idx, None)
    started = time.time()
    anchor = time.time() - time.perf_counter()
    for ob in sd.observers:
        ob.mark(f"trial_start:{idx}", time.perf_counter())
    first = sd.sent
    traces = list(await asyncio.gather(*[
        cl.stream_request(client, s.url, path, bodies.body(first + j), api_key=s.api_key)
        for j in range(cal.concurrency)]))
    sd.sent += len(traces)
    for ob in sd.observers:
        ob.mark(f"trial_end:{idx}", time.perf_counter())
    traces = count_tokens(traces, s, sd.model)
    per_req = [compute(t, cal.output.steady_state_start) for t in traces]
    failed = next((t for t in traces if not t.ok), None)
    found: list[Finding] = []
    for i, m in enumerate(per_req):
        if traces[i].ok:
            found += check_request(cal, m, f"trial {idx + 1}, request {i + 1}")
    sd.findings.extend(found)
    store_runs.add_trial(store, sd.run_id, idx, status="failed" if failed else "ok",
                         started_at=started, wall_anchor_s=anchor,
                         result={"requests": [m.to_dict() for m in per_req],
                                 "findings": [f.to_dict() for f in found]},
                         requests=traces)
    if failed is not None:
        cl.raise_for_trace(failed)
    rates = [m.decode_rate for m in per_req if m.decode_rate is not None and m.decode_rate > 0]
    sd.rates.append(math.exp(statistics.fmean(math.log(r) for r in rates)) if rates else None)
