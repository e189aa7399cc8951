"""A caliber under a command line's load and prompt options (`probe`, `sweep`): each option is
a caliber element, so the derived caliber has its own identity."""

from __future__ import annotations

import dataclasses

from decodescope.caliber.resolve import check_values
from decodescope.caliber.spec import DEFAULT_RATE_REQUESTS, MAX_CONCURRENCY, Caliber


def derive_caliber(cal: Caliber, *, concurrency: int | None = None,
                   request_rate: float | None = None, burstiness: float | None = None,
                   num_requests: int | None = None, duration_s: float | None = None,
                   dataset: str | None = None) -> Caliber:
    """The caliber under the command line's load and prompt options: each one is a caliber
    element (a new identity; the caliber diff names it)."""
    if dataset is not None:
        from decodescope.caliber.dataset import read_dataset

        spec, _ = read_dataset(dataset)
        cal = dataclasses.replace(cal, dataset=spec)
    rate = request_rate if request_rate is not None else cal.load.request_rate
    if request_rate is not None and concurrency is None and cal.load.request_rate is None:
        concurrency = MAX_CONCURRENCY  # open loop: no cap unless one is given (as vLLM)
    if (rate is not None and num_requests is None and duration_s is None
            and cal.load.num_requests is None and cal.load.duration_s is None):
        num_requests = DEFAULT_RATE_REQUESTS
    cal = cal.with_load(concurrency, request_rate=request_rate, burstiness=burstiness,
                        num_requests=num_requests, duration_s=duration_s)
    check_values(cal, "command-line load options")
    return cal
