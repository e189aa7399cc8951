"""End to end: `decodescope history` over a real Prometheus (Debian's package) that scrapes the
simulator across a restart whose engine steps 30 % slower: the change is found at the restart,
carried by the step rate, and said to be at an engine restart (what it restarted with is not
in Prometheus). Numbers are SIMULATED. Needs `prometheus` on PATH; skipped without."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from test_prom_history_e2e import PROMETHEUS, free_port, phase, stamp, wait_ready

from decodescope.cli.main import main

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(PROMETHEUS is None, reason="Prometheus is not installed (Debian package "
                       "`prometheus`; ./dev test installs it with apt-get)"),
]
PHASE_S = 24.0
STEP_S = 2.0


def test_history_over_prometheus_finds_the_restart(tmp_path: Path, capsys):
    sim_port, prom_port = free_port(), free_port()
    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 500ms\n  scrape_timeout: 500ms\n"
        "scrape_configs:\n  - job_name: vllm\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{sim_port}']\n")
    prom = subprocess.Popen(
        [str(PROMETHEUS), f"--config.file={tmp_path / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prom_port}"], stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    server = f"http://127.0.0.1:{prom_port}"
    try:
        wait_ready(server)
        with phase(sim_port, tmp_path / "a.log", "code", k=4) as a:
            time.sleep(PHASE_S)
        with phase(sim_port, tmp_path / "b.log", "code", k=4, step_rate_hz=28.0) as b:
            time.sleep(PHASE_S)
        time.sleep(2.0)  # the last scrapes land
        sel = (f"prom+{server}/?job=vllm&step={STEP_S:g}s@{stamp(a[0] + 4)}..{stamp(b[1] - 2)}")
        capsys.readouterr()
        code = main(["history", sel, "--format", "json"])
        out = json.loads(capsys.readouterr().out)
    finally:
        prom.terminate()
        prom.wait(10)
    restart = next(i for i, p in enumerate(out["points"]) if p["t"] >= a[1])
    (c,) = out["changes"]
    assert abs(c["index"] - restart) <= 1, (c["index"], restart, out["points"])
    assert c["carried_by"] == "step rate" and c["decode"]["rel"] < -0.2
    assert c["word"] == "SHIFT" and "restart" in c["label"] and c["origin"] == "restart"
    assert code == 0  # what the engine restarted with is unseen: not a stack REGRESSION
