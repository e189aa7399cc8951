"""What runs beside a probe: the Prometheus scraper and the engine-log tail (run/observer_protocol.py).

Both are threads that only observe; a failure becomes a Finding, never a failed probe.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator

import httpx

from decodescope.analysis.contamination import flag_contaminated
from decodescope.edge import METRICS, side_request
from decodescope.errors import ResponseTooLargeError
from decodescope.records.findings import Finding
from decodescope.records.window import EngineWindow
from decodescope.run.observer_protocol import ObserverResult
from decodescope.telemetry.prometheus import (
    Scrape,
    count_resets,
    parse_metrics,
    windows_from_scrapes,
)

DEFAULT_SCRAPE_INTERVAL_S = 1.0  # the longest interval: fine for 10 s+ trials, cheap for the engine
# The interval adapts to the expected trial length so that each trial's steady state holds
# about this many scrapes (per-trial engine numbers come from counter deltas between them).
SCRAPES_PER_TRIAL = 12
# ... but never below this: vLLM's exposition costs the API server ~ms per scrape, and faster
# scraping would load the engine being measured.
MIN_SCRAPE_INTERVAL_S = 0.05
SCRAPE_TIMEOUT_S = 2.0  # a boundary scrape blocks the probe loop; never longer than this
LOG_POLL_S = 0.2  # log tail poll period


class PrometheusObserver:
    """Scrapes GET {url}/metrics every `interval_s` in a thread, and at every trial boundary
    (mark) synchronously, so whole-trial windows start and end exactly at the trial."""

    name = "prometheus"

    def __init__(self, url: str, engine: str, *, interval_s: float = DEFAULT_SCRAPE_INTERVAL_S,
                 in_flight: int = 1, headers: dict[str, str] | None = None,
                 proxy: str | None = None,
                 transport: httpx.BaseTransport | None = None,
                 clock: Callable[[], float] = time.perf_counter,
                 wall: Callable[[], float] = time.time) -> None:
        self.base = url.rstrip("/")
        self.url = self.base + METRICS.path
        self.engine = engine
        self.interval_s = interval_s
        self.in_flight = in_flight
        self._client = httpx.Client(trust_env=False, proxy=proxy, timeout=SCRAPE_TIMEOUT_S,
                                    headers=headers or {}, transport=transport)
        self._clock, self._wall = clock, wall
        self._scrapes: list[Scrape] = []
        self._lock = threading.Lock()
        self._http_lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._unavailable: str | None = None
        self._gave_up: str | None = None  # why scraping stopped mid-probe
        self._failing = False  # the latest scrape failed
        self._spans: dict[str, list[float]] = {}  # trial -> [start wall, end wall]
        self.max_interval_s = interval_s
        self._intervals: dict[str, float] = {}  # trial -> the interval used during it

    def plan(self, trial: int, expected_trial_s: float | None) -> None:
        """Adapt the interval to the expected trial length (≈ SCRAPES_PER_TRIAL scrapes per
        trial, between MIN_SCRAPE_INTERVAL_S and the configured interval)."""
        if expected_trial_s is not None and expected_trial_s > 0:
            self.interval_s = min(self.max_interval_s, max(
                MIN_SCRAPE_INTERVAL_S, expected_trial_s / SCRAPES_PER_TRIAL))
        self._intervals[str(trial)] = self.interval_s
        self._wake.set()

    def scrape(self, mark: str | None = None) -> Scrape:
        """One bounded scrape (edge.METRICS: size limit; SCRAPE_TIMEOUT_S: whole deadline),
        parsed with a bounded number of samples. Any failure is the scrape's error, never an
        exception; an answer past the size limit ends scraping (it will not shrink)."""
        t_s, t_wall = self._clock(), self._wall()
        try:
            with self._http_lock:  # the thread and a trial boundary may scrape at once
                t_s, t_wall = self._clock(), self._wall()
                r = side_request(self._client, "GET", self.base, METRICS,
                                 deadline_s=SCRAPE_TIMEOUT_S)
                t_done = self._clock()
            if r.status != 200:
                s = Scrape(t_s, t_wall, None, mark=mark, error=f"HTTP {r.status}")
            else:
                s = parse_metrics(r.text, t_s, t_wall, mark, t_done_s=t_done)
        except Exception as exc:  # never let a scrape take the probe down
            cause = getattr(exc, "cause", None) or f"{type(exc).__name__}: {exc}"
            s = Scrape(t_s, t_wall, None, mark=mark, error=str(cause))
            if isinstance(exc, ResponseTooLargeError):
                self._gave_up = str(cause)
        with self._lock:
            self._scrapes.append(s)
            self._failing = s.error is not None
        return s

    def _boundary(self, mark: str) -> Scrape:
        """A scrape at a boundary (start, trial marks, stop): the windows hang on it, so one
        that failed in transit (a timeout under load, a reset connection) is tried once more
        right away, unless the scrape before it failed too (a server that keeps failing is
        not waited on twice per boundary). An HTTP status or an oversized answer is final."""
        before_ok = not self._failing
        s = self.scrape(mark)
        if s.error and before_ok and not s.error.startswith("HTTP ") and not self._gave_up:
            s = self.scrape(mark)
        return s

    def start(self) -> None:
        first = self._boundary("start")
        if first.prefix is None:
            self._unavailable = first.error or "no known engine metric names"
            return  # nothing to watch: no thread, no further scrapes
        self._thread = threading.Thread(target=self._loop, name="decodescope-scraper",
                                        daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            self._wake.wait(self.interval_s)  # a new plan wakes it: the interval changed
            self._wake.clear()
            if self._stop.is_set() or self._gave_up:
                break
            try:
                self.scrape()
            except BaseException as exc:  # noqa: BLE001 - a thread's exception would print a traceback
                self._gave_up = f"{type(exc).__name__}: {exc}"
                break

    def mark(self, event: str, t_s: float) -> None:
        if self._unavailable or self._gave_up:
            return
        s = self._boundary(event)
        kind, _, trial = event.partition(":")
        span = self._spans.setdefault(trial, [s.t_wall_s, s.t_wall_s])
        if kind == "trial_end":
            span[1] = s.t_wall_s

    def trial_contamination(self, trial: int) -> str | None:
        """Foreign load seen by the engine during one finished trial (analysis.contamination
        over the windows scraped so far that overlap its span), in words; None when none was
        seen or nothing can say. Read live, between trials (an A/B re-takes such a trial)."""
        from decodescope.analysis.contamination import contamination

        if self._unavailable or self._gave_up:
            return None
        span = self._spans.get(str(trial))
        if span is None or span[1] <= span[0]:
            return None
        with self._lock:
            scrapes = sorted(self._scrapes, key=lambda s: s.t_s)
        engine = self.engine
        if engine.removeprefix("sim-") in ("openai", "unknown"):
            engine = next((s.prefix for s in scrapes if s.prefix), None) or engine
        windows = windows_from_scrapes(scrapes, engine)
        _, finding = contamination(windows, self.in_flight, [span])
        return finding.cause if finding is not None else None

    def stop(self) -> ObserverResult:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=SCRAPE_TIMEOUT_S + self.interval_s + 1.0)
        if not self._unavailable and not self._gave_up:
            self._boundary("stop")
        self._client.close()
        with self._lock:
            scrapes = sorted(self._scrapes, key=lambda s: s.t_s)
        series = {"prometheus": {"url": self.url, "engine": self.engine,
                                 "interval_s": self.max_interval_s,
                                 "trial_intervals_s": dict(self._intervals),
                                 "scrapes": [s.to_dict() for s in scrapes]}}
        if self._unavailable:
            return ObserverResult(series=series, findings=[Finding(
                "telemetry.no_metrics",
                f"no engine metrics at {self.url} ({self._unavailable})",
                "Start vLLM as usual, SGLang with --enable-metrics, llama.cpp with --metrics; "
                "or pass --log FILE; --no-scrape silences this",
                severity="info")])
        engine = self.engine
        if engine.removeprefix("sim-") in ("openai", "unknown"):  # generic: trust the names
            engine = next((s.prefix for s in scrapes if s.prefix), None) or engine
        windows = windows_from_scrapes(scrapes, engine)
        windows = flag_contaminated(windows, self.in_flight, list(self._spans.values()))
        findings = scrape_findings(scrapes, self.url)
        if self._gave_up:
            findings.append(Finding(
                "telemetry.scrape_stopped", f"scraping stopped mid-probe: {self._gave_up}",
                "Engine windows after that point are missing; check what answers /metrics",
                context=self.url))
        return ObserverResult(windows=windows, series=series, findings=findings)


def scrape_findings(scrapes: list[Scrape], url: str) -> list[Finding]:
    out = []
    resets = count_resets(scrapes)
    if resets:
        out.append(Finding(
            "telemetry.counter_reset",
            f"engine counters went back {resets}x during the probe (a restart?); "
            "those intervals were left out of the engine numbers",
            "Check the engine's uptime and log; rerun once it is stable", context=url))
    failed = [s for s in scrapes if s.error]
    if failed:
        out.append(Finding(
            "telemetry.scrape_failed",
            f"{len(failed)} of {len(scrapes)} scrapes failed (first: {failed[0].error})",
            "The scrapes on each side of a failed one make one longer window (flagged "
            "joined); a failure at the very start or end leaves a gap without counts",
            context=url, severity="info"))
    return out


LogFollow = Callable[[str, int, threading.Event], Iterable[EngineWindow]]


class LogTailObserver:
    """Tails an engine log from its size at start; every engine window parsed from lines
    written during the probe is attached to the run (source="log")."""

    name = "log"

    def __init__(self, path: str, engine: str | None = None, *, in_flight: int = 1,
                 follow: LogFollow | None = None, poll_s: float = LOG_POLL_S) -> None:
        self.path = path
        self.engine = engine
        self.in_flight = in_flight
        self.poll_s = poll_s
        self._follow = follow
        self._windows: list[EngineWindow] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: str | None = None
        self._spans: dict[str, list[float]] = {}

    def start(self) -> None:
        import os

        try:
            offset = os.path.getsize(self.path)
        except OSError as exc:
            self._error = f"cannot read {self.path}: {exc.strerror or exc}"
            return
        try:
            follow = self._follow or default_follow(self.engine, self.poll_s)
        except ImportError as exc:
            self._error = f"no log parser: {exc}"
            return
        self._thread = threading.Thread(target=self._run, args=(follow, offset),
                                        name="decodescope-logtail", daemon=True)
        self._thread.start()

    def _run(self, follow: LogFollow, offset: int) -> None:
        try:
            for w in follow(self.path, offset, self._stop):
                self._windows.append(w)
        except Exception as exc:  # the tail must never take the probe down
            self._error = f"{type(exc).__name__}: {exc}"

    def mark(self, event: str, t_s: float) -> None:
        kind, _, trial = event.partition(":")
        now = time.time()
        span = self._spans.setdefault(trial, [now, now])
        if kind == "trial_end":
            span[1] = now

    def stop(self) -> ObserverResult:
        # Let the engine flush the line of the last interval before we stop reading.
        time.sleep(self.poll_s)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        findings = []
        if self._error:
            findings.append(Finding("telemetry.log_failed", f"log tail stopped: {self._error}",
                                    "Check the path and that the file is the engine's log",
                                    context=self.path))
        elif not self._windows:
            findings.append(Finding(
                "telemetry.log_empty",
                "the engine log had no stats lines during the probe",
                "vLLM prints every 10 s (VLLM_LOG_STATS_INTERVAL), SGLang every 40 decode "
                "steps, llama.cpp per request; is this the live log of this engine?",
                context=self.path, severity="info"))
        windows = flag_contaminated(list(self._windows), self.in_flight,
                                    list(self._spans.values()))
        return ObserverResult(windows=windows, findings=findings,
                              series={"log": {"path": self.path,
                                              "windows": len(windows)}})


def default_follow(engine: str | None, poll_s: float) -> LogFollow:
    """Follow a log from a byte offset with the log reader's own follower (telemetry/logs:
    rotation, truncation, idle flushes, bounded lines; the unfinished last line is never read
    for numbers)."""
    from decodescope.telemetry.logs.pipeline import iter_windows

    def follow(path: str, offset: int, stop: threading.Event) -> Iterator[EngineWindow]:
        yield from iter_windows(path, engine=engine, follow=True, stop=stop.is_set,
                                poll_s=poll_s, sleep=stop.wait, offset=offset)

    return follow
