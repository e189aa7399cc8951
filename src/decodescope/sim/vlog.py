"""The vLLM-format log file: an Engine line and a SpecDecoding line (V1-d) every
`log_interval_s` simulated seconds, as vLLM's LoggingStatLogger / SpecDecodingLogging print them
(shared/reference/engine-formats.md §1.1, §1.2). The first line says the file is simulated.

Timestamps are wall-clock; throughputs are per *real* second (count / real elapsed), so the
file agrees with its own timestamps and with what a client measures. vLLM's quirks are kept:
idle intervals (no prompt or generation throughput in this and the previous one) print nothing,
and the SpecDecoding logger skips draft-less intervals without resetting its clock, so the next
printed throughputs are diluted over the idle time (the counts are not).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import TextIO

from decodescope.sim.config import SimConfig
from decodescope.sim.counters import Counters
from decodescope.sim.runtime import Engine

ENGINE_TAG = "loggers.py:271"
SPEC_TAG = "metrics.py:101"
ENGINE_FMT = (
    "Engine 000: Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, "
    "Running: %d reqs, Waiting: %d reqs, GPU KV cache usage: %.1f%%, Prefix cache hit rate: %.1f%%"
)
SPEC_FMT = (
    "SpecDecoding metrics: Mean acceptance length: %.2f, Accepted throughput: %.2f tokens/s, "
    "Drafted throughput: %.2f tokens/s, Accepted: %d tokens, Drafted: %d tokens, "
    "Per-position acceptance rate: %s, Avg Draft acceptance rate: %.1f%%"
)


def line(tag: str, message: str, wall_s: float | None = None, pid: int | None = None) -> str:
    stamp = time.strftime("%m-%d %H:%M:%S", time.localtime(time.time() if wall_s is None else wall_s))
    return f"(APIServer pid={os.getpid() if pid is None else pid}) INFO {stamp} [{tag}] {message}\n"


def spec_message(c: Counters, elapsed_s: float) -> str:
    per_pos = ", ".join(f"{n / c.drafts:.3f}" for n in c.accepted_per_pos)
    return SPEC_FMT % (
        1.0 + c.accepted_tokens / c.drafts,
        c.accepted_tokens / elapsed_s,
        c.draft_tokens / elapsed_s,
        c.accepted_tokens,
        c.draft_tokens,
        per_pos,
        100.0 * c.accepted_tokens / c.draft_tokens,
    )


class VllmLogWriter:
    def __init__(self, engine: Engine, cfg: SimConfig, path: str, url: str):
        self.engine = engine
        self.cfg = cfg
        self.url = url
        self._file: TextIO = open(path, "w", encoding="utf-8", buffering=1)  # noqa: SIM115
        self._last_prompt_tps = 0.0
        self._last_gen_tps = 0.0
        self._log_base = engine.lifetime.copy()  # at the last Engine line
        self._spec_base = engine.lifetime.copy()  # at the last SpecDecoding line

    def close(self) -> None:
        self._file.close()

    def _write(self, tag: str, message: str) -> None:
        self._file.write(line(tag, message))

    def header(self) -> None:
        c = self.cfg
        self._write("sim.py:1", (
            "decodescope SIMULATOR: this log is SIMULATED, not a real vLLM engine "
            f"(version {c.version}, seed {c.seed}, time_scale {c.time_scale}, k {c.k}, "
            f"step_rate_hz {c.step_rate_hz}, model {c.model})"
        ))
        self._write("api_server.py:1839", f"vLLM API server version {c.version}")
        self._write("api_server.py:1912", f"Starting vLLM API server 0 on {self.url}")

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self.header()
        interval = self.cfg.real_s(self.cfg.log_interval_s)
        t0 = loop.time()
        last_log = spec_last_log = t0
        n = 1
        while True:
            await asyncio.sleep(max(0.0, t0 + n * interval - loop.time()))
            n += 1
            now = loop.time()
            spec_last_log = self.log_interval(now, last_log, spec_last_log)
            last_log = now

    def log_interval(self, now: float, last_log: float, spec_last_log: float) -> float:
        """Write one interval's lines (times on one clock, real seconds); returns the
        SpecDecoding logger's new last-log time."""
        e = self.engine
        elapsed_s = max(now - last_log, 1e-9)
        counts = e.lifetime.minus(self._log_base)
        self._log_base = e.lifetime.copy()
        prompt_tps = counts.prompt_tokens / elapsed_s
        gen_tps = counts.generation_tokens / elapsed_s
        printed = any((prompt_tps, gen_tps, self._last_prompt_tps, self._last_gen_tps))
        self._last_prompt_tps, self._last_gen_tps = prompt_tps, gen_tps
        if printed:
            self._write(ENGINE_TAG, ENGINE_FMT % (
                prompt_tps, gen_tps, e.num_running, e.num_waiting, 100.0 * e.kv_usage, 0.0,
            ))
        spec = e.lifetime.minus(self._spec_base)
        if not spec.drafts:  # vLLM returns early here without resetting its clock
            return spec_last_log if self.cfg.emulate_idle_dilution else now
        if printed:
            self._write(SPEC_TAG, spec_message(spec, max(now - spec_last_log, 1e-9)))
        self._spec_base = e.lifetime.copy()
        return now
