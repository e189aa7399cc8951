"""The fleet keeps its schedule: a trickling endpoint (one byte a second) is stopped at its
check's timeout_s and recorded as timed out, while a healthy endpoint's checks keep running;
never two checks against one host at once (docs/exporter.md)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from decodescope.cli.main import main
from decodescope.exporter import Exporter, Outcome, parse_config, run_check_bounded
from decodescope.exporter.config import CheckSpec
from decodescope.sim import SimConfig, SimServer

pytestmark = pytest.mark.timeout(300)

ANCHOR = "demo-code-rewrite"  # CPU-sized anchor (as in test_baseline_sim.py)
SLOW_HOST = "127.0.0.2"  # another loopback address: another host to the scheduler


@contextmanager
def trickle_server(host: str = SLOW_HOST) -> Iterator[str]:
    """An HTTP server that answers every request one byte a second, forever."""
    srv = socket.socket()
    try:
        srv.bind((host, 0))
    except OSError as e:  # pragma: no cover - a system without 127.0.0.0/8 on loopback
        srv.close()
        pytest.skip(f"cannot bind {host}: {e}")
    srv.listen(16)
    srv.settimeout(0.2)
    stop = threading.Event()
    answer = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + b": x\n" * 10_000

    def serve(conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)
                for b in answer:
                    if stop.wait(1.0):
                        return
                    conn.sendall(bytes([b]))
            except OSError:
                return

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:  # the accept timeout (TimeoutError) too
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        yield f"http://{host}:{srv.getsockname()[1]}"
    finally:
        stop.set()
        t.join(5)
        srv.close()


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def of(s: dict[str, list[tuple[dict[str, str], float]]], metric: str, check: str,
       **labels: str) -> list[float]:
    return [v for lab, v in s.get(metric, []) if lab["check"] == check
            and all(lab.get(k) == x for k, x in labels.items())]


def test_a_trickling_endpoint_times_out_and_the_healthy_one_keeps_its_schedule(tmp_path: Path,
                                                                              capsys):
    store = str(tmp_path / "runs.sqlite")
    # a band wide enough that the simulator is inside it: the schedule is what is tested
    assert main(["baseline", "set", "anchor", "--caliber", ANCHOR, "--band", "1-1000000",
                 "--floor", "0.5", "--store", store]) == 0
    capsys.readouterr()
    events: list[tuple[str, float, float, Outcome]] = []  # check, start, end, outcome
    lock = threading.Lock()

    def runner(spec: CheckSpec, store_path: str | None) -> Outcome:
        t0 = time.monotonic()
        o = run_check_bounded(spec, store_path)
        with lock:
            events.append((spec.name, t0, time.monotonic(), o))
        return o

    def seen() -> tuple[list[tuple[float, float, Outcome]], list[tuple[float, float, Outcome]]]:
        with lock:
            return ([(a, b, o) for n, a, b, o in events if n == "healthy"],
                    [(a, b, o) for n, a, b, o in events if n == "slow"])

    sim = SimServer(SimConfig(time_scale=0.1, seed=3)).start_in_thread()
    try:
        with trickle_server() as slow_url:
            cfg = parse_config({"exporter": {"listen": "127.0.0.1:0", "store": store}, "check": [
                {"name": "slow", "baseline": "anchor", "url": slow_url, "every_s": 1,
                 "trials": 1, "timeout_s": 15, "scrape": False, "fingerprint": False},
                {"name": "healthy", "baseline": "anchor", "url": sim.url, "every_s": 1,
                 "trials": 1, "timeout_s": 120, "scrape": False, "fingerprint": False}]})
            exp = Exporter(cfg, runner=runner).start(serve=False)
            try:
                t_end = time.monotonic() + 240  # generous: a loaded 2-core box
                while time.monotonic() < t_end:
                    healthy, slow = seen()
                    if len(slow) >= 1 and len(healthy) >= 3:
                        break
                    time.sleep(0.25)
                text = exp.metrics_text()
                healthy, slow = seen()  # runs cut short by stop() below are not these
            finally:
                exp.stop(timeout_s=20)
    finally:
        sim.stop()
    assert len(slow) >= 1 and len(healthy) >= 3, (len(slow), len(healthy), events)
    # the slow endpoint: stopped at its bound, recorded as timed out, never a verdict
    for a, b, o in slow:
        assert o.timed_out and o.error_kind == "CheckTimeout", o
        assert o.verdict is None and o.exit_code is None and o.decode_rate is None
        assert b - a >= 15.0
    # the healthy endpoint kept its schedule while the slow check was held: a check of it
    # began and finished inside the slow check's first run (one at a time, it could not)
    a0, b0, _ = slow[0]
    assert any(a0 <= a and b <= b0 for a, b, _ in healthy), (slow[0], healthy)
    assert all(o.ok and o.verdict == "OK" for _, _, o in healthy), healthy
    s = samples(text)
    assert of(s, "decodescope_check_last_run_timed_out", "slow") == [1.0]
    assert of(s, "decodescope_check_runs_total", "slow", exit_code="timeout")[0] >= 1
    assert of(s, "decodescope_check_probe_errors_total", "slow", kind="CheckTimeout")[0] >= 1
    assert of(s, "decodescope_check_verdict", "slow") == []
    assert of(s, "decodescope_check_stale", "slow") == [1.0]
    assert of(s, "decodescope_check_timeout_seconds", "slow") == [15.0]
    assert of(s, "decodescope_check_verdict", "healthy", verdict="OK") == [1.0]
    assert of(s, "decodescope_check_stale", "healthy") == [0.0]


def test_never_two_checks_against_one_host_at_once_and_other_hosts_run_meanwhile():
    cfg = parse_config({"check": [
        {"name": "a1", "baseline": "b", "url": "http://gpu-a:8000", "every_s": 1},
        {"name": "a2", "baseline": "b", "url": "http://GPU-A:8001", "every_s": 1},
        {"name": "b", "baseline": "b", "url": "http://gpu-b:8000", "every_s": 1}]})
    lock = threading.Lock()
    active: dict[str, int] = {}
    peak: dict[str, int] = {}
    runs: dict[str, int] = {}
    overlap = threading.Barrier(2, timeout=60)  # a1's and b's first runs meet, or time out
    overlapped: list[bool] = []

    def runner(spec: CheckSpec, store: str | None) -> Outcome:
        with lock:
            active[spec.host] = active.get(spec.host, 0) + 1
            peak[spec.host] = max(peak.get(spec.host, 0), active[spec.host])
            runs[spec.name] = runs.get(spec.name, 0) + 1
            first = runs[spec.name] == 1 and spec.name in ("a1", "b")
        try:
            if first:
                try:
                    overlap.wait()
                    overlapped.append(True)
                except threading.BrokenBarrierError:
                    overlapped.append(False)
            time.sleep(0.05)
        finally:
            with lock:
                active[spec.host] -= 1
        return Outcome(time.time(), 0.05, verdict="OK", exit_code=0, decode_rate=100.0,
                       source="client")

    exp = Exporter(cfg, runner=runner).start(serve=False)
    try:
        t_end = time.monotonic() + 120
        while time.monotonic() < t_end:
            with lock:
                if all(runs.get(n, 0) >= 3 for n in ("a1", "a2", "b")):
                    break
            time.sleep(0.1)
    finally:
        exp.stop()
    assert all(runs.get(n, 0) >= 3 for n in ("a1", "a2", "b")), runs
    assert peak["gpu-a"] == 1  # a1 and a2 share the host: never at once
    assert overlapped == [True, True]  # gpu-b ran while gpu-a was being checked


def test_run_once_runs_hosts_at_once_and_one_host_in_order():
    cfg = parse_config({"check": [
        {"name": "a1", "baseline": "b", "url": "http://gpu-a:8000"},
        {"name": "a2", "baseline": "b", "url": "http://gpu-a:8001"},
        {"name": "b", "baseline": "b", "url": "http://gpu-b:8000"}]})
    order: list[str] = []
    meet = threading.Barrier(2, timeout=60)

    def runner(spec: CheckSpec, store: str | None) -> Outcome:
        if spec.name in ("a1", "b"):
            meet.wait()  # raises BrokenBarrierError (an error outcome) if run one at a time
        order.append(spec.name)
        return Outcome(time.time(), 0.0, verdict="OK", exit_code=0)

    exp = Exporter(cfg, runner=runner)
    exp.run_once()
    assert sorted(order) == ["a1", "a2", "b"]
    assert order.index("a1") < order.index("a2")
