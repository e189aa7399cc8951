"""The real llama.cpp pair of the end-to-end tests, shared by the session (tests/conftest.py:
`llamacpp_pair`): one n-gram llama-server (-t 2) and `decodescope probe` (CLI, --json, --log)
once per demo caliber, code rewrite then varied prose. tests/test_e2e_llamacpp_decompose.py
checks the runs' numbers, tests/test_report_browser.py renders the same two runs: the probes
run once per session, not once per module.

The engine starts on first use and stops at the end of each module that used it (`stop`), so
no real engine outlives its module; the stored runs stay for the session.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from decodescope.cli.main import main
from decodescope.engines import process, server
from decodescope.engines.install import find_install
from decodescope.engines.server import EngineSettings
from decodescope.engines.state import RunningEngine

INSTALL = find_install()
CALIBERS = ("demo-code-rewrite", "demo-varied-prose")
TRIALS = 2
SETTINGS = EngineSettings(port=0, threads=2, spec="ngram")


class Pair:
    def __init__(self, tmp: Path) -> None:
        self.store = tmp / "runs.db"
        self.state_dir = tmp / "engine-state"
        self.runs: dict[str, dict[str, Any]] = {}
        self._engine: RunningEngine | None = None

    def engine(self) -> RunningEngine:
        if self._engine is None:
            assert INSTALL is not None, "run `decodescope engine install`"
            self._engine = server.start_engine(SETTINGS, install=INSTALL,
                                               state_dir=self.state_dir)
        return self._engine

    def stop(self) -> None:
        eng, self._engine = self._engine, None
        if eng is None:
            return
        server.stop_engine(eng.port, state_dir=self.state_dir)
        if eng.pid in process.CHILDREN:  # our own child, whatever its record says
            server.terminate_tree(eng.pid, server.STOP_GRACE_S)

    def run(self, cal: str) -> dict[str, Any]:
        """`decodescope probe` (CLI, --json, --log) once per caliber; the stored run with
        traces. The code rewrite goes first whatever asks first (the order the pair's runs
        had when each module probed its own)."""
        if cal not in self.runs:
            for c in CALIBERS[:CALIBERS.index(cal) + 1]:
                if c not in self.runs:
                    self.runs[c] = self._probe(c)
        return self.runs[cal]

    def _probe(self, cal: str) -> dict[str, Any]:
        from decodescope.store import runs as sr
        from decodescope.store.connect import open_store

        engine = self.engine()
        rc = main(["probe", engine.url, "--caliber", cal, "--trials", str(TRIALS),
                   "--store", str(self.store), "--json", "--no-fingerprint",
                   "--log", str(engine.log_path)])
        assert rc == 0
        st = open_store(str(self.store))
        try:
            run = sr.get_run(st, sr.resolve_run_id(st, "last"))
        finally:
            st.close()
        assert run.caliber_ref == f"{cal}@1"
        return run.to_dict(with_traces=True)
