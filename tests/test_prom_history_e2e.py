"""End to end: a real Prometheus (Debian's package) scrapes the simulator while its engine
changes between windows; triage of two Prometheus windows agrees with triage of the same
windows from the engine's own log. A counter reset inside a window and a scrape gap are said.

Phases (each its own simulator process on one port, its own vLLM-format log):
  A  speculation on (k=4), code content           the baseline
  B  speculation off (k=0), code content          "speculation off"
  C  speculation on (k=4), prose content, a counter reset inside and a scrape gap
  D  speculation on (k=4), code content, steps 30 % slower (asserted same caliber)
Numbers are SIMULATED. Needs `prometheus` on PATH (./dev test installs it); skipped without.
"""

from __future__ import annotations

import http.server
import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import pytest

from decodescope.cli.main import main
from decodescope.sim import SimConfig, SimServer

PROMETHEUS = shutil.which("prometheus")
pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.skipif(PROMETHEUS is None, reason="Prometheus is not installed (Debian package "
                       "`prometheus`; ./dev test installs it with apt-get)"),
]
PHASE_S = 20.0  # real seconds of load per phase (10 windows of LOG_INTERVAL_S each)
LOG_INTERVAL_S = 2.0  # the simulator's log interval = the query step: the same windows
SCRAPE = "500ms"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MetricsProxy:
    """Prometheus scrapes the simulator through this proxy; `fail_for(s)` makes its scrapes
    fail for a while (a scrape gap, the engine itself untouched)."""

    def __init__(self) -> None:
        self.target = ""
        self.fail_until = 0.0
        proxy = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                if time.time() < proxy.fail_until or not proxy.target:
                    self.send_error(503)
                    return
                try:
                    with urllib.request.urlopen(proxy.target + self.path, timeout=5) as r:  # noqa: S310
                        body = r.read()
                        ctype = r.headers.get("Content-Type", "text/plain")
                except OSError:
                    self.send_error(503)
                    return
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def fail_for(self, s: float) -> None:
        self.fail_until = time.time() + s

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def load(url: str, content: str, stop: threading.Event) -> None:
    """Back-to-back streamed requests, one at a time (running = 1)."""
    body = json.dumps({"model": "sim-vllm/decodescope-sim", "prompt": "x", "max_tokens": 4000,
                       "ignore_eos": True, "stream": True, "temperature": 0.0}).encode()
    while not stop.is_set():
        req = urllib.request.Request(url + "/v1/completions", data=body, headers={
            "Content-Type": "application/json", "X-Sim-Class": content})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:  # noqa: S310
                while not stop.is_set() and r.read(4096):
                    pass
        except OSError:
            time.sleep(0.2)


@contextmanager
def phase(port: int, log: Path, content: str, **cfg: object) -> Iterator[tuple[float, float]]:
    sim = SimServer(SimConfig(port=port, seed=5, log_path=str(log),  # type: ignore[arg-type]
                              log_interval_s=LOG_INTERVAL_S, **cfg)).start_in_thread()
    stop = threading.Event()
    th = threading.Thread(target=load, args=(sim.url, content, stop), daemon=True)
    th.start()
    span = [time.time(), 0.0]
    try:
        yield span  # type: ignore[misc]
    finally:
        span[1] = time.time()
        stop.set()
        th.join(timeout=10)
        sim.stop()


def wait_ready(server: str, deadline_s: float = 90.0) -> None:
    t_end = time.monotonic() + deadline_s
    while time.monotonic() < t_end:
        try:
            with urllib.request.urlopen(server + "/-/ready", timeout=2) as r:  # noqa: S310
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise AssertionError("Prometheus did not become ready")


DASHBOARD = Path(__file__).parent.parent / "deploy" / "grafana-dashboard.json"


def dashboard_exprs() -> list[tuple[str, str]]:
    """The engine panels' queries with Grafana's variables filled in for this Prometheus."""
    out = []
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for t in panel.get("targets") or []:
            e = t["expr"]
            if "engine_job" not in e:
                continue
            e = (e.replace("$__rate_interval", "10s").replace("$engine_job", "vllm")
                 .replace("$engine_instance", ".*"))
            out.append((e, "vllm MAL" if t["legendFormat"].startswith("MAL") else t["legendFormat"]))
    assert len(out) >= 6
    return out


def instant(server: str, expr: str, t: float) -> list[dict]:
    q = urllib.parse.urlencode({"query": expr, "time": f"{t:.3f}"})
    with urllib.request.urlopen(f"{server}/api/v1/query?{q}", timeout=10) as r:  # noqa: S310
        doc = json.loads(r.read())
    assert doc["status"] == "success", (expr, doc)
    return doc["data"]["result"]


def stamp(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%Y-%m-%dT%H:%M:%S")


def rng(a: float, b: float) -> str:
    """The middle of a phase, whole seconds: a little after the start, before the end."""
    return f"{stamp(a + 6)}..{stamp(b - 2)}"


def triage_json(capsys: pytest.CaptureFixture[str], base: str, cur: str, *extra: str) -> dict:
    capsys.readouterr()
    code = main(["triage", cur, "--baseline", base, "--json", *extra])
    out = json.loads(capsys.readouterr().out)
    out["_code"] = code
    return out


def test_prometheus_windows_agree_with_log_windows(tmp_path: Path, capsys):
    sim_port = free_port()
    proxy = MetricsProxy()
    proxy.target = f"http://127.0.0.1:{sim_port}"
    prom_port = free_port()
    (tmp_path / "prometheus.yml").write_text(
        f"global:\n  scrape_interval: {SCRAPE}\n  scrape_timeout: {SCRAPE}\n"
        "scrape_configs:\n  - job_name: vllm\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{proxy.port}']\n")
    err = (tmp_path / "prometheus.err").open("wb")
    prom = subprocess.Popen(
        [str(PROMETHEUS), f"--config.file={tmp_path / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prom_port}"], stdout=subprocess.DEVNULL, stderr=err)
    server = f"http://127.0.0.1:{prom_port}"
    wait_ready(server)
    logs = {p: tmp_path / f"engine-{p}.log" for p in "ABCD"}
    spans: dict[str, list[float]] = {}
    try:
        with phase(sim_port, logs["A"], "code", k=4) as s:
            time.sleep(PHASE_S)
        spans["A"] = s
        with phase(sim_port, logs["B"], "code", k=0) as s:
            time.sleep(PHASE_S)
        spans["B"] = s
        with phase(sim_port, logs["C"], "text", k=4, counter_reset_at_s=PHASE_S / 2) as s:
            time.sleep(PHASE_S * 0.7)
            proxy.fail_for(3.0)  # three seconds of failed scrapes: a scrape gap
            time.sleep(PHASE_S * 0.3 + 3.0)
        spans["C"] = s
        with phase(sim_port, logs["D"], "code", k=4, step_rate_hz=28.0) as s:
            time.sleep(PHASE_S)
        spans["D"] = s
        time.sleep(2.0)  # the last scrapes land

        def prom_sel(p: str) -> str:
            return f"prom:?job=vllm&step={LOG_INTERVAL_S:g}s@{rng(*spans[p])}"

        def log_sel(p: str) -> str:
            return f"{logs[p]}@{rng(*spans[p])}"

        pairs = {"speculation off": ("A", "B", ()), "content change": ("A", "C", ()),
                 "slower steps, asserted same": ("A", "D", ("--assume-same-caliber",))}
        results = {}
        for what, (b, c, extra) in pairs.items():
            v_log = triage_json(capsys, log_sel(b), log_sel(c), *extra)
            v_prom = triage_json(capsys, prom_sel(b), prom_sel(c), "--prometheus", server,
                                 *extra)
            results[what] = (v_log, v_prom)
            with capsys.disabled():
                print(f"\n{what}: log {v_log['label']!r} ({v_log['headline']}) / prometheus "
                      f"{v_prom['label']!r} ({v_prom['headline']})")
            assert v_prom["label"] == v_log["label"], (what, v_log["headline"], v_prom["headline"])
            assert v_prom["_code"] == v_log["_code"]
        assert results["slower steps, asserted same"][1]["label"] == "REGRESSION (step rate)"
        # speculation off: MAL 1 on the current side, said as such
        assert results["speculation off"][1]["current"]["spec_method"] == "off"
        # the content change is seen in MAL by both
        for v in results["content change"]:
            assert v["current"]["median"]["mal"] < v["baseline"]["median"]["mal"]

        # The dashboard's engine panels are valid PromQL over the same series, and their MAL
        # agrees with the Prometheus side's (rate() over 10 s vs counts over 2 s windows).
        a_mal = results["content change"][1]["baseline"]["median"]["mal"]
        for expr, ref in dashboard_exprs():
            got = instant(server, expr, spans["A"][1] - 3.0)
            if ref == "vllm MAL":
                assert got and abs(float(got[0]["value"][1]) / a_mal - 1) < 0.1, (got, a_mal)

        # `decodescope prom` on phase C: the counter reset and the scrape gap are said
        capsys.readouterr()
        assert main(["prom", f"job=vllm&step={LOG_INTERVAL_S:g}s", "--since",
                     stamp(spans["C"][0] + 2), "--until", stamp(spans["C"][1]),
                     "--prometheus", server, "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        flags = [f for w in out["windows"] for f in w["flags"]]
        notes = " ".join(out["notes"])
        assert "reset" in flags and "counter reset" in notes
        assert ("gap" in flags or "stale" in flags) and "scrape" in notes
        assert out["engine"] == "sim-vllm"
        # no negative or inflated count anywhere
        assert all((w["generation_tokens"] or 0) >= 0 for w in out["windows"])
    finally:
        prom.terminate()
        prom.wait(timeout=10)
        err.close()
        proxy.close()
