"""A check's stored history through the change-point detector (verdict/history.py).

After a check's run is stored, the exporter reads that check's newest HISTORY_RUNS stored runs
(label `check=NAME`, the baseline's anchor caliber), runs `verdict.history.detect` over them in
its own process (the worker has returned: the probe's timing is not disturbed) and keeps
`verdict.history.change_samples` for /metrics: confirmed change points, the newest change's
time, size, carrier and word, and the newest runs in a row beyond the learned spread. A single
slow run is never a change point (nor a tail): the alert on a confirmed REGRESSION of the stack
(deploy/prometheus-rules.yml) alarms on changes, not on points.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

# The newest runs of a check the detector reads (cost bounded: 200 runs at a 15-minute
# schedule is two days of history).
HISTORY_RUNS = 200

Sample = tuple[str, dict[str, str], float]


@dataclass(frozen=True)
class CheckChanges:
    """The detector over one check's newest stored runs, as /metrics serves it."""

    runs: int  # the history's points (usable stored runs)
    samples: tuple[Sample, ...]  # verdict.history.change_samples
    took_s: float  # reading the store and detecting
    status: str  # "ok" | "inconclusive" (too few runs: then only the counts are served)


def stored_changes(store_path: str | None, check: str, caliber_identity: str,
                   limit: int = HISTORY_RUNS) -> CheckChanges:
    """The change points of check `check`'s newest `limit` stored runs at one caliber.
    Raises the store's errors (the caller logs them: the check's run itself stands)."""
    from decodescope.store import runs as sr
    from decodescope.store.connect import open_store
    from decodescope.verdict import history as hi

    t0 = time.monotonic()
    with open_store(store_path, read_only=True) as store:
        runs = sr.list_runs(store, caliber=caliber_identity, label=("check", check), limit=limit)
    h = hi.detect(hi.points_from_runs(runs))
    return CheckChanges(len(h.points), tuple(hi.change_samples(h)), time.monotonic() - t0,
                        h.status)
