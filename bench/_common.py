"""Shared pieces of the client benchmarks: the simulator subprocess, CPU pinning, truth
look-ups, and the error / lag arithmetic. Everything here runs on CLOCK_MONOTONIC: the
simulator stamps `time.monotonic()` right after a chunk's bytes went to the socket, and the
clients stamp `time.perf_counter()` (the same clock on Linux; `check_clocks` insists)."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

SIM_CPU = 1  # the simulator gets one core ...
CLIENT_CPU = 0
SIM_MAIN = "import sys; from decodescope.sim.command import command; sys.exit(command())"  # ... and the client under test the other, so they never share a GIL or core


def check_clocks() -> None:
    for name in ("perf_counter", "monotonic"):
        impl = time.get_clock_info(name).implementation
        if "CLOCK_MONOTONIC" not in impl or "RAW" in impl:
            raise SystemExit(f"bench needs {name} on CLOCK_MONOTONIC (it is {impl})")


# Command prefixes that raise priority (set by the bench's --sched; empty = as started).
SIM_PRIORITY: list[str] = []
CLIENT_PRIORITY: list[str] = []


def pinned(cpu: int | None) -> list[str]:
    """A command prefix that runs a program on one core (empty when pinning is off)."""
    if cpu is None or not hasattr(os, "sched_setaffinity"):
        return []
    return ["taskset", "-c", str(cpu)]


def run_client(cmd: Sequence[str], timeout_s: float) -> tuple[str, float]:
    """Run a client on the client core at the client priority, in its own session; return
    its stdout and the CPU seconds it and all its descendants used (RUSAGE_CHILDREN, which
    nothing else adds to meanwhile). A run past `timeout_s` is killed with its whole group."""
    full = [*CLIENT_PRIORITY, *pinned(CLIENT_CPU), *cmd]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise SystemExit(f"client run took over {timeout_s:g} s, killed: {' '.join(full)[:300]}") from None
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"client failed ({proc.returncode}): {' '.join(full)[:300]}\n{out[-1500:]}{err[-1500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return out, cpu


def cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass
class Sim:
    url: str
    proc: subprocess.Popen[str]

    def truth(self, request_id: str) -> dict[str, Any]:
        with httpx.Client(trust_env=False, timeout=30) as c:
            r = c.get(f"{self.url}/sim/truth/{request_id}")
            r.raise_for_status()
            return dict(r.json())

    def truths(self) -> list[dict[str, Any]]:
        """Every request the simulator served, with its chunks (newest last)."""
        with httpx.Client(trust_env=False, timeout=60) as c:
            ids = [s["response_id"] for s in c.get(f"{self.url}/sim/truth").json()["requests"]]
            return [c.get(f"{self.url}/sim/truth/{i}").json() for i in ids]


@contextlib.contextmanager
def simulator(args: Sequence[str], cpu: int | None = SIM_CPU) -> Iterator[Sim]:
    """`decodescope sim --port 0 --json ARGS` in its own process, pinned to `cpu`."""
    # The sim command itself, not the whole CLI: a broken import elsewhere must not stop it.
    cmd = [*SIM_PRIORITY, *pinned(cpu), sys.executable, "-c", SIM_MAIN, "--port", "0", "--json", *args]
    with _server(cmd, "simulator") as (proc, info):
        yield Sim(str(info["url"]), proc)


@contextlib.contextmanager
def _server(cmd: list[str], what: str) -> Iterator[tuple[subprocess.Popen[str], dict[str, Any]]]:
    """A server process that prints one JSON line (its URL, ...) when ready; stopped on exit."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise SystemExit(f"{what} did not start: {' '.join(cmd)[:300]}")
        yield proc, json.loads(line)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


@dataclass
class Replay:
    """The replay emitter (bench/_emitter.py): Sim's interface, truth read from its files."""

    url: str
    proc: subprocess.Popen[str]
    truth_dir: Path
    info: dict[str, Any] = field(default_factory=dict)

    def truth(self, request_id: str) -> dict[str, Any]:
        """A request's truth (written when its stream ended: waits a little for the file)."""
        for _ in range(100):
            try:
                return self._truth(request_id)
            except KeyError:
                time.sleep(0.05)
        return self._truth(request_id)

    def _truth(self, request_id: str) -> dict[str, Any]:
        for name in (request_id, "chatcmpl-" + request_id):
            p = self.truth_dir / f"{name}.json"
            if p.exists():
                rec = json.loads(p.read_text())
                rec["chunks"] = [{"t_emit_monotonic_s": e, "t_deadline_monotonic_s": d, "tokens": n}
                                 for e, d, n in zip(rec.pop("t_emit_monotonic_s"),
                                                    rec.pop("t_deadline_monotonic_s"),
                                                    rec.pop("tokens"), strict=True)]
                return dict(rec)
        raise KeyError(request_id)

    def stats(self) -> list[dict[str, Any]]:
        """Emission counters of every emitter process (tokens, sends, CPU of the loop, ticks)."""
        return [json.loads(p.read_text()) for p in sorted(self.truth_dir.glob("stats-*.json"))]


EMITTER = str(Path(__file__).parent / "_emitter.py")


@contextlib.contextmanager
def emitter(body: dict[str, Any], step_rate_hz: float, cpus: Sequence[int]) -> Iterator[Replay]:
    """bench/_emitter.py serving `body`'s stream at `step_rate_hz`, one process per core of
    `cpus` (at the simulator's priority)."""
    tdir = Path(tempfile.mkdtemp(prefix="bench-emitter-"))
    cmd = [*SIM_PRIORITY, *pinned(cpus[0] if cpus else None), sys.executable, EMITTER,
           "--body", json.dumps(body), "--step-rate", str(step_rate_hz), "--truth-dir", str(tdir),
           "--procs", str(max(1, len(cpus))), "--cpus", ",".join(map(str, cpus))]
    try:
        with _server(cmd, "emitter") as (proc, info):
            yield Replay(str(info["url"]), proc, tdir, info)
    finally:
        shutil.rmtree(tdir, ignore_errors=True)


# ---- truth arithmetic ---------------------------------------------------------------------
def truth_emits(truth: dict[str, Any]) -> list[tuple[float, int]]:
    return [(c["t_emit_monotonic_s"], c["tokens"]) for c in truth["chunks"] if c["tokens"] > 0]


def true_decode_rate(truth: dict[str, Any]) -> float | None:
    """Tokens after the first chunk / time from the first chunk to the last (as the sim's
    `decode_rate_real_tps`, and as `compute().decode_rate` with steady_state_start 0)."""
    e = truth_emits(truth)
    if len(e) < 2 or e[-1][0] <= e[0][0]:
        return None
    return sum(n for _, n in e[1:]) / (e[-1][0] - e[0][0])


def true_itl_mean(truth: dict[str, Any]) -> float | None:
    """(t_last − t_first) / (tokens − 1): the mean of records/request_metrics.py's ITL samples."""
    e = truth_emits(truth)
    n = sum(k for _, k in e)
    return (e[-1][0] - e[0][0]) / (n - 1) if len(e) >= 2 and n > 1 else None


def rel_error(measured: float | None, true: float | None) -> float | None:
    if measured is None or true is None or true == 0:
        return None
    return abs(measured - true) / true


def lags_s(recv_s: Sequence[float], truth: dict[str, Any]) -> list[float]:
    """Receipt − true emit, chunk by chunk (token-carrying chunks, in order)."""
    emits = truth_emits(truth)
    if len(recv_s) != len(emits):
        raise ValueError(f"{len(recv_s)} received chunks vs {len(emits)} emitted "
                         f"for {truth['response_id']}")
    return [r - e for r, (e, _) in zip(recv_s, emits, strict=True)]


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (None for no data)."""
    if not values:
        return None
    xs = sorted(values)
    return xs[min(len(xs) - 1, max(0, int(round(q / 100.0 * len(xs) + 0.5)) - 1))]
