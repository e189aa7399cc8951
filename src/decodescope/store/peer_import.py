"""Other tools' result files (read by `decodescope.peers`) stored as one imported run
(docs/peers.md, "Importing their results").

Each result is one load period, stored as one trial; several results of the same workload are
one run with several trials (the unit of statistics). Every caliber element a file carries is
kept with its value; every element it does not carry is kept as unknown (None) — never a
default passed off as known.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from typing import Any

from decodescope.errors import UsageError
from decodescope.peers import ELEMENTS, PeerResult, read_file
from decodescope.peers.audit import audit
from decodescope.peers.common import REALIZED_MEANS, WORKLOAD_TOLERANCE, fmt, same_realized
from decodescope.store import runs as store_runs
from decodescope.store.db import Store


def read_peer_file(path: str, benchmark: int | None = None) -> PeerResult:
    """The file's last result (kept for callers that read one); `benchmark`: as read_file."""
    return read_file(path, benchmark)[-1]


def workload_difference(a: PeerResult, b: PeerResult) -> list[str]:
    """Why two results are not one workload: every element either records, compared — an
    element recorded by one and not the other, or different (realized means beyond
    WORKLOAD_TOLERANCE); realized length spans are not compared (they vary run to run)."""
    out = []
    for k in ELEMENTS:
        va, vb = a.elements.get(k), b.elements.get(k)
        if k in a.realized or k in b.realized or (va is None and vb is None):
            continue
        if va is None or vb is None:
            out.append(f"{k}: recorded in {(a if vb is None else b).name} only "
                       f"({va if vb is None else vb})")
        elif k in REALIZED_MEANS:
            if not same_realized(va, vb, WORKLOAD_TOLERANCE):
                out.append(f"{k}: {va} vs {vb} (more than {WORKLOAD_TOLERANCE:.0%} apart)")
        elif va != vb:
            out.append(f"{k}: {va} vs {vb}")
    return out


def import_files(store: Store, paths: list[str], *, labels: dict[str, str] | None = None,
                 tool_version: str | None = None, benchmark: int | None = None
                 ) -> tuple[int, list[PeerResult], dict[str, Any]]:
    """Store the files as one run (one trial per result: a file of appended results gives
    several); give its id, the results read and the run's `imported` record (tool, version,
    the run's elements, unknown ones, notes). One import is one workload: results whose
    recorded elements differ (workload_difference) are refused (UsageError, exit 2).
    `benchmark`: the benchmark of each file (GuideLLM's, 1-based; peers.read_file). What each
    file claims is checked against what it records (peers.audit): findings under "audit"."""
    if not paths:
        raise UsageError("no files", where="import", remedy="Give one or more result files")
    results = [r for p in paths for r in read_file(p, benchmark)]
    first = results[0]
    for r in results[1:]:
        if r.tool != first.tool:
            raise UsageError(f"{r.name} is from {r.tool}, {first.name} from {first.tool}",
                             where="import", remedy="Import each tool's files separately")
        diff = workload_difference(first, r)
        if diff:
            raise UsageError(f"{r.name} and {first.name} ran different workloads: "
                             + "; ".join(diff), where="import",
                             remedy="One `import` is one workload: import each workload's "
                                    "files as a run of its own")
    elements = dict(first.elements)
    realized = sorted({k for r in results for k in r.realized})
    for k in REALIZED_MEANS:
        vs = [float(v) for r in results if (v := r.elements.get(k)) is not None]
        elements[k] = fmt(round(statistics.fmean(vs), 1)) if len(vs) == len(results) else None
    for k in realized:  # realized spans: kept when every file has the same one
        vs2 = {r.elements.get(k) for r in results}
        elements[k] = vs2.pop() if len(vs2) == 1 else None
    version = tool_version or first.tool_version
    imported = {"tool": first.tool, "tool_version": version, "realized": realized,
                "files": list({r.path: {"path": r.path, "sha256": r.sha256,
                                        "results": sum(x.path == r.path for x in results)}
                               for r in results}.values()),
                "elements": elements, "unknown": [k for k in ELEMENTS if elements.get(k) is None],
                "notes": sorted({n for r in results for n in r.notes})}
    findings = [f for r in results for f in audit(r.trial.get("work"), r.name)]
    if findings:
        imported["audit"] = findings
    identity = "imported-" + hashlib.sha256(
        json.dumps({"tool": first.tool, "elements": elements}, sort_keys=True).encode()
    ).hexdigest()[:12]
    model = elements.get("model")
    run_id = store_runs.create_run(
        store, url=first.url, model=model, engine=None, caliber=None,
        caliber_ref=f"imported from {first.tool}", caliber_identity=identity,
        labels=labels or {}, kind="import", meta={"imported": imported})
    trials = []
    for i, r in enumerate(results):
        t = {**r.trial, "idx": i}
        trials.append(t)
        store_runs.add_trial(store, run_id, i, status="ok", started_at=r.started_at or 0.0,
                             wall_anchor_s=0.0, result=t, requests=[])
    ok = [t for t in trials if t.get("decode_rate") is not None]
    result = {"trials": trials, "imported": imported,
              "client": {"decode_rate": {"median": statistics.median(
                  [t["decode_rate"] for t in ok])} if ok else None},
              "caliber_status": "unknown"}
    store_runs.update_run(store, run_id, status="complete", result=result)
    return run_id, results, imported
