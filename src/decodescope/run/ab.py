"""Interleaved A/B: probe two live endpoints alternately under one caliber, one trial at a time
(A B, B A, A B, …), and stop as soon as the sequential paired test decides (verdict/paired_test.py).

Each side is one stored run (label `ab=<session>`, `side=A|B`) whose trials are added as
they complete, so `decodescope triage` and `report` read them like any probe; Ctrl-C keeps
both runs with their completed trials, marked interrupted. The decision uses the client's
steady-state decode rate of each trial (known the moment the trial ends, and measured the
same way on both sides); engine numbers are read afterwards for the evidence (step rate ×
MAL split, fingerprint diff).

The rules before the statistics apply per pair: a trial whose engine saw foreign load (the
scraped occupancy, analysis.contamination), that missed its caliber (caliber.conformance) or
that stalled (pauses inside its outputs, records.request_metrics) is named, stored with status
"retaken" (never pooled) and its pair taken again — at most AB_RETAKE_SHARE × max pairs times.
A cause that persists (an arm with no clean trial after AB_RETAKES_MIN flagged ones, or the
budget spent) decides per arm through verdict.decide.premises: CONTAMINATED, or INCONCLUSIVE
(caliber missed); stalls that persist are kept (they are the stack's) and said.
"""

from __future__ import annotations

import asyncio
import gc
import math
import statistics
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from decodescope.analysis.run_result import RETAKEN
from decodescope.caliber.conformance import check_request
from decodescope.engines.launch import LaunchCommand, Launched, launched
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
from decodescope.verdict import thresholds as th
from decodescope.verdict.paired_test import Arm, Design, Look, Retake, step, step_starts

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
    trials: int = 0  # trials taken (re-taken ones included): the next trial's index
    clean: int = 0  # trials without a flag
    flagged: dict[str, int] = field(default_factory=dict)  # reason -> trials in a row
    stall_floor: float = th.MIN_EFFECT  # stalls flag a trial from this share of its steady state
    retaken_idx: dict[str, list[int]] = field(default_factory=dict)  # reason -> trials stored
    # as "retaken"
    pending_findings: list[Finding] = field(default_factory=list)  # of re-taken trials
    server: dict[str, Any] | None = None  # the process of this start (--launch): pid, port


@dataclass
class ABOutcome:
    run_a: int
    run_b: int
    log_ratios: list[float]  # ln(B / A) per pair, in order
    orders: list[str]  # "AB" | "BA" per pair
    looks: list[Look]  # every look taken, in order
    design: Design
    stopped: str  # "decided" | "max pairs" | "premise"
    seconds: float
    retaken: list[Retake] = field(default_factory=list)
    arms: tuple[Arm, Arm] = (Arm("A"), Arm("B"))
    pair_log_ratios: list[float] = field(default_factory=list)  # every pair's, in order
    # --launch: per start, its fresh processes and its pairs' mean (the test's unit) ...
    starts: list[dict[str, Any]] = field(default_factory=list)
    start_pairs: list[list[float]] = field(default_factory=list)  # ... and its pairs
    fingerprints: tuple[dict[str, Any] | None, dict[str, Any] | None] = (None, None)

    @property
    def last(self) -> Look | None:
        return self.looks[-1] if self.looks else None


@dataclass(frozen=True)
class Launch:
    """`ab --launch-a CMD --launch-b CMD`: the A/B starts both servers itself, afresh for each
    start, and takes `pairs_per_start` pairs between each start's two processes; the test's
    unit is a start's mean pair log ratio, so the level difference of two processes of one
    launch (the between-process spread) is in the units' spread, not a bias no pairs remove."""

    commands: tuple[LaunchCommand, LaunchCommand]
    pairs_per_start: int
    ready_timeout_s: float
    log_dir: Path
    scrape: bool = True  # each start's processes' /metrics, like a probe's


# (what was taken so far: "pair 7", "start 4 (12 pairs)"; the order; the look or None)
Progress = Callable[[str, str, Look | None], None]


def order_of(pair: int) -> str:
    """A B, B A, A B, …: a drift linear over two trials enters successive pairs with opposite
    signs."""
    return "AB" if pair % 2 == 0 else "BA"


def run_ab(a: ProbeSettings, b: ProbeSettings, store: Store, design: Design, *,
           labels: dict[str, str] | None = None, scrape: bool = True,
           fingerprints: tuple[dict[str, Any] | None, dict[str, Any] | None] = (None, None),
           progress: Progress | None = None,
           on_created: Callable[[int, int], None] | None = None,
           launch: Launch | None = None,
           fingerprint: Callable[[ProbeSettings], dict[str, Any] | None] | None = None
           ) -> ABOutcome:
    """The A/B of two endpoints (a.url, b.url), or with `launch` of two launch commands that
    it starts afresh for each start (the URLs are then theirs; `fingerprint` reads each side's
    stack on the first start; each start's processes are scraped while they serve)."""
    if not (a.caliber.load.classic and b.caliber.load.classic):
        raise UsageError("an A/B alternates single trials: the caliber must be a closed-loop "
                         "one (no --request-rate / --num-requests / --duration)",
                         where="ab", remedy="Use a caliber without a load shape")
    with ExitStack() as servers:
        first: list[Launched] = []
        if launch is not None:
            first = _start_both(launch, servers, 0)
            a, b = replace(a, url=first[0].url), replace(b, url=first[1].url)
            launch = replace(launch, scrape=scrape)
            scrape = False  # per start, by _pairs: each process is scraped while it serves
            if fingerprint is not None:
                fingerprints = (fingerprint(a), fingerprint(b))
        sides = []
        for name, s in zip(SIDES, (a, b), strict=True):
            info, model, prompt = prepare(s)
            sides.append(Side(name, s, info, model, prompt, stall_floor=design.min_effect))
        for sd, srv in zip(sides, first, strict=False):
            sd.server = _server_of(srv)
        return _run(sides, store, design, labels, scrape, fingerprints, progress, on_created,
                    launch, servers)


def _run(sides: list[Side], store: Store, design: Design, labels: dict[str, str] | None,
         scrape: bool, fingerprints: tuple[dict[str, Any] | None, dict[str, Any] | None],
         progress: Progress | None, on_created: Callable[[int, int], None] | None,
         launch: Launch | None, servers: ExitStack) -> ABOutcome:
    session = time.strftime("%Y%m%dT%H%M%S")
    for sd, f, other in zip(sides, fingerprints, ("B", "A"), strict=True):
        cal = sd.settings.caliber
        started = ({"launch": launch.commands[SIDES.index(sd.name)].shown(),
                    "pairs_per_start": launch.pairs_per_start} if launch is not None else {})
        sd.run_id = store_runs.create_run(
            store, url=runner._safe_url(sd.settings.url), model=sd.model, engine=sd.info.kind,
            caliber=cal.to_dict(), caliber_ref=cal.ref, caliber_identity=cal.identity,
            labels={**(labels or {}), "ab": session, "side": sd.name},
            simulated=sd.info.simulated, fingerprint=f,
            meta={"engine_info": sd.info.to_dict(), "prompt": sd.prompt.to_dict(),
                  "trials": design.max_pairs, "concurrency": cal.concurrency,
                  "warmup": sd.settings.warmup, "seed_schedule": runner.seed_schedule(cal),
                  "ab": {"session": session, "side": sd.name, "other_side": other,
                         "design": design.describe(), **started}})
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
    out = ABOutcome(sides[0].run_id, sides[1].run_id, [], [], [], design, "max pairs", 0.0,
                    fingerprints=fingerprints)
    gc.collect()
    gc.freeze()
    try:
        asyncio.run(_pairs(sides, store, design, out, progress, launch, servers))
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


Flag = tuple[str, str]  # (reason: "contaminated" | "caliber missed" | "stalled", detail)
BLOCKING = ("contaminated", "caliber missed")  # persistent → a premise decides


def retake_budget(design: Design) -> int:
    return max(th.AB_RETAKES_MIN, math.ceil(th.AB_RETAKE_SHARE * design.max_pairs))


def persisted(sd: Side, reason: str, budget_left: int) -> bool:
    """A blocking cause persists on a side: the re-take budget is spent, or the side has had
    no clean trial and AB_RETAKES_MIN flagged in a row for it."""
    return budget_left <= 0 or (sd.clean == 0 and sd.flagged.get(reason, 0) >= th.AB_RETAKES_MIN)


def arm_of(sd: Side, flags: list[Flag]) -> Arm:
    missed = next((d for r, d in flags if r == "caliber missed"), None)
    cont = next((d for r, d in flags if r == "contaminated"), None)
    return Arm(sd.name, caliber_missed=f"caliber missed on every re-take ({missed})"
               if missed else None, contamination=cont)


@dataclass
class _Budget:
    retakes: int
    attempt: int = 0


class _Stop:
    """_pair's answer when a cause persisted on an arm: the arms decide (out.arms)."""


STOP = _Stop()


async def _pairs(sides: list[Side], store: Store, design: Design, out: ABOutcome,
                 progress: Progress | None, launch: Launch | None = None,
                 servers: ExitStack | None = None) -> None:
    by = {s.name: s for s in sides}
    conc = max(s.settings.caliber.concurrency for s in sides)
    budget = _Budget(retake_budget(design))
    async with cl.make_client(sides[0].settings.proxy, max_connections=max(8, conc)) as client:
        if launch is None:
            while len(out.log_ratios) < design.max_pairs:
                d = await _pair(client, by, store, budget, out, progress)
                if isinstance(d, _Stop):
                    return
                if d is None:
                    continue
                out.log_ratios.append(d)
                out.pair_log_ratios.append(d)
                out.orders.append(order_of(budget.attempt - 1))
                if _looked(out, design, progress, f"pair {len(out.log_ratios)}"):
                    return
            return
        assert servers is not None
        while len(out.log_ratios) < design.max_pairs:
            if out.starts:  # the next start: fresh server processes of both sides
                servers.close()
                _point(sides, _start_both(launch, servers, len(out.starts)))
            _observe(sides, launch)
            ratios: list[float] = []
            try:
                while len(ratios) < launch.pairs_per_start:
                    d = await _pair(client, by, store, budget, out, progress)
                    if isinstance(d, _Stop):
                        return
                    if d is None:
                        continue
                    ratios.append(d)
                    out.pair_log_ratios.append(d)
            finally:  # this start's engine numbers go to the runs before its processes end
                for sd in sides:
                    runner.store_observed(store, sd.run_id, sd.observers, sd.findings)
                    sd.observers = []
            out.starts.append({"start": len(out.starts) + 1, "pairs": len(ratios),
                               "mean": statistics.fmean(ratios),
                               **{sd.name: sd.server for sd in sides}})
            out.start_pairs.append(ratios)
            out.log_ratios.append(statistics.fmean(ratios))
            out.orders.append(order_of(len(out.starts) - 1))
            if _looked(out, design, progress, f"start {len(out.starts)} "
                       f"({len(out.pair_log_ratios)} pairs)"):
                return


def _looked(out: ABOutcome, design: Design, progress: Progress | None, taken: str) -> bool:
    """The sequential test after one more unit (a pair, or a start's mean; `taken` says which,
    for the progress line): True when it stops."""
    lk = step_starts(out.start_pairs, design) if out.start_pairs else step(out.log_ratios, design)
    if lk is not None:
        out.looks.append(lk)
    if progress is not None:
        progress(taken, out.orders[-1], lk)
    if lk is not None and lk.decision != "continue":
        out.stopped = "decided" if lk.decision in ("change", "equivalent") else "max pairs"
        return True
    return False


async def _pair(client: Any, by: dict[str, Side], store: Store, budget: _Budget,
                out: ABOutcome, progress: Progress | None) -> float | _Stop | None:
    """One pair (A B or B A): its ln(B/A); None when it is re-taken; STOP when a cause
    persisted on an arm (out.arms say which)."""
    order = order_of(budget.attempt)
    budget.attempt += 1
    flags: dict[str, list[Flag]] = {}
    for name in order:
        flags[name] = await _trial(client, by[name], store, retake=budget.retakes > 0)
    pair_no = len(out.pair_log_ratios) + 1
    blocking = {n: [f for f in fl if f[0] in BLOCKING] for n, fl in flags.items()}
    done = {n: fl for n, fl in blocking.items()
            if fl and any(persisted(by[n], r, budget.retakes) for r, _ in fl)}
    if done:
        for n, fl in done.items():  # the cause persisted: its re-taken trials are
            for reason in {r for r, _ in fl}:  # the arm's evidence, kept as trials
                for i in by[n].retaken_idx.get(reason, []):
                    store_runs.set_trial_status(store, by[n].run_id, i, "ok")
            by[n].findings.extend(by[n].pending_findings)
        arms = [arm_of(by[n], done.get(n, [])) for n in SIDES]
        out.arms = (arms[0], arms[1])
        out.stopped = "premise"
        return STOP
    if any(flags.values()) and budget.retakes > 0:
        budget.retakes -= 1
        out.retaken += [Retake(pair_no, n, r, d) for n in SIDES for r, d in flags.get(n, [])]
        if progress is not None:
            named = ", ".join(f"{n} {r}" for n in SIDES for r, _ in flags.get(n, []))
            progress(f"pair {pair_no}", f"{order}; re-taken: {named}", None)
        return None
    ra, rb = by["A"].rates[-1], by["B"].rates[-1]
    if ra is None or rb is None or ra <= 0 or rb <= 0:
        raise UsageError(f"pair {pair_no}: no decode rate on side "
                         f"{'A' if not ra else 'B'} (an output too short for its "
                         "steady state?)", where="ab",
                         remedy="Use a caliber whose output passes its steady-state start")
    return math.log(rb) - math.log(ra)


def _start_both(launch: Launch, servers: ExitStack, index: int) -> list[Launched]:
    """Fresh server processes of both sides for start `index` (0-based), entered in `servers`
    (which ends them)."""
    return servers.enter_context(launched(launch.commands, launch.log_dir,
                                          ready_timeout_s=launch.ready_timeout_s,
                                          tag=f"start{index + 1}"))


def _point(sides: list[Side], procs: list[Launched]) -> None:
    """Each side at its new process: its URL, warmed up again before its first trial."""
    for sd, srv in zip(sides, procs, strict=True):
        sd.settings = replace(sd.settings, url=srv.url)
        sd.warm = False
        sd.server = _server_of(srv)


def _observe(sides: list[Side], launch: Launch) -> None:
    """Scrape each side's new process for this start (its /metrics, from its own start)."""
    if not launch.scrape:
        return
    from decodescope.run.setup import build_observers

    for sd in sides:
        sd.observers = build_observers(sd.settings, sd.info, log_path=None, scrape=True,
                                       scrape_interval_s=0.25)
        for ob in sd.observers:
            ob.start()


def _server_of(srv: Launched) -> dict[str, Any]:
    return {"pid": srv.pid, "port": srv.port, "ready_s": srv.ready_s}


def s_min_effect(sd: Side) -> float:
    return sd.stall_floor


def stalled_share(per_req: list[Any]) -> tuple[float, int] | None:
    """(share of the trial's steady-state time lost to stalls, stalls) over its requests;
    None when no request stalled or no steady state was timed."""
    n = sum(len(m.stalls) for m in per_req)
    span = sum((m.steady_t_end_s - m.steady_t_start_s) for m in per_req
               if m.steady_t_end_s is not None and m.steady_t_start_s is not None)
    if n == 0 or span <= 0:
        return None
    return sum(m.stall_s for m in per_req) / span, n


async def _trial(client: Any, sd: Side, store: Store, *, retake: bool) -> list[Flag]:
    """One trial on one side, stored in that side's run as it completes (the runner's trial,
    for a closed-loop caliber). Returns what flags it (the engine's and the trace's own
    evidence); a flagged trial is stored as "retaken" when `retake` (the pair will be taken
    again), else as an ordinary trial."""
    s, cal = sd.settings, sd.settings.caliber
    idx = sd.trials
    sd.trials += 1
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
    flags: list[Flag] = []
    if failed is None:
        for ob in sd.observers:
            live = getattr(ob, "trial_contamination", None)
            why = live(idx) if live is not None else None
            if why:
                flags.append(("contaminated", why.removesuffix(": foreign load")))
                break
        if found:
            flags.append(("caliber missed", found[0].cause))
        stalled = stalled_share(per_req)
        if stalled is not None and stalled[0] >= s_min_effect(sd):
            flags.append(("stalled", f"{stalled[1]} pause(s), {100 * stalled[0]:.0f} % of the "
                                     "steady state"))
    for reason in ("contaminated", "caliber missed", "stalled"):
        sd.flagged[reason] = sd.flagged.get(reason, 0) + 1 \
            if any(r == reason for r, _ in flags) else 0
    if not flags:
        sd.clean += 1
    status = "failed" if failed else RETAKEN if (flags and retake) else "ok"
    if status == RETAKEN:
        for reason, _ in flags:
            sd.retaken_idx.setdefault(reason, []).append(idx)
        sd.pending_findings.extend(found)
    else:
        sd.findings.extend(found)
    store_runs.add_trial(store, sd.run_id, idx, status=status,
                         started_at=started, wall_anchor_s=anchor,
                         result={"requests": [m.to_dict() for m in per_req],
                                 "findings": [f.to_dict() for f in found],
                                 **({"retaken": [f"{r}: {d}" for r, d in flags]}
                                    if status == RETAKEN else {})},
                         requests=traces)
    if failed is not None:
        cl.raise_for_trace(failed)
    rates = [m.decode_rate for m in per_req if m.decode_rate is not None and m.decode_rate > 0]
    sd.rates.append(math.exp(statistics.fmean(math.log(r) for r in rates)) if rates else None)
    return flags
