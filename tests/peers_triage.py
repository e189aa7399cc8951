"""Shared by the peer-import tests: probe the simulator the fixtures were written against and
triage that probe against an imported run."""

from __future__ import annotations

import json
from typing import Any

import pytest

from decodescope.cli.main import main


def probe_sim_and_triage(capsys: pytest.CaptureFixture[str], store: str, baseline: int,
                         trials: int = 2) -> tuple[int, dict[str, Any]]:
    """A `demo-code-rewrite` probe of the fixtures' simulator (time scale 0.25, seed 7), then
    `triage last --baseline BASELINE --json`: (exit code, verdict document)."""
    from decodescope.sim import SimConfig, SimServer

    handle = SimServer(SimConfig(time_scale=0.25, seed=7)).start_in_thread()
    try:
        assert main(["probe", handle.url, "--caliber", "demo-code-rewrite", "--trials",
                     str(trials), "--store", store, "--no-fingerprint", "--json"]) == 0
    finally:
        handle.stop()
    capsys.readouterr()
    code = main(["triage", "last", "--baseline", str(baseline), "--store", store, "--json"])
    return code, json.loads(capsys.readouterr().out)
