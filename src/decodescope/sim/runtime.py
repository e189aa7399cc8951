"""The running engine: admission, prefill timers, and one verification step per running
request on every engine tick. Ticks follow absolute deadlines (t_next = t_prev_deadline + dt),
so timer jitter never accumulates; a tick starved longer (CATCH_UP_*) restarts the schedule
one step after "now", as a real engine would, instead of bursting to catch up. Counters are updated on every step (live /metrics).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable

from decodescope.sim.config import SimConfig
from decodescope.sim.counters import Counters
from decodescope.sim.engine import (
    RequestModel,
    RequestSpec,
    StepOut,
    prefill_real_s,
    step_interval_real_s,
)
from decodescope.sim.truth import RequestTruth

log = logging.getLogger(__name__)

# The event loop's timers wake up to ~1 ms late (epoll has millisecond resolution); the last
# PRECISE_WAIT_S before a deadline is slept with time.sleep (microsecond resolution) instead.
PRECISE_WAIT_S = 0.0015
# Lateness the loop makes up (the configured step rate holds through timer jitter): up to two
# steps, and at least 10 ms (steps of a fast time scale are ~1 ms: jitter spans several).
# Beyond it the schedule restarts one step after "now", as a real engine's would.
CATCH_UP_STEPS = 2
CATCH_UP_S = 0.01
FOREIGN_OUTPUT_TOKENS = 512  # a foreign request is replaced by a fresh one after this many tokens
FOREIGN_CONTEXT_TOKENS = 1024  # KV tokens a foreign request is assumed to hold


def _wait_until(deadline: float) -> None:
    remaining = deadline - time.monotonic()
    if 0 < remaining <= PRECISE_WAIT_S:
        time.sleep(remaining)


Emitter = Callable[["ActiveRequest", StepOut, float], bool]


class ActiveRequest:
    def __init__(self, cfg: SimConfig, spec: RequestSpec, truth: RequestTruth, emit: Emitter,
                 foreign_extra: int = 0):
        self.spec = spec
        self.model = RequestModel(cfg, spec)
        self.truth = truth
        self.emit = emit
        self.foreign_extra = foreign_extra
        self.foreign_added = False  # foreign_extra joins the engine with the request's prefill
        self.stalled_until = 0.0  # monotonic; the engine skips the request until then
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.prefill_timer: asyncio.TimerHandle | None = None


class Engine:
    def __init__(self, cfg: SimConfig):
        self.cfg = cfg
        self.lifetime = Counters(cfg.k)  # never reset; readers diff against snapshots
        self._metrics_base = Counters(cfg.k)
        self.metrics_created_wall_s = time.time()
        self.running: list[ActiveRequest] = []
        self.prefilling: set[ActiveRequest] = set()
        self.waiting: deque[ActiveRequest] = deque()
        self._foreign: list[RequestModel] = []
        self._foreign_made = 0
        self._extra_foreign = 0
        self._wake = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self.set_foreign_load(cfg.foreign_load)
        if cfg.counter_reset_at_s is not None:
            self._loop.call_later(cfg.real_s(cfg.counter_reset_at_s), self.reset_counters)

    # ---- gauges -------------------------------------------------------------------------
    @property
    def num_running(self) -> int:
        return len(self.running) + len(self.prefilling) + len(self._foreign)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def kv_usage(self) -> float:
        held = sum(r.spec.prompt_tokens + r.model.position for r in (*self.running, *self.prefilling))
        held += len(self._foreign) * FOREIGN_CONTEXT_TOKENS
        return min(1.0, held / self.cfg.kv_capacity_tokens)

    # ---- control ------------------------------------------------------------------------
    @property
    def counters(self) -> Counters:
        """What /metrics shows: the counts since start or the last counter reset."""
        return self.lifetime.minus(self._metrics_base)

    def reset_counters(self) -> None:
        """Like a server restart: every /metrics counter starts again from 0."""
        self._metrics_base = self.lifetime.copy()
        self.metrics_created_wall_s = time.time()

    def set_foreign_load(self, n: int) -> None:
        self._base_foreign = max(0, n)
        self._resize_foreign()

    def _resize_foreign(self) -> None:
        want = self._base_foreign + self._extra_foreign
        while len(self._foreign) > want:
            self._foreign.pop()
        while len(self._foreign) < want:
            self._foreign.append(self._new_foreign())
        if self._foreign:
            self._wake.set()

    def _new_foreign(self) -> RequestModel:
        self._foreign_made += 1
        spec = RequestSpec("chat", f"foreign-{self._foreign_made}", 0, FOREIGN_OUTPUT_TOKENS,
                           ignore_eos=True, temperature=0.0, content_class="text")
        model = RequestModel(self.cfg, spec)
        model.first_token()
        return model

    def submit(self, req: ActiveRequest) -> None:
        if len(self.running) + len(self.prefilling) >= self.cfg.max_num_seqs:
            self.waiting.append(req)
        else:
            self._start_prefill(req)

    def abort(self, req: ActiveRequest) -> None:
        """The request's client is gone (or the server stops)."""
        if req in self.waiting:
            self.waiting.remove(req)
        if req.prefill_timer is not None:
            req.prefill_timer.cancel()
        self._finish(req, aborted=True)

    # ---- steps --------------------------------------------------------------------------
    def _start_prefill(self, req: ActiveRequest) -> None:
        self.prefilling.add(req)
        if req.foreign_extra:
            self._extra_foreign += req.foreign_extra
            req.foreign_added = True
            self._resize_foreign()
        deadline = self._loop.time() + prefill_real_s(self.cfg, req.spec.prompt_tokens)
        req.prefill_timer = self._loop.call_at(deadline - PRECISE_WAIT_S, self._prefill_done, req, deadline)

    def _prefill_done(self, req: ActiveRequest, deadline: float) -> None:
        req.prefill_timer = None
        _wait_until(deadline)
        self.prefilling.discard(req)
        self.lifetime.prompt_tokens += req.spec.prompt_tokens
        out = req.model.first_token()
        self._count(out)
        self.lifetime.observe_iteration(req.spec.prompt_tokens + out.tokens)
        ok = self._deliver(req, out, deadline)
        if not ok or out.finished:
            self._finish(req, aborted=not ok)
            return
        self.running.append(req)
        self._wake.set()

    def _count(self, out: StepOut) -> None:
        self.lifetime.add_step(out)

    def _deliver(self, req: ActiveRequest, out: StepOut, deadline: float) -> bool:
        try:
            return req.emit(req, out, deadline)
        except Exception:  # a broken emitter must not stop the engine
            log.exception("simulator: emitting a chunk failed")
            return False

    def _finish(self, req: ActiveRequest, aborted: bool) -> None:
        if req in self.running:
            self.running.remove(req)
        self.prefilling.discard(req)
        if req.done.done():
            return
        if req.foreign_added:
            self._extra_foreign -= req.foreign_extra
            req.foreign_added = False
            self._resize_foreign()
        if aborted:
            req.truth.aborted = True
            self.lifetime.finished("abort")
        else:
            req.truth.finish_reason = req.model.finish_reason
            self.lifetime.finished(req.model.finish_reason)
        req.done.set_result(None)
        while self.waiting and len(self.running) + len(self.prefilling) < self.cfg.max_num_seqs:
            self._start_prefill(self.waiting.popleft())

    def _tick(self, deadline: float) -> None:
        now = self._loop.time()
        tokens = 0
        for req in list(self.running):
            if req.stalled_until > now:
                continue
            out = req.model.next_step()
            self._count(out)
            tokens += out.tokens
            ok = self._deliver(req, out, deadline)
            if not ok or out.finished:
                self._finish(req, aborted=not ok)
        for i, model in enumerate(self._foreign):
            out = model.next_step()
            self._count(out)
            tokens += out.tokens
            if model.done:
                self._foreign[i] = self._new_foreign()
        if tokens:
            self.lifetime.observe_iteration(tokens)

    def _interval(self) -> float:
        active = [r.model.position for r in self.running] + [m.position for m in self._foreign]
        mean_pos = sum(active) / len(active) if active else 0.0
        return step_interval_real_s(self.cfg, self.num_running, mean_pos)

    async def run(self) -> None:
        deadline: float | None = None
        while True:
            if not self.running and not self._foreign:
                self._wake.clear()
                await self._wake.wait()
                deadline = None
                continue
            if deadline is None:
                deadline = self._loop.time() + self._interval()
            delay = deadline - self._loop.time() - PRECISE_WAIT_S
            if delay > 0:
                await asyncio.sleep(delay)
            _wait_until(deadline)
            self._tick(deadline)
            dt = self._interval()
            deadline += dt
            now = self._loop.time()
            if now - deadline > max(CATCH_UP_STEPS * dt, CATCH_UP_S):
                # Starved (a GC pause, a busy host): a real engine does not make up for lost
                # time, its next step takes a whole step from now. Catching up would emit
                # steps back to back, shorten first-to-last chunk and read as a faster decode
                # rate (a loaded test read +28 % that way).
                deadline = now + dt
