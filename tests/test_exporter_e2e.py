"""End to end: a real Prometheus scrapes `decodescope exporter` checking the simulator, and the
example alert rule DecodescopeBelowFloor fires once the simulator's step rate drops below what
the anchor's floor allows (the simulator restarts on the same port, slower).

Needs Debian's `prometheus` (./dev test installs it); skipped with the reason without it.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from decodescope.cli.main import main
from decodescope.exporter import Exporter, parse_config
from decodescope.sim import SimConfig, SimServer

pytestmark = pytest.mark.timeout(180)

PROMETHEUS = shutil.which("prometheus")
DEPLOY = Path(__file__).parent.parent / "deploy"
ANCHOR = "demo-code-rewrite"  # CPU-sized anchor (as in test_baseline_sim.py)
DEADLINE_S = 90.0  # generous: the machine may be shared; the steps themselves take seconds


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as r:  # noqa: S310 — loopback only
        return json.loads(r.read())


def wait_for(what: str, fn, deadline_s: float = DEADLINE_S):
    t_end = time.monotonic() + deadline_s
    last = None
    while time.monotonic() < t_end:
        try:
            last = fn()
            if last:
                return last
        except OSError as e:  # not up yet
            last = e
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def query(prom: str, expr: str) -> list[dict]:
    q = urllib.parse.quote(expr)
    return get_json(f"{prom}/api/v1/query?query={q}")["data"]["result"]


def firing(prom: str, name: str) -> bool:
    alerts = get_json(f"{prom}/api/v1/alerts")["data"]["alerts"]
    return any(a["labels"]["alertname"] == name and a["state"] == "firing" for a in alerts)


@pytest.mark.skipif(PROMETHEUS is None, reason="Prometheus is not installed (Debian package "
                    "`prometheus`; ./dev test installs it with apt-get)")
def test_prometheus_alert_fires_when_the_step_rate_drops(tmp_path: Path, capsys):
    store = str(tmp_path / "runs.sqlite")
    port = free_port()
    fast = SimServer(SimConfig(time_scale=0.1, seed=3, port=port, step_rate_hz=40.0)
                     ).start_in_thread()
    url = fast.url
    sims = [fast]
    exp: Exporter | None = None
    prom_proc: subprocess.Popen[bytes] | None = None
    err = (tmp_path / "prometheus.err").open("wb")
    try:
        # anchor runs as a user takes them: enough of them, fingerprinted, for the stack's
        # run-to-run spread to be learned (with the prior, one run cannot decide ±10 %: the
        # check would say INCONCLUSIVE, never OK — issue 32)
        capsys.readouterr()
        assert main(["spread", url, "--caliber", ANCHOR, "--runs", "5", "--trials", "3",
                     "--wait", "0", "--store", store, "--json"]) == 0
        ids = ",".join(map(str, json.loads(capsys.readouterr().out)["runs"]))
        assert main(["baseline", "set", "anchor", "--caliber", ANCHOR, "--from-runs", ids,
                     "--store", store]) == 0
        cfg = parse_config({
            "exporter": {"listen": "127.0.0.1:0", "store": store},
            "check": [{"name": "sim", "baseline": "anchor", "url": url, "every_s": 2,
                       "trials": 3, "scrape": False, "fingerprint": False}]})
        exp = Exporter(cfg).start()
        prom_port = free_port()
        (tmp_path / "prometheus-rules.yml").write_text(
            (DEPLOY / "prometheus-rules.yml").read_text())
        (tmp_path / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "rule_files:\n  - prometheus-rules.yml\n"
            "scrape_configs:\n  - job_name: decodescope\n    static_configs:\n"
            f"      - targets: ['127.0.0.1:{exp.port}']\n")
        prom_proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=subprocess.DEVNULL, stderr=err)
        prom = f"http://127.0.0.1:{prom_port}"
        ok = wait_for("Prometheus to scrape a passing check", lambda: query(
            prom, 'decodescope_check_verdict{check="sim",verdict="OK"} == 1'))
        assert ok[0]["metric"]["baseline"] == "anchor"
        assert query(prom, "decodescope_check_band_floor_tokens_per_second")
        assert not firing(prom, "DecodescopeBelowFloor")

        fast.stop()  # the same endpoint, now stepping at half the rate
        sims.append(SimServer(SimConfig(time_scale=0.1, seed=3, port=port, step_rate_hz=20.0)
                              ).start_in_thread())
        wait_for("the DecodescopeBelowFloor alert to fire",
                 lambda: firing(prom, "DecodescopeBelowFloor"))
        # a change, not a point: the alert needs two consecutive regression verdicts
        assert query(prom, "max_over_time(decodescope_check_consecutive_regressions"
                           '{check="sim"}[5m]) >= 2')
        below = query(prom, "decodescope_check_decode_rate_tokens_per_second < on(check) "
                            "decodescope_check_band_floor_tokens_per_second")
        assert below and below[0]["metric"]["check"] == "sim"
    finally:
        if prom_proc is not None:
            prom_proc.terminate()
            prom_proc.wait(timeout=10)
        err.close()
        if exp is not None:
            exp.stop()
        for s in sims:
            s.stop()
