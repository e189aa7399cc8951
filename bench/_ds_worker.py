"""Worker process of bench_client.py: decodescope's streaming client under load.

Keeps `concurrency` streams in flight until `requests` were sent (a new one starts when one
ends, as AIPerf's concurrency mode does), on the probe's own code path (make_client,
stream_request, compute), and prints one JSON object: per request the receipt time of every
token-carrying chunk (perf_counter, i.e. CLOCK_MONOTONIC on Linux, the simulator's truth
clock), the client's decode rate and mean ITL, and the CPU seconds the streaming used
(getrusage of this process; interpreter start and imports excluded).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time
from typing import Any

import orjson

from decodescope.probe import client as cl
from decodescope.records.request_metrics import compute
from decodescope.records.trace import RequestTrace


def _cpu_s() -> tuple[float, float]:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime, ru.ru_stime


def _record(trace: RequestTrace) -> dict[str, Any]:
    m = compute(trace)
    itl = m.itl_sum_s / m.itl_count if m.itl_sum_s is not None and m.itl_count else None
    return {
        "request_id": trace.request_id,
        "error": trace.error,
        "t_recv_s": [c.t_recv_s for c in trace.chunks if (c.tokens or 0) > 0],
        "tokens": trace.completion_tokens,
        "decode_rate_tps": m.decode_rate,
        "itl_mean_s": itl,
    }


async def _run(url: str, body: dict[str, Any], concurrency: int, requests: int,
               path: str, out: list[RequestTrace]) -> None:
    """The traces go to `out`, not into the result: at exit, asyncio.run (CPython 3.11) formats
    the SIGINT handler's repr, which holds the main task and its result, so a returned list
    of traces would be repr'd chunk by chunk (~0.5 s of CPU per 100k chunks, for nothing)."""
    gate = asyncio.Semaphore(concurrency)

    async def one(client: Any) -> RequestTrace:
        async with gate:
            return await cl.stream_request(client, url, "/v1/chat/completions", body)

    async with cl.make_client(max_connections=max(8, concurrency)) as client:
        if path == "httpx" and isinstance(client, cl.ProbeClient):
            client.h1 = None  # the path the probe used before probe/h1.py (and still for https)
        out += await asyncio.gather(*[one(client) for _ in range(requests)])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--body", required=True, help="request body as JSON")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--requests", type=int, default=1)
    ap.add_argument("--path", choices=["h1", "httpx"], default="h1")
    args = ap.parse_args(argv)
    body = json.loads(args.body)
    (u0, s0), t0 = _cpu_s(), time.perf_counter()
    traces: list[RequestTrace] = []
    asyncio.run(_run(args.url, body, args.concurrency, args.requests, args.path, traces))
    (u1, s1), t1 = _cpu_s(), time.perf_counter()
    out = {"cpu_s": (u1 - u0) + (s1 - s0), "sys_s": s1 - s0, "wall_s": t1 - t0,
           "requests": [_record(t) for t in traces]}
    sys.stdout.buffer.write(orjson.dumps(out))  # ~10x json's speed over 100k receipt times
    return 0


if __name__ == "__main__":
    sys.exit(main())
