"""Synthetic vLLM V1 logs from a request timeline (for the log-window truth tests; synthetic).

Requests of a given number of output tokens decode back to back (with idle gaps) at a known
step rate and tokens per step, so windows where a request starts or ends are partial, exactly
as on a real server. Each 10 s window prints vLLM's `Engine 000:` stats line (generation
throughput = tokens / interval, running at the line's time) and, when anything was drafted, its
`SpecDecoding metrics:` line (vLLM prints none for an interval without drafts).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Req:
    t0: float
    t1: float
    step_rate: float  # steps / s
    tps: float  # tokens per step (all steps; MAL = 1 + (tps − 1) / coverage)
    coverage: float  # drafted steps / steps


def timeline(t0: float, n: int, *, step_rate: float, tps: tuple[float, float], seed: int,
             tokens: tuple[int, int] = (400, 1200), gap: tuple[float, float] = (1.0, 12.0),
             coverage: tuple[float, float] = (1.0, 1.0)) -> list[Req]:
    """n requests one after another (c=1) with output lengths in tokens (their duration
    follows from the step rate, as on a real server)."""
    r = random.Random(seed)
    out, t = [], t0
    for _ in range(n):
        t += r.uniform(*gap)
        m, cov = r.uniform(*tps), r.uniform(*coverage)
        s = step_rate * r.uniform(0.97, 1.03)
        dur = r.randint(*tokens) / (s * m)
        out.append(Req(t, t + dur, s, m, cov))
        t += dur
    return out


def vllm_log(reqs: list[Req], *, k: int, interval: float = 10.0, config: str | None = None,
             spec: bool = True, pid: int = 4242, t_first: float | None = None) -> list[str]:
    """The log lines of a timeline; `config` is written first (a launch line)."""
    start = t_first if t_first is not None else reqs[0].t0 - 2 * interval
    end = reqs[-1].t1 + 2 * interval
    lines = [config] if config else []
    t = start + interval
    while t <= end + interval:
        a = t - interval
        tokens = steps = drafts = 0.0
        running = 0
        for q in reqs:
            ov = max(0.0, min(t, q.t1) - max(a, q.t0))
            if ov > 0:
                st = ov * q.step_rate
                steps += st
                tokens += st * q.tps
                drafts += st * q.coverage
            if q.t0 <= t < q.t1:
                running += 1
        gen = round(tokens)
        d = round(drafts) if spec else 0
        acc = gen - round(steps) if spec else 0
        stamp = datetime.fromtimestamp(t).strftime("%m-%d %H:%M:%S")
        lines.append(f"(APIServer pid={pid}) INFO {stamp} [loggers.py:271] Engine 000: Avg prompt "
                     f"throughput: 0.0 tokens/s, Avg generation throughput: {gen / interval:.1f} "
                     f"tokens/s, Running: {running} reqs, Waiting: 0 reqs, GPU KV cache usage: "
                     f"1.0%, Prefix cache hit rate: 0.0%")
        if spec and d > 0 and acc >= 0:
            rate = acc / d / k
            per = ", ".join(f"{rate:.3f}" for _ in range(k))
            lines.append(f"(APIServer pid={pid}) INFO {stamp} [metrics.py:101] SpecDecoding "
                         f"metrics: Mean acceptance length: {1 + acc / d:.2f}, Accepted "
                         f"throughput: {acc / interval:.2f} tokens/s, Drafted throughput: "
                         f"{d * k / interval:.2f} tokens/s, Accepted: {acc} tokens, Drafted: "
                         f"{d * k} tokens, Per-position acceptance rate: {per}, Avg Draft "
                         f"acceptance rate: {100 * acc / (d * k):.1f}%")
        t += interval
    return lines
