"""The simulator's vLLM-format log file: V1 Engine and SpecDecoding (V1-d) lines."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import httpx
import pytest

from decodescope.sim import SimConfig, SimServer
from decodescope.sim.engine import StepOut
from decodescope.sim.runtime import Engine
from decodescope.sim.vlog import VllmLogWriter

HEAD = r"^\(APIServer pid=\d+\) INFO \d\d-\d\d \d\d:\d\d:\d\d "
ENGINE_RE = re.compile(
    HEAD + r"\[loggers\.py:\d+\] Engine (\d{3}): Avg prompt throughput: (\d+\.\d) tokens/s, "
    r"Avg generation throughput: (\d+\.\d) tokens/s, Running: (\d+) reqs, Waiting: (\d+) reqs, "
    r"GPU KV cache usage: (\d+\.\d)%, Prefix cache hit rate: (\d+\.\d)%$"
)
SPEC_RE = re.compile(
    HEAD + r"\[metrics\.py:\d+\] SpecDecoding metrics: Mean acceptance length: (\d+\.\d\d), "
    r"Accepted throughput: (\d+\.\d\d) tokens/s, Drafted throughput: (\d+\.\d\d) tokens/s, "
    r"Accepted: (\d+) tokens, Drafted: (\d+) tokens, "
    r"Per-position acceptance rate: (\d\.\d{3}(?:, \d\.\d{3})*), Avg Draft acceptance rate: (\d+\.\d)%$"
)
# Verbatim from a real vLLM log (vllm-project/vllm#43295): the regexes must read real lines.
REAL = (
    "(APIServer pid=5020) INFO 05-19 10:30:43 [loggers.py:271] Engine 000: Avg prompt throughput: "
    "3279.0 tokens/s, Avg generation throughput: 1004.4 tokens/s, Running: 8 reqs, Waiting: 7 reqs, "
    "GPU KV cache usage: 82.5%, Prefix cache hit rate: 0.0%",
    "(APIServer pid=5020) INFO 05-19 10:30:43 [metrics.py:101] SpecDecoding metrics: Mean acceptance "
    "length: 2.77, Accepted throughput: 641.77 tokens/s, Drafted throughput: 725.37 tokens/s, "
    "Accepted: 6418 tokens, Drafted: 7254 tokens, Per-position acceptance rate: 0.929, 0.840, "
    "Avg Draft acceptance rate: 88.5%",
)


def test_regexes_read_real_vllm_lines() -> None:
    assert ENGINE_RE.match(REAL[0]) and SPEC_RE.match(REAL[1])


def test_log_file_lines(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    cfg = SimConfig(time_scale=0.05, log_path=str(log), log_interval_s=2.0)  # 0.1 s real
    with SimServer(cfg).start_in_thread() as sim, httpx.Client(trust_env=False) as client:
        for content in ("def f(): pass", "A story, please."):
            client.post(sim.url + "/v1/chat/completions", timeout=10, json={
                "messages": [{"role": "user", "content": content}], "max_tokens": 200,
                "ignore_eos": True})
        time.sleep(0.45)  # one idle line, then silence
    lines = log.read_text().splitlines()
    assert "SIMULATED" in lines[0] and "not a real vLLM engine" in lines[0]
    assert any("vLLM API server version 0.11.2+sim" in ln for ln in lines[:3])
    engine = [m for ln in lines if (m := ENGINE_RE.match(ln))]
    spec = [m for ln in lines if (m := SPEC_RE.match(ln))]
    assert all(ENGINE_RE.match(ln) or SPEC_RE.match(ln) for ln in lines[3:])
    assert spec and len(engine) >= len(spec)
    reqs = sim.truth.requests()
    assert sum(int(m[4]) for m in spec) == sum(r.accepted_tokens for r in reqs)
    assert sum(int(m[5]) for m in spec) == 4 * sum(r.drafts for r in reqs)
    for m in spec:  # the identities every real V1-d line satisfies
        per_pos = [float(x) for x in m[6].split(", ")]
        assert len(per_pos) == 4
        assert float(m[1]) == pytest.approx(1 + sum(per_pos), abs=0.01)
        assert float(m[7]) == pytest.approx(100 * int(m[4]) / int(m[5]), abs=0.06)
    assert float(engine[-1][3]) == 0.0  # the first idle interval prints 0.0 ...
    assert lines[-1] == engine[-1].string  # ... and later idle intervals print nothing
    assert float(engine[-2][3]) > 0


def test_idle_suppression_and_dilution(tmp_path: Path) -> None:
    async def scenario(emulate: bool) -> list[str]:
        cfg = SimConfig(emulate_idle_dilution=emulate)
        engine = Engine(cfg)
        writer = VllmLogWriter(engine, cfg, str(tmp_path / f"{emulate}.log"), "http://x")
        step = StepOut(4, 2, (), ("a", "b", "c"), None)
        spec_last = 0.0
        for t, active in ((10, True), (20, False), (30, False), (40, True)):
            for _ in range(10 if active else 0):
                engine._count(step)
            spec_last = writer.log_interval(float(t), float(t - 10), spec_last)
        writer.close()
        return (tmp_path / f"{emulate}.log").read_text().splitlines()

    lines = asyncio.run(scenario(True))
    engine = [m for ln in lines if (m := ENGINE_RE.match(ln))]
    spec = [m for ln in lines if (m := SPEC_RE.match(ln))]
    assert [float(m[3]) for m in engine] == [3.0, 0.0, 3.0]  # t=30 suppressed (idle twice)
    assert [m[4] for m in spec] == ["20", "20"]  # counts are per interval ...
    assert [float(m[2]) for m in spec] == [2.0, pytest.approx(20 / 30, abs=0.01)]  # ... rates diluted
    undiluted = [m for ln in asyncio.run(scenario(False)) if (m := SPEC_RE.match(ln))]
    assert [float(m[2]) for m in undiluted] == [2.0, 2.0]
