"""A run as `probe --json` and `runs show --json` print it."""

from __future__ import annotations

from typing import Any

from decodescope.analysis.run_quantities import deciding_of, quantities_of
from decodescope.records.jsonable import to_jsonable
from decodescope.records.stored_run import StoredRun
from decodescope.report.headline import headline
from decodescope.report.iso import with_iso


def run_document(run: StoredRun, dist: dict[str, Any] | None) -> dict[str, Any]:
    """A run as `--json` prints it: the stored run, the headline decode rate (the verdict's
    statistic and source), the per-request distributions, ISO-8601 siblings of timestamps."""
    head = headline(run.result)
    qs = quantities_of(run.result)
    doc = {**run.to_dict(with_traces=False),
           "headline": {"decode_rate": head.decode_rate, "source": head.source,
                        "trials": head.trials, "statistic": head.statistic,
                        "basis": f"{head.trials} trials", "unit": "tok/s per request",
                        "reason": head.reason},
           "deciding": deciding_of(run.result),
           "quantities": {k: q.to_dict() for k, q in qs.items()}}
    if dist is not None:
        doc["distributions"] = dist
    return with_iso(to_jsonable(doc))
