"""Worker process for bench_client.py: decodescope's streaming client under load.

Runs `concurrency` streams at once, `waves` times, with the probe's own code path
(make_client, stream_request, compute), and prints one JSON object: per request the receive
time of every token-carrying chunk (perf_counter, which is CLOCK_MONOTONIC on Linux, the
simulator's truth clock), the client's decode rate and ITL, and the CPU seconds the streaming
part used (getrusage of this process, startup excluded).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time
from typing import Any

from decodescope.probe import client as cl
from decodescope.probe.metrics import compute
from decodescope.probe.trace import RequestTrace


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _record(trace: RequestTrace) -> dict[str, Any]:
    m = compute(trace)
    return {
        "request_id": trace.request_id,
        "error": trace.error,
        "t_recv_s": [c.t_recv_s for c in trace.chunks if (c.tokens or 0) > 0],
        "tokens": trace.completion_tokens,
        "decode_rate_tps": m.decode_rate,
        "itl_mean_s": (m.itl_sum_s / m.itl_count) if m.itl_sum_s is not None and m.itl_count else None,
    }


async def _run(url: str, body: dict[str, Any], concurrency: int, waves: int) -> list[RequestTrace]:
    traces: list[RequestTrace] = []
    async with cl.make_client(max_connections=max(8, concurrency)) as client:
        for _ in range(waves):
            traces += await asyncio.gather(*[
                cl.stream_request(client, url, "/v1/chat/completions", body)
                for _ in range(concurrency)])
    return traces


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--body", required=True, help="request body as JSON")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--waves", type=int, default=1)
    args = ap.parse_args(argv)
    body = json.loads(args.body)
    cpu0, t0 = _cpu_s(), time.perf_counter()
    traces = asyncio.run(_run(args.url, body, args.concurrency, args.waves))
    cpu1, t1 = _cpu_s(), time.perf_counter()
    out = {"client": "decodescope", "cpu_s": cpu1 - cpu0, "wall_s": t1 - t0,
           "requests": [_record(t) for t in traces]}
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
