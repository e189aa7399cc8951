"""Load shape of one trial (caliber `[load]`, docs/peers.md): which body request j sends, and
when the requests of a load period are sent.

- closed loop: `concurrency` streams; each sends its next request when its last one ended,
  until `num_requests` were sent or `duration_s` has passed (in-flight requests finish).
- open loop: arrivals at `request_rate` per second with gamma-distributed gaps of shape
  `burstiness` and mean 1/rate (vLLM's `--burstiness`: 1 is a Poisson process, lower is
  burstier), at most `concurrency` in flight (vLLM's `--max-concurrency`).

Arrival times are drawn from a PRNG seeded by the trial index: a rerun repeats them.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from decodescope.caliber.spec import Caliber
from decodescope.probe.request import build_body, with_seed
from decodescope.records.trace import RequestTrace

Send = Callable[[int], Awaitable[RequestTrace]]  # request j of the trial -> its trace
ARRIVAL_SEED = 0x5EED  # base of the arrival PRNG's seed (plus the trial index)


class RequestBodies:
    """The body of request j of a probe (j counts the counted requests across trials): the
    caliber's prompt, or the dataset's entry for j; the seed schedule applied."""

    def __init__(self, cal: Caliber, base: dict[str, Any], model: str | None):
        self.cal, self.base, self.model = cal, base, model
        self.sampler = None
        if cal.dataset is not None:
            from decodescope.caliber.dataset import Sampler, load_entries

            self.sampler = Sampler(cal.dataset, load_entries(cal.dataset))

    def _from_entry(self, entry: Any) -> dict[str, Any]:
        return build_body(self.cal, self.model, entry.prompt or "", entry.messages)

    def body(self, j: int) -> dict[str, Any]:
        base = self.base if self.sampler is None else self._from_entry(self.sampler.entry(j))
        return with_seed(base, self.cal, j)

    def warmup(self, i: int) -> dict[str, Any]:
        """Warm-up request i: the base body (no seed), or a dataset entry from the end of the
        order, so the first counted requests are not cached repeats."""
        if self.sampler is None:
            return self.base
        return self._from_entry(self.sampler.warmup_entry(i))


def arrival_gaps(rate: float, burstiness: float, seed: int) -> Iterator[float]:
    """Seconds between arrivals: gamma(shape=burstiness, scale=1/(rate*burstiness))."""
    rng = random.Random(ARRIVAL_SEED + seed)
    theta = 1.0 / (rate * burstiness)
    while True:
        yield rng.gammavariate(burstiness, theta)


async def load_period(cal: Caliber, send: Send, *, seed: int,
                      clock: Callable[[], float] = time.perf_counter) -> list[RequestTrace]:
    """Send one load period's requests; their traces in request order."""
    ld = cal.load
    limit = ld.num_requests
    deadline = clock() + ld.duration_s if ld.duration_s else None
    results: dict[int, RequestTrace] = {}

    def more(j: int) -> bool:
        return (limit is None or j < limit) and (deadline is None or clock() < deadline)

    if ld.request_rate is None:
        numbers = itertools.count()

        async def stream() -> None:
            for j in numbers:  # shared by the streams: each takes the next request number
                if not more(j):
                    return
                results[j] = await send(j)

        await asyncio.gather(*[stream() for _ in range(cal.concurrency)])
    else:
        slots = asyncio.Semaphore(cal.concurrency)

        async def one(j: int) -> None:
            async with slots:
                results[j] = await send(j)

        tasks = []
        gaps = arrival_gaps(ld.request_rate, ld.burstiness, seed)
        due = clock()
        for j in itertools.count():
            if not more(j) or (deadline is not None and due >= deadline):
                break
            wait = due - clock()
            if wait > 0:
                await asyncio.sleep(wait)
            tasks.append(asyncio.create_task(one(j)))
            due += next(gaps)
        await asyncio.gather(*tasks)
    return [results[j] for j in sorted(results)]
