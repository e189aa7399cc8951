"""The long-running exporter: a scheduler thread runs the checks, an HTTP thread serves them.

Checks run one at a time, each when due: two probes at once from one host would share its
CPU and network and time each other (the probe client's timing is the measurement).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, generate_latest, start_http_server

from decodescope.exporter.check_job import run_check
from decodescope.exporter.collector import CheckState, FleetCollector
from decodescope.exporter.config import FleetConfig
from decodescope.exporter.outcome import Outcome


class Exporter:
    """`Exporter(config).start()` ... `.stop()`; `.port` is the /metrics port once started."""

    def __init__(self, config: FleetConfig, *,
                 runner: Callable[..., Outcome] = run_check,
                 log: Callable[[str], None] = lambda s: None,
                 clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self._runner, self._log, self._clock = runner, log, clock
        self._lock = threading.Lock()
        self.states = {c.name: CheckState(c) for c in config.checks}
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(FleetCollector(self.states, self._lock, clock))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._server: object | None = None
        self.port: int | None = None

    def metrics_text(self) -> str:
        return generate_latest(self.registry).decode()

    def run_once(self) -> None:
        """Run every check once, in config order."""
        for spec in self.config.checks:
            self._run(spec.name)

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
        due = {c.name: 0.0 for c in self.config.checks}  # monotonic time each is next due
        while not self._stop.is_set():
            now = time.monotonic()
            name = min(due, key=lambda n: due[n])
            if due[name] > now:
                self._stop.wait(min(due[name] - now, 1.0))
                continue
            spec = self.states[name].spec
            self._run(name)
            due[name] = max(due[name] + spec.every_s, time.monotonic())

    def _run(self, name: str) -> None:
        spec = self.states[name].spec
        o = self._runner(spec, self.config.store)
        with self._lock:
            self.states[name].record(o)
        if o.ok:
            rate = f"{o.decode_rate:.1f} tok/s" if o.decode_rate is not None else "no decode rate"
            self._log(f"check {name}: {o.verdict} {rate} (exit {o.exit_code}) "
                      f"in {o.duration_s:.1f} s")
        else:
            self._log(f"check {name}: failed ({o.error_kind}): {o.error}")
