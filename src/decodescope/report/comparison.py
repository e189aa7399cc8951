"""The comparison of two runs in a report: the verdict of `decodescope.verdict`, as data (pure).

The report does not judge: it calls the verdict's pure triage on the two stored runs and keeps
what it answered (kind, cause, headline, decomposition, evidence rows, statistics, next steps).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from decodescope.analysis.run_result import analyze_run
from decodescope.records.stored_run import StoredRun
from decodescope.verdict.decide import spec_state
from decodescope.verdict.render import side_rows
from decodescope.verdict.side_from_runs import side_from_runs
from decodescope.verdict.triage import Verdict, triage

Judge = Callable[[StoredRun, StoredRun], Verdict]


@dataclass(frozen=True)
class Comparison:
    baseline_id: int
    current_id: int
    verdict: str | None  # "CALIBER_MISMATCH", ...; None when no verdict could be given
    label: str | None  # "REGRESSION (step rate)"
    cause: str | None
    headline: str | None  # the one-line answer
    explanation: tuple[str, ...]
    exit_code: int | None
    decomposition: str | None  # "MAL carries 95% of the log-delta, step rate 5%"
    side_rows: tuple[tuple[str, str, str], ...]  # ("", baseline name, current name) first
    caliber_same: bool | None
    caliber_text: str | None
    caliber_rows: tuple[dict[str, Any], ...]  # element, baseline, current, same
    evidence: tuple[dict[str, Any], ...]  # EvidenceRow dicts: check, result, status, detail
    statistics: tuple[dict[str, Any], ...]  # metric, text, and the Change's numbers
    next_steps: tuple[str, ...]
    notes: tuple[str, ...] = ()
    unavailable: str | None = None  # why there is no verdict
    detail: dict[str, Any] = field(default_factory=dict)  # Verdict.to_dict(), for JSON


def with_result(run: StoredRun) -> StoredRun:
    """The run with its derived result (computed from the raw traces when not stored)."""
    return run if run.result is not None else dataclasses.replace(run, result=analyze_run(run))


def triage_runs(baseline: StoredRun, current: StoredRun) -> Verdict:
    """The verdict's triage of two stored runs, each run one side."""
    return triage(side_from_runs([with_result(baseline)]), side_from_runs([with_result(current)]))


def compare(baseline: StoredRun, current: StoredRun, judge: Judge | None = None) -> Comparison:
    try:
        verdict = (judge or triage_runs)(baseline, current)
    except ValueError as exc:  # a side the verdict cannot be built from
        return Comparison(baseline.id, current.id, None, None, None, None, (), None, None, (),
                          None, None, (), (), (), (), unavailable=str(exc))
    return from_verdict(baseline.id, current.id, verdict)


def from_verdict(baseline_id: int, current_id: int, v: Verdict) -> Comparison:
    off = spec_state(v.baseline, v.current)

    def text(key: str, ch: Any) -> str:
        # one side without drafts: its MAL is 1 by definition, as the evidence says — not
        # "no data" beside "MAL changed? yes: 6.15 → 1 by definition"
        if off is not None and key == "mal" and ch.status == "no_data":
            return (f"no per-trial test: speculative decoding {off} on the current side, MAL 1 "
                    "by definition there (tokens per step is compared instead)")
        return str(ch.describe())

    stats = tuple({"metric": ch.metric, "text": text(k, ch), **ch.to_dict()}
                  for k, ch in v.changes.items())
    return Comparison(
        baseline_id=baseline_id,
        current_id=current_id,
        verdict=v.kind,
        label=v.label,
        cause=v.cause,
        headline=v.headline,
        explanation=tuple(v.explanation),
        exit_code=v.exit_code,
        decomposition=v.decomposition.describe() if v.decomposition else None,
        side_rows=tuple(side_rows(v)),
        caliber_same=v.caliber.same,
        caliber_text=v.caliber.text,
        caliber_rows=tuple({"element": r.element, "baseline": r.baseline, "current": r.current,
                            "same": r.same} for r in v.caliber.rows),
        evidence=tuple(r.to_dict() for r in v.evidence),
        statistics=stats,
        next_steps=tuple(v.next_steps),
        notes=tuple(v.notes),
        detail=v.to_dict(),
    )
