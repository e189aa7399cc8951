"""The real vLLM server of the end-to-end tests, shared by the session (tests/conftest.py:
`vllm_lab`): tests/test_e2e_vllm.py and tests/test_prom_history_vllm_e2e.py read the same
n-gram server and the same probes, so vLLM starts twice per run (n-gram, then speculation
off), not three times, and the code / prose probes run once.

One server at a time (~7 GB each). Where Debian's `prometheus` is installed, a throwaway
Prometheus scrapes the n-gram server from its start to the end of the session: the Prometheus
test reads the very spans the probes ran in, after the server has gone if need be.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import IO, Any

import httpx
import psutil
from test_prom_history_e2e import free_port, wait_ready

from decodescope.caliber.resolve import resolve
from decodescope.engines import process
from decodescope.engines.server import stop_engine
from decodescope.engines.state import RunningEngine
from decodescope.engines.vllm_install import find_vllm_install, platform_report
from decodescope.engines.vllm_server import VLLM_STOP_GRACE_S, VllmSettings, start_vllm
from decodescope.records.stored_run import StoredRun
from decodescope.run.runner import ProbeSettings, prepare, run_probe
from decodescope.run.setup import build_observers, collect_fp
from decodescope.store import runs as sr
from decodescope.store.connect import open_store
from decodescope.verdict.side_resolve import resolve_side

PLATFORM = platform_report()
INSTALL = find_vllm_install() if PLATFORM.ok else None
PROMETHEUS = shutil.which("prometheus")
LOG_INTERVAL_S = 2.0  # engine stats lines every 2 s: several windows per probe
# Both servers run --enforce-eager: it halves the start (no torch.compile, which vLLM redoes at
# every start) and changes nothing the tests look at; the pairs differ only in speculation.
EAGER = True
PROM_JOB = "vllm"
# Trials per probe (key), 3 unless named. Varied prose decodes at a third of the code rewrite's
# rate (≈ 9 tok/s here): its probe is the longest. The tests that read it compare calibers
# (decided by the caliber, not by statistics) and MAL over its windows (768 tokens, ≈ 380
# steps, 2-s windows): two trials do.
TRIALS = {"code-mal": 2, "prose": 2}

_METRIC = re.compile(r"^(vllm:[a-z_]+)(\{[^}]*\})?\s+([0-9.eE+-]+)$")


def metrics(url: str) -> dict[str, float]:
    """vLLM's counters, summed over label sets (an independent reading of /metrics)."""
    text = httpx.get(f"{url}/metrics", timeout=10.0, trust_env=False).text
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _METRIC.match(line.strip())
        if m:
            out[m[1]] = out.get(m[1], 0.0) + float(m[3])
    return out


@dataclasses.dataclass
class Probe:
    run_id: int
    start_s: float
    end_s: float
    before: dict[str, float]
    after: dict[str, float]


class Lab:
    """One vLLM server at a time; probes and their runs are kept for every test."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.store_path = str(tmp / "runs.db")
        self.engine: RunningEngine | None = None
        self.spec: str | None = None
        self.probes: dict[str, Probe] = {}
        self.logs: dict[str, Path] = {}
        self.children: list[int] = []
        self.start_s: dict[str, float] = {}
        self.prom_url: str | None = None
        self._prom: subprocess.Popen[bytes] | None = None
        self._prom_err: IO[bytes] | None = None

    def server(self, spec: str) -> RunningEngine:
        if self.engine is not None and self.spec == spec:
            return self.engine
        self.stop()
        t0 = time.monotonic()
        self.engine = start_vllm(VllmSettings(port=0, spec=spec,  # type: ignore[arg-type]
                                              enforce_eager=EAGER,
                                              log_stats_interval_s=LOG_INTERVAL_S),
                                 install=INSTALL)
        self.start_s[spec] = time.monotonic() - t0
        self.spec = spec
        self.logs[spec] = self.engine.log_path
        self.children = [c.pid for c in psutil.Process(self.engine.pid).children(recursive=True)]
        if spec == "ngram" and PROMETHEUS is not None and self._prom is None:
            self._start_prometheus(self.engine.port)
        return self.engine

    def _start_prometheus(self, port: int) -> None:
        prom_port = free_port()
        cfg = self.tmp / "prometheus.yml"
        cfg.write_text(
            "global:\n  scrape_interval: 500ms\n  scrape_timeout: 500ms\n"
            f"scrape_configs:\n  - job_name: {PROM_JOB}\n    static_configs:\n"
            f"      - targets: ['127.0.0.1:{port}']\n")
        self._prom_err = (self.tmp / "prometheus.err").open("wb")
        self._prom = subprocess.Popen(
            [str(PROMETHEUS), f"--config.file={cfg}", f"--storage.tsdb.path={self.tmp / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=subprocess.DEVNULL, stderr=self._prom_err)
        self.prom_url = f"http://127.0.0.1:{prom_port}"
        wait_ready(self.prom_url)

    def stop(self) -> None:
        if self.engine is None:
            return
        stop_engine(self.engine.port, grace_s=VLLM_STOP_GRACE_S)
        if self.engine.pid in process.CHILDREN:
            process.terminate(self.engine.pid, VLLM_STOP_GRACE_S)
        # keep the log: a later start on the same port would overwrite it
        kept = self.tmp / f"vllm-{self.spec}.log"
        kept.write_bytes(self.engine.log_path.read_bytes())
        self.logs[str(self.spec)] = kept
        self.engine = None

    def close(self) -> None:
        """The server and Prometheus stopped (the end of the session)."""
        try:
            self.stop()
        finally:
            if self._prom is not None:
                self._prom.terminate()
                self._prom.wait(timeout=10)
                self._prom = None
            if self._prom_err is not None:
                self._prom_err.close()

    def probe(self, key: str, spec: str, caliber: str) -> Probe:
        if key in self.probes:
            return self.probes[key]
        eng = self.server(spec)
        settings = ProbeSettings(url=eng.url, caliber=resolve(caliber),
                                 trials=TRIALS.get(key, 3),
                                 warmup=0 if key == "code-mal" else 1,
                                 labels={"e2e": "vllm", "step": key})
        prepared = prepare(settings)
        # let the previous probe's last stats line be written: the windows stamped after
        # `before` then hold this probe's tokens only
        time.sleep(LOG_INTERVAL_S * 1.6)
        with open_store(self.store_path) as st:
            before = metrics(eng.url)
            t0 = time.time()
            outcome = run_probe(
                settings, st, prepared=prepared,
                observers=build_observers(settings, prepared[0], log_path=str(eng.log_path),
                                          scrape=True, scrape_interval_s=0.5),
                fingerprint=collect_fp(settings, str(eng.log_path), ()))
            t1 = time.time()
            after = metrics(eng.url)
        self.probes[key] = Probe(outcome.run_id, t0, t1, before, after)
        return self.probes[key]

    def run(self, key: str) -> StoredRun:
        with open_store(self.store_path) as st:
            return sr.get_run(st, self.probes[key].run_id, with_traces=False)

    def side(self, key: str) -> Any:
        with open_store(self.store_path) as st:
            return resolve_side(str(self.probes[key].run_id), store=st)
