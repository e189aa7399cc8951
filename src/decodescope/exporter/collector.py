"""Outcomes -> Prometheus samples, computed at scrape time so nothing stale looks fresh.

A check's numbers (decode rate, MAL, step rate, band, verdict, exit code) are served only while
its last successful run is younger than STALE_FACTOR x its schedule; after that they are
dropped and `decodescope_check_stale` is 1. Timestamps, ages and counters are always served.
The fleet rule (exporter/fleet.py) runs over the fresh results at the same time: a check that
moved with the whole fleet is served as ENVIRONMENT, and `decodescope_fleet_*` says so once.

Alarms on changes, not on points: `decodescope_check_consecutive_regressions` counts the
check's consecutive runs with the judge's REGRESSION (BELOW_FLOOR / BELOW_BAND as served); any
other verdict resets it to 0, a run that failed (no verdict) leaves it as it was. The alert
rules (deploy/prometheus-rules.yml) need it at 2 or more, except under a floor the user gave
(`decodescope_check_floor_given`), or a confirmed change point of the check's stored history
(`decodescope_change_*`, exporter/changes.py) that is a REGRESSION of the stack.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from decodescope.exporter.changes import CheckChanges
from decodescope.exporter.config import CheckSpec, FleetConfig
from decodescope.exporter.fleet import FleetFinding, as_reported, fleet_finding
from decodescope.exporter.outcome import Outcome

LABELS = ("check", "baseline", "url")
P = "decodescope_check_"
REGRESSIONS = ("BELOW_FLOOR", "BELOW_BAND")  # the judge's REGRESSION (verdict/anchor.py ALARMS)


@dataclass(frozen=True)
class QueueStats:
    """The exporter's own concurrency at one moment (exporter/service.py)."""

    max_workers: int
    running: int
    waiting: int  # checks due (or, in a --once round, not started) waiting for a worker/host
    wait_s: float  # how long the longest of them has waited (0 when none)


@dataclass
class CheckState:
    spec: CheckSpec
    last: Outcome | None = None  # the latest run, success or error
    last_ok: Outcome | None = None  # the latest successful run
    runs: dict[str, int] = field(default_factory=dict)  # exit code (or "error") -> runs
    errors: dict[str, int] = field(default_factory=dict)  # error kind -> runs
    consecutive_regressions: int = 0  # the judge's REGRESSION, run after run (module doc)
    lateness_s: float | None = None  # how late the last run started after it was due
    changes: CheckChanges | None = None  # the detector over its stored runs (changes.py)

    def count_regression(self, o: Outcome, environment: bool = False) -> None:
        """Count `o` in the consecutive regressions: a REGRESSION verdict (not served as
        ENVIRONMENT) adds one, any other verdict resets, a failed run (no verdict) keeps."""
        if not o.ok:
            return
        if o.verdict in REGRESSIONS and not environment:
            self.consecutive_regressions += 1
        else:
            self.consecutive_regressions = 0

    def record(self, o: Outcome) -> None:
        self.last = o
        if o.ok:
            self.last_ok = o
            key = str(o.exit_code)
        else:
            key = "timeout" if o.timed_out else "error"
            kind = o.error_kind or "unknown"
            self.errors[kind] = self.errors.get(kind, 0) + 1
        self.runs[key] = self.runs.get(key, 0) + 1


def fresh_outcomes(states: dict[str, CheckState], now: float) -> dict[str, Outcome]:
    """Each check's last successful outcome that is not stale (name -> Outcome)."""
    return {n: s.last_ok for n, s in states.items()
            if s.last_ok is not None and now - s.last_ok.t_done_s <= s.spec.stale_after_s}


def current_finding(states: dict[str, CheckState], now: float) -> FleetFinding:
    """The fleet rule over the fresh results (call with the states' lock held)."""
    return fleet_finding(fresh_outcomes(states, now),
                         {n for n, s in states.items() if s.spec.control})


class FleetCollector(Collector):
    """A prometheus_client collector over the checks' states (thread-safe snapshot)."""

    def __init__(self, states: dict[str, CheckState], lock: threading.Lock,
                 clock: Callable[[], float] = time.time, *,
                 queue: Callable[[], QueueStats] | None = None,
                 config: FleetConfig | None = None) -> None:
        self._states, self._lock, self._clock = states, lock, clock
        self._queue, self._config = queue, config

    def describe(self) -> list[Metric]:
        return []  # no describe-time collect: the registry must not run a scrape at start

    def collect(self) -> Iterator[Metric]:
        now = self._clock()
        with self._lock:
            finding = current_finding(self._states, now)
            states = [(s.spec, s.last,
                       None if s.last_ok is None else as_reported(s.last_ok, n, finding),
                       dict(s.runs), dict(s.errors), s.consecutive_regressions, s.lateness_s)
                      for n, s in self._states.items()]
            changes = [(s.spec, s.changes) for s in self._states.values()]
        g = {name: GaugeMetricFamily(P + name, doc, labels=[*LABELS, *extra])
             for name, doc, extra in _GAUGES}
        runs = CounterMetricFamily(P + "runs", "Check runs by exit code ('error': the probe "
                                   "failed; 'timeout': stopped at timeout_s)",
                                   labels=[*LABELS, "exit_code"])
        errs = CounterMetricFamily(P + "probe_errors", "Check runs that failed, by error kind",
                                   labels=[*LABELS, "kind"])
        for spec, last, ok, nruns, nerrs, nreg, late in states:
            lab = [spec.name, spec.baseline, spec.url]
            for code, n in sorted(nruns.items()):
                runs.add_metric([*lab, code], n)
            for kind, n in sorted(nerrs.items()):
                errs.add_metric([*lab, kind], n)
            g["schedule_seconds"].add_metric(lab, spec.every_s)
            g["timeout_seconds"].add_metric(lab, spec.timeout_s)
            if last is not None:
                g["last_run_timestamp_seconds"].add_metric(lab, last.t_done_s)
                g["last_run_duration_seconds"].add_metric(lab, last.duration_s)
                g["last_run_ok"].add_metric(lab, 1.0 if last.ok else 0.0)
                g["last_run_timed_out"].add_metric(lab, 1.0 if last.timed_out else 0.0)
                g["consecutive_regressions"].add_metric(lab, float(nreg))
            if late is not None:
                g["start_lateness_seconds"].add_metric(lab, late)
            fresh = ok is not None and now - ok.t_done_s <= spec.stale_after_s
            g["stale"].add_metric(lab, 0.0 if fresh else 1.0)
            if ok is None:
                continue
            g["last_success_timestamp_seconds"].add_metric(lab, ok.t_done_s)
            g["result_age_seconds"].add_metric(lab, max(0.0, now - ok.t_done_s))
            if not fresh:
                continue  # never a stale number presented as fresh
            assert ok.verdict is not None and ok.exit_code is not None
            g["verdict"].add_metric([*lab, ok.verdict], 1.0)
            g["exit_code"].add_metric(lab, float(ok.exit_code))
            g["simulated"].add_metric(lab, 1.0 if ok.simulated else 0.0)
            g["floor_given"].add_metric(lab, 1.0 if ok.floor_given else 0.0)
            for name, v in (("decode_rate_tokens_per_second", ok.decode_rate),
                            ("change_ratio", ok.change),
                            ("mal", ok.mal), ("step_rate_per_second", ok.step_rate),
                            ("band_floor_tokens_per_second", ok.floor),
                            ("band_low_tokens_per_second", ok.band_lo),
                            ("band_ceiling_tokens_per_second", ok.band_hi)):
                if v is not None:  # "no data" is no sample, never 0
                    extra = [ok.source or ""] if name.startswith("decode_rate") else []
                    g[name].add_metric([*lab, *extra], v)
        yield from g.values()
        yield runs
        yield errs
        yield from _change_metrics(changes)
        yield from _fleet_metrics(finding)
        if self._queue is not None:
            yield from _queue_metrics(self._queue(), self._config)


_CHANGES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("history_runs", "Stored runs of the check (its anchor caliber, the newest ones) the "
     "change-point detector read after its last stored run", ()),
    ("points", "Confirmed change points in those runs (a single outlying run is never one)", ()),
    ("tail_runs", "The newest runs in a row beyond the last stretch's learned spread (negative: "
     "slower); 0 when fewer than two", ()),
    ("last_time_seconds", "When the newest confirmed change happened (its first run after)",
     ("word", "carrier")),
    ("last_ratio", "Decode rate after / before the newest confirmed change", ("word", "carrier")),
    ("regression", "1 when the newest confirmed change is a REGRESSION of the stack (a stack "
     "change moved the decode rate down), else 0", ("word", "carrier")),
)


def _change_metrics(changes: list[tuple[CheckSpec, CheckChanges | None]]) -> Iterator[Metric]:
    """`decodescope_change_*` per check; a history too short to judge serves its run count
    only (no change points is then no data, never 0)."""
    fams = {name: GaugeMetricFamily("decodescope_change_" + name, doc, labels=[*LABELS, *extra])
            for name, doc, extra in _CHANGES}
    for spec, ch in changes:
        if ch is None:
            continue
        lab = [spec.name, spec.baseline, spec.url]
        fams["history_runs"].add_metric(lab, float(ch.runs))
        if ch.status != "ok":
            continue
        for name, labels, v in ch.samples:
            short = name.removeprefix("decodescope_change_")
            extra = [labels[k] for k in next(e for n, _, e in _CHANGES if n == short)]
            fams[short].add_metric([*lab, *extra], v)
    yield from fams.values()


def _queue_metrics(q: QueueStats, cfg: FleetConfig | None) -> Iterator[Metric]:
    for name, doc, v in (
            ("max_workers", "Checks this exporter runs at once, at most (max_workers)",
             q.max_workers),
            ("checks_running", "Checks running now (each a worker process)", q.running),
            ("checks_waiting", "Checks due but waiting for a free worker or their host (the "
             "queue's depth)", q.waiting),
            ("queue_wait_seconds", "How long the longest-waiting due check has waited (0: "
             "none waits)", q.wait_s)):
        m = GaugeMetricFamily("decodescope_fleet_" + name, doc)
        m.add_metric([], float(v))
        yield m
    if cfg is not None:
        m = GaugeMetricFamily("decodescope_fleet_checks", "Checks this exporter instance runs, "
                              "by its shard (\"i/n\"; \"\" when unsharded)", labels=["shard"])
        m.add_metric(["" if cfg.shard is None else str(cfg.shard)], float(len(cfg.checks)))
        yield m
        m = GaugeMetricFamily("decodescope_fleet_checks_configured", "Checks in the fleet file, "
                              "every shard together")
        m.add_metric([], float(cfg.fleet_size))
        yield m


def _fleet_metrics(f: FleetFinding) -> Iterator[Metric]:
    env = GaugeMetricFamily("decodescope_fleet_environment", "1 when most of the fleet moved "
                            "the same direction together beyond noise (the probing host, "
                            "network or time of day): its checks are served as ENVIRONMENT, not "
                            "alarmed", labels=["direction"])
    env.add_metric([f.direction or ""], 1.0 if f.is_environment else 0.0)
    yield env
    judged = GaugeMetricFamily("decodescope_fleet_checks_judged", "Fresh checks the judge "
                               "compared with their anchor's runs (the fleet the rule sees)")
    judged.add_metric([], float(f.judged))
    yield judged
    moved = GaugeMetricFamily("decodescope_fleet_checks_moved", "Fresh checks whose decode rate "
                              "moved beyond noise, by direction", labels=["direction"])
    for d in ("down", "up"):
        moved.add_metric([d], float(f.counts.get(d, 0)))
    yield moved
    if f.shift is not None:
        shift = GaugeMetricFamily("decodescope_fleet_shift_ratio", "The movers' median relative "
                                  "change against their anchors (-0.05: 5 % slower)",
                                  labels=["direction"])
        shift.add_metric([f.direction or ""], f.shift)
        yield shift


_GAUGES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("decode_rate_tokens_per_second", "Median per-trial decode rate of the last check, in the "
     "baseline's source (client or engine)", ("source",)),
    ("change_ratio", "The judge's decode-rate change of the last check against the anchor's "
     "stored runs (current / anchor - 1)", ()),
    ("mal", "Mean acceptance length of the last check (engine)", ()),
    ("step_rate_per_second", "Verification steps / s / running request of the last check", ()),
    ("band_floor_tokens_per_second", "The baseline's floor: below it the check fails", ()),
    ("band_low_tokens_per_second", "The baseline band's lower edge", ()),
    ("band_ceiling_tokens_per_second", "The baseline band's upper edge", ()),
    ("verdict", "1 for the last check's verdict (OK, BELOW_FLOOR, BELOW_BAND: the judge's "
     "regression; ABOVE_BAND: an improvement, no alarm; ENVIRONMENT: moved with the whole "
     "fleet, no alarm; CONTAMINATED, INCONCLUSIVE, CALIBER_MISSED)", ("verdict",)),
    ("exit_code", "Exit code of the check as served (0 ok or improvement, 1 regression, 3 "
     "inconclusive or ENVIRONMENT, 6 caliber missed)", ()),
    ("simulated", "1 when the endpoint is decodescope's simulator", ()),
    ("floor_given", "1 when the baseline's floor is the user's own (baseline set --floor or "
     "--band): under it the check pages at once", ()),
    ("consecutive_regressions", "The check's consecutive runs with the judge's REGRESSION "
     "(BELOW_FLOOR / BELOW_BAND as served); another verdict resets it, a failed run keeps it",
     ()),
    ("start_lateness_seconds", "How late the last run started after it was due (waiting for a "
     "worker or its host)", ()),
    ("stale", "1 when no successful check within 2x the schedule: its numbers are not served",
     ()),
    ("last_success_timestamp_seconds", "When the last successful check finished", ()),
    ("result_age_seconds", "Seconds since the last successful check finished", ()),
    ("last_run_timestamp_seconds", "When the last check run finished (success or error)", ()),
    ("last_run_duration_seconds", "How long the last check run took", ()),
    ("last_run_ok", "1 when the last check run succeeded, 0 when it failed", ()),
    ("last_run_timed_out", "1 when the last check run was stopped at its timeout_s (no "
     "verdict)", ()),
    ("schedule_seconds", "The check's schedule (every_s)", ()),
    ("timeout_seconds", "The check's time bound (timeout_s): a run still going is stopped", ()),
)
