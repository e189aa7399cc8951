"""The long-running exporter: a scheduler thread starts the checks, an HTTP thread serves them.

Checks of different hosts run at once, each in a worker process bounded by its `timeout_s`
(exporter/worker.py), so one slow or trickling endpoint holds only its own schedule. Never two
checks against one host at once: two probes of one machine would share its GPU, CPU and network
and time each other (the probe's timing is the measurement). A check due while its host is busy
starts when the host is free, earliest due first.

Never more than `max_workers` checks at once (config.workers: a worker process is ~120 MB, and
a thousand endpoints must not mean a thousand processes): a check due while every worker is
busy waits its turn, earliest due first; the wait is served (`decodescope_fleet_checks_waiting`,
`decodescope_fleet_queue_wait_seconds`, each check's `decodescope_check_start_lateness_seconds`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, generate_latest, start_http_server

from decodescope.errors import DecodescopeError
from decodescope.exporter.changes import HISTORY_RUNS, stored_changes
from decodescope.exporter.collector import CheckState, FleetCollector, QueueStats, current_finding
from decodescope.exporter.config import FleetConfig
from decodescope.exporter.fleet import FleetFinding, as_reported
from decodescope.exporter.outcome import Outcome
from decodescope.exporter.worker import run_check_bounded, stop_all


class Exporter:
    """`Exporter(config).start()` ... `.stop()`; `.port` is the /metrics port once started."""

    def __init__(self, config: FleetConfig, *,
                 runner: Callable[..., Outcome] = run_check_bounded,
                 log: Callable[[str], None] = lambda s: None,
                 clock: Callable[[], float] = time.time,
                 history_runs: int = HISTORY_RUNS) -> None:
        self.config = config
        self._history_runs = history_runs  # the newest stored runs the detector reads (0: off)
        self._runner, self._log, self._clock = runner, log, clock
        self._lock = threading.Lock()  # the states (read by the collector at scrape time)
        self.states = {c.name: CheckState(c) for c in config.checks}
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(FleetCollector(self.states, self._lock, clock,
                                              queue=self.queue_stats, config=config))
        self._stop = threading.Event()
        self._wake = threading.Event()  # a check finished: its host is free
        self._sched = threading.Lock()  # due, running, busy hosts
        self._due: dict[str, float] = {}
        self._running: set[str] = set()
        self._busy: set[str] = set()
        self._max = config.workers  # checks running at once, at most
        self._once: list[str] | None = None  # run_once: the checks not started yet
        self._once_t0 = 0.0
        self._peak = 0  # the most checks that ran at once
        self._thread: threading.Thread | None = None
        self._server: object | None = None
        self.port: int | None = None
        self._fleet_text: str | None = None  # the last fleet finding logged

    def fleet_finding(self) -> FleetFinding:
        """The fleet rule over the checks' fresh results (exporter/fleet.py)."""
        with self._lock:
            return current_finding(self.states, self._clock())

    def _log_fleet(self) -> None:
        f = self.fleet_finding()
        text = f.text()
        if text != self._fleet_text and (f.direction is not None or self._fleet_text):
            self._log(text)
        self._fleet_text = text

    def metrics_text(self) -> str:
        return generate_latest(self.registry).decode()

    _running_once = False

    def run_once(self) -> None:
        """Run every check once, at most max_workers at once, never two of one host at once
        (the checks of one host in config order); then the fleet rule over the round, logged."""
        self._running_once = True
        with self._sched:
            self._once = [c.name for c in self.config.checks]
            self._once_t0 = time.monotonic()
            self._peak = len(self._running)  # this round's most at once
        cond = threading.Condition(self._sched)
        threads = [threading.Thread(target=self._once_worker, args=(cond,), daemon=True,
                                    name=f"decodescope-worker-{i}")
                   for i in range(min(self._max, len(self.config.checks)))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with self._sched:
            self._once = None
            took = time.monotonic() - self._once_t0
        self._running_once = False
        shard = "" if self.config.shard is None else f" (shard {self.config.shard})"
        self._log(f"round{shard}: {len(self.config.checks)} check(s) in {took:.1f} s, at most "
                  f"{self._peak} at once (max_workers = {self._max})")
        f = self.fleet_finding()
        self._fleet_text = f.text()
        self._log(self._fleet_text)

    def _once_worker(self, cond: threading.Condition) -> None:
        """One of run_once's max_workers: take the first waiting check whose host is free."""
        while True:
            with cond:
                while True:
                    assert self._once is not None
                    if not self._once:
                        return
                    name = next((n for n in self._once
                                 if self.states[n].spec.host not in self._busy), None)
                    if name is not None:
                        break
                    cond.wait()
                host = self.states[name].spec.host
                self._once.remove(name)
                self._started(name, host, time.monotonic() - self._once_t0)
            try:
                self._run(name)
            finally:
                with cond:
                    self._running.discard(name)
                    self._busy.discard(host)
                    cond.notify_all()

    def _started(self, name: str, host: str, late_s: float) -> None:
        """Mark a check running (call with self._sched held)."""
        self._running.add(name)
        self._busy.add(host)
        self._peak = max(self._peak, len(self._running))
        with self._lock:
            self.states[name].lateness_s = max(0.0, late_s)

    @property
    def peak_running(self) -> int:
        """The most checks that ran at once (in the last run_once round, else since start)."""
        return self._peak

    def queue_stats(self) -> QueueStats:
        """The workers' bound, the checks running, and the due ones waiting for a worker or
        their host (with how long the longest has waited)."""
        now = time.monotonic()
        with self._sched:
            if self._once is not None:
                waiting = len(self._once)
                wait = now - self._once_t0 if waiting else 0.0
            else:
                late = [now - d for n, d in self._due.items()
                        if d <= now and n not in self._running]
                waiting, wait = len(late), max(late, default=0.0)
            return QueueStats(self._max, len(self._running), waiting, wait)

    def reported(self) -> dict[str, Outcome | None]:
        """Each check's last outcome as the fleet reports it (ENVIRONMENT when it moved with
        the fleet); None: never run."""
        with self._lock:
            f = current_finding(self.states, self._clock())
            return {n: None if s.last is None else
                    as_reported(s.last, n, f) if s.last.ok else s.last
                    for n, s in self.states.items()}

    def start(self, *, serve: bool = True) -> Exporter:
        if serve:
            server, _ = start_http_server(self.config.port, self.config.host,
                                          registry=self.registry)
            self._server = server
            self.port = server.server_port
        self._thread = threading.Thread(target=self._loop, name="decodescope-exporter",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        self._wake.set()
        stop_all()  # running check workers: SIGTERM (their runs are marked interrupted)
        if self._thread is not None:
            self._thread.join(timeout_s)
        if self._server is not None:
            self._server.shutdown()  # type: ignore[attr-defined]
            self._server.server_close()  # type: ignore[attr-defined]

    def wait(self) -> None:
        """Block until stop() (or Ctrl-C in the caller)."""
        while not self._stop.wait(0.5):
            pass

    def _loop(self) -> None:
        with self._sched:
            t0 = time.monotonic()
            self._due = {c.name: t0 for c in self.config.checks}  # monotonic time next due
        while not self._stop.is_set():
            self._wake.clear()
            now = time.monotonic()
            next_due = now + 1.0
            with self._sched:
                for name in sorted(self._due, key=lambda n: self._due[n]):
                    if len(self._running) >= self._max:
                        break  # every worker busy: the due checks wait their turn (queue)
                    spec = self.states[name].spec
                    if name in self._running or spec.host in self._busy:
                        continue
                    if self._due[name] > now:
                        next_due = min(next_due, self._due[name])
                        continue
                    self._started(name, spec.host, now - self._due[name])
                    threading.Thread(target=self._scheduled, args=(name,), daemon=True,
                                     name=f"decodescope-check-{name}").start()
            self._wake.wait(max(0.0, min(next_due - time.monotonic(), 1.0)))

    def _scheduled(self, name: str) -> None:
        spec = self.states[name].spec
        try:
            if not self._stop.is_set():
                self._run(name)
        finally:
            with self._sched:
                self._running.discard(name)
                self._busy.discard(spec.host)
                self._due[name] = max(self._due[name] + spec.every_s, time.monotonic())
            self._wake.set()

    def _run(self, name: str) -> None:
        spec = self.states[name].spec
        t0 = time.monotonic()
        try:
            o = self._runner(spec, self.config.store)
        except Exception as e:  # noqa: BLE001 — a runner that raises is one failed run
            o = Outcome(self._clock(), time.monotonic() - t0, error_kind=type(e).__name__,
                        error=f"{type(e).__name__}: {e}")
        with self._lock:
            st = self.states[name]
            st.record(o)
            # the counter of consecutive regressions counts the verdict as served: a run that
            # moved with the whole fleet (ENVIRONMENT) is no regression of this endpoint
            st.count_regression(o, name in current_finding(self.states,
                                                           self._clock()).environment)
        self._detect(name, o)
        if o.timed_out:
            self._log(f"check {name}: timed out after {o.duration_s:.1f} s (timeout_s = "
                      f"{spec.timeout_s:g}); no verdict")
        elif o.ok:
            rate = f"{o.decode_rate:.1f} tok/s" if o.decode_rate is not None else "no decode rate"
            fleet = ""
            if not self._running_once and name in self.fleet_finding().environment:
                fleet = " — moved with the fleet: served as ENVIRONMENT, no alarm"
            self._log(f"check {name}: {o.verdict} {rate} (exit {o.exit_code}) "
                      f"in {o.duration_s:.1f} s{fleet}")
        else:
            self._log(f"check {name}: failed ({o.error_kind}): {o.error}")
        if not self._running_once:
            self._log_fleet()

    def _detect(self, name: str, o: Outcome) -> None:
        """The change-point detector over the check's newest stored runs, once its run is
        stored (exporter/changes.py), outside the states' lock; a failure is logged and the
        check's last detection is kept."""
        if self._history_runs <= 0 or not o.ok or o.run_id is None or not o.caliber_identity:
            return
        try:
            ch = stored_changes(self.config.store, name, o.caliber_identity, self._history_runs)
        except Exception as e:  # noqa: BLE001 — the check's run stands; one line, no traceback
            msg = e.one_line() if isinstance(e, DecodescopeError) else f"{type(e).__name__}: {e}"
            self._log(f"check {name}: change-point detection failed: {msg}")
            return
        with self._lock:
            self.states[name].changes = ch
