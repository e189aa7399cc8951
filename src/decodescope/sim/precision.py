"""Measure how precisely the simulator keeps its schedule, and how late a client sees chunks.

    python -m decodescope.sim.precision --concurrency 1 64 --mode thread process

`lateness` = truth emit time − scheduled deadline (server side). `client_delay` = the client's
receive time − truth emit time (transport + client parsing; both on the monotonic clock).
thread: the server runs in a thread of the measuring process (shares its GIL with the client);
process: `python -m decodescope.sim` in a subprocess (what a client benchmark should use).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx

from decodescope.sim.config import SimConfig
from decodescope.sim.server import SimServer


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    xs = sorted(values)
    return xs[min(len(xs) - 1, int(q / 100.0 * len(xs)))]


async def _one(client: httpx.AsyncClient, url: str, i: int, max_tokens: int) -> tuple[str, list[float]]:
    body = {"messages": [{"role": "user", "content": f"def task_{i}(): pass"}],
            "max_tokens": max_tokens, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    recv: list[float] = []
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
        rid = r.headers["x-request-id"]
        async for line in r.aiter_lines():
            if line.startswith("data: {") and '"delta":{"role"' not in line and '"choices":[]' not in line:
                recv.append(time.monotonic())
    return rid, recv


async def _run_clients(url: str, concurrency: int, max_tokens: int) -> list[tuple[str, list[float]]]:
    limits = httpx.Limits(max_connections=concurrency + 8)
    async with httpx.AsyncClient(trust_env=False, timeout=60, limits=limits) as client:
        return await asyncio.gather(*(_one(client, url, i, max_tokens) for i in range(concurrency)))


@contextlib.contextmanager
def _subprocess_sim(time_scale: float) -> Iterator[str]:
    cmd = [sys.executable, "-m", "decodescope.sim", "--port", "0", "--json",
           "--time-scale", str(time_scale)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())
        yield str(info["url"])
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


def measure(concurrency: int, mode: str = "thread", time_scale: float = 1.0,
            max_tokens: int = 200) -> dict[str, Any]:
    truths: list[dict[str, Any]] = []
    if mode == "thread":
        with SimServer(SimConfig(time_scale=time_scale)).start_in_thread() as sim:
            results = asyncio.run(_run_clients(sim.url, concurrency, max_tokens))
            truths = [sim.truth[rid].to_dict() for rid, _ in results]
    else:
        with _subprocess_sim(time_scale) as url:
            results = asyncio.run(_run_clients(url, concurrency, max_tokens))
            with httpx.Client(trust_env=False) as c:
                truths = [c.get(f"{url}/sim/truth/{rid}").json() for rid, _ in results]
    lateness, delay = [], []
    for (_, recv), truth in zip(results, truths, strict=True):
        chunks = truth["chunks"]
        lateness += [c["t_emit_monotonic_s"] - c["t_deadline_monotonic_s"] for c in chunks]
        delay += [t - c["t_emit_monotonic_s"] for t, c in zip(recv, chunks, strict=False)]
    ms = lambda v: None if v is None else round(v * 1000, 3)  # noqa: E731
    return {"mode": mode, "concurrency": concurrency, "time_scale": time_scale,
            "chunks": len(lateness),
            "lateness_ms": {"p50": ms(percentile(lateness, 50)), "p99": ms(percentile(lateness, 99)),
                            "max": ms(max(lateness) if lateness else None)},
            "client_delay_ms": {"p50": ms(percentile(delay, 50)), "p99": ms(percentile(delay, 99))}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 64])
    ap.add_argument("--mode", nargs="+", choices=["thread", "process"], default=["thread", "process"])
    ap.add_argument("--time-scale", type=float, default=1.0)
    ap.add_argument("--max-tokens", type=int, default=200)
    args = ap.parse_args(argv)
    for mode in args.mode:
        for c in args.concurrency:
            print(json.dumps(measure(c, mode, args.time_scale, args.max_tokens)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
