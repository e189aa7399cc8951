"""Goodput: the share of a run's requests that met every limit of its SLO (caliber.slo).

A request meets the SLO when it succeeded and its TTFT, TPOT and end-to-end latency are each
within the limits the SLO sets (limits it does not set are not checked). TPOT is
(e2e − TTFT) / (output tokens − 1), vLLM's and MLPerf's definition; a request of one output
token has no TPOT and passes a TPOT limit. A failed request, or one whose checked number is
unknown, does not meet it. The share is over all requests the trials sent (n), pooled over
trials, with each trial's own share beside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from decodescope.records.request_metrics import RequestMetrics, compute
from decodescope.records.stored_run import StoredRun


@dataclass(frozen=True)
class Limits:
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Limits | None:
        if not d:
            return None
        lim = cls(d.get("ttft_ms"), d.get("tpot_ms"), d.get("e2e_ms"))
        return lim if any(v is not None for v in (lim.ttft_ms, lim.tpot_ms, lim.e2e_ms)) else None


def tpot_s(m: RequestMetrics) -> float | None:
    if m.e2e_s is None or m.ttft_s is None or m.output_tokens is None:
        return None
    if m.output_tokens < 2:
        return 0.0
    return (m.e2e_s - m.ttft_s) / (m.output_tokens - 1)


@dataclass(frozen=True)
class Numbers:
    """One request's checked numbers, seconds (an imported file's per-request rows)."""

    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float | None


def numbers_of(m: RequestMetrics | Numbers) -> Numbers:
    return m if isinstance(m, Numbers) else Numbers(m.ttft_s, tpot_s(m), m.e2e_s)


def misses(m: RequestMetrics | Numbers | None, lim: Limits) -> list[str]:
    """The limits one request missed ("failed" for a failed request); [] when it met all."""
    if m is None:
        return ["failed"]
    n = numbers_of(m)
    out = []
    for name, limit, value in (("ttft", lim.ttft_ms, n.ttft_s), ("tpot", lim.tpot_ms, n.tpot_s),
                               ("e2e", lim.e2e_ms, n.e2e_s)):
        if limit is not None and (value is None or value * 1000.0 > limit):
            out.append(name)
    return out


def goodput(trials: Sequence[Sequence[RequestMetrics | Numbers | None]],
            slo: dict[str, Any] | None) -> dict[str, Any] | None:
    """The goodput record of trials of requests (None: a failed request). None without an
    SLO or without requests."""
    lim = Limits.from_dict(slo)
    n = sum(len(t) for t in trials)
    if lim is None or n == 0:
        return None
    missed: dict[str, int] = {"ttft": 0, "tpot": 0, "e2e": 0, "failed": 0}
    met = 0
    per_trial: list[float | None] = []
    for reqs in trials:
        ok = 0
        for m in reqs:
            why = misses(m, lim)
            for w in why:
                missed[w] += 1
            ok += not why
        met += ok
        per_trial.append(ok / len(reqs) if reqs else None)
    return {"slo": dict(slo or {}), "requests": n, "met": met, "share": met / n,
            "missed_by_limit": {k: v for k, v in missed.items()
                                if k == "failed" or getattr(lim, f"{k}_ms") is not None},
            "per_trial": per_trial}


def goodput_of_run(run: StoredRun, slo: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Goodput of a probed run (with its traces) under `slo`, else its caliber's SLO (None
    without one)."""
    cal = run.caliber or {}
    slo = slo or cal.get("slo")
    if not slo:
        return None
    steady = int((cal.get("output") or {}).get("steady_state_start") or 0)
    trials = [[compute(r, steady) if r.ok else None for r in t.requests]
              for t in run.trials if t.status == "ok"]
    return goodput(trials, slo)


def goodput_of_imported(trials: list[dict[str, Any]], slo: dict[str, Any] | None
                        ) -> dict[str, Any] | None:
    """Goodput of an imported run from the per-request rows its parser kept (`per_request`:
    ttft_s, e2e_s, output_tokens of each successful request) and its failed count. None when
    a trial has no rows (the file carries no per-request numbers)."""
    out: list[list[Numbers | None]] = []
    for t in trials:
        rows = t.get("per_request")
        if not isinstance(rows, list):
            return None
        reqs: list[Numbers | None] = []
        for r in rows:
            ttft, e2e, n = r.get("ttft_s"), r.get("e2e_s"), r.get("output_tokens")
            tpot = ((e2e - ttft) / (n - 1) if n and n > 1 else 0.0) if (
                ttft is not None and e2e is not None and n is not None) else None
            reqs.append(Numbers(ttft, tpot, e2e))
        reqs += [None] * int(t.get("failed") or 0)
        out.append(reqs)
    return goodput(out, slo)


def goodput_line(g: dict[str, Any] | None) -> str | None:
    """One line rendering the record: "goodput 83% (5 of 6 requests met ttft ≤ …)"."""
    if not g:
        return None
    slo = g.get("slo") or {}
    limits = ", ".join(f"{k} ≤ {slo[k + '_ms']:g} ms" for k in ("ttft", "tpot", "e2e")
                       if slo.get(k + "_ms") is not None)
    preset = f" (preset {slo['preset']})" if slo.get("preset") else ""
    missed = ", ".join(f"{k} {v}" for k, v in (g.get("missed_by_limit") or {}).items() if v)
    return (f"goodput {g['share']:.0%} ({g['met']} of {g['requests']} requests met {limits}"
            f"{preset}" + (f"; missed: {missed}" if missed else "") + ")")


def pooled(records: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """One side's goodput over its runs (a baseline of several): pooled counts, when every
    run has a record under the same SLO; else None."""
    if not records or any(r is None for r in records):
        return None
    rs = [r for r in records if r is not None]
    slo = rs[0].get("slo")
    if any(r.get("slo") != slo for r in rs):
        return None
    n, met = sum(int(r["requests"]) for r in rs), sum(int(r["met"]) for r in rs)
    missed: dict[str, int] = {}
    for r in rs:
        for k, v in (r.get("missed_by_limit") or {}).items():
            missed[k] = missed.get(k, 0) + int(v)
    return {"slo": slo, "requests": n, "met": met, "share": met / n if n else None,
            "missed_by_limit": missed,
            "per_trial": [x for r in rs for x in r.get("per_trial") or []]}


def beside_verdict(baseline: dict[str, Any] | None, current: dict[str, Any] | None
                   ) -> dict[str, Any] | None:
    """Goodput of both sides, shown beside (never instead of) the decode verdict. None when
    neither side has one; `comparable` only when both have one under the same SLO."""
    if baseline is None and current is None:
        return None
    same = (baseline is not None and current is not None
            and baseline.get("slo") == current.get("slo"))
    if baseline is None or current is None:
        why = "only one side has an SLO: goodput is not compared"
    elif not same:
        why = "the sides' SLOs differ: goodput is not compared"
    else:
        why = None
    return {"baseline": baseline, "current": current, "comparable": same, "note": why}


def beside_lines(rec: dict[str, Any] | None) -> list[str]:
    if not rec:
        return []
    out = ["goodput (beside the decode verdict, not part of it):"]
    for side in ("baseline", "current"):
        out.append(f"  {side:<9}" + (goodput_line(rec[side]) or "no SLO"))
    if rec.get("note"):
        out.append(f"  {rec['note']}")
    return out


# A load meets the SLO when at least this share of its requests met it (MLPerf holds its
# latency limits at the 99th percentile).
DEFAULT_TARGET = 0.99


def sweep_goodput(axis: str, values: list[float], records: list[dict[str, Any] | None],
                  target: float = DEFAULT_TARGET) -> dict[str, Any] | None:
    """A load sweep's goodput per point and the highest load whose goodput reaches `target`
    (None: no point does). None when no point has a goodput record."""
    if all(r is None for r in records):
        return None
    points = [{"load": v, "share": (r or {}).get("share"), "requests": (r or {}).get("requests"),
               "met": (r or {}).get("met")} for v, r in zip(values, records, strict=True)]
    meeting = [float(v) for v, r in zip(values, records, strict=True)
               if r and r.get("share") is not None and r["share"] >= target]
    slo = next((r.get("slo") for r in records if r), None)
    return {"axis": axis, "target": target, "slo": slo, "points": points,
            "highest_load_meeting": max(meeting) if meeting else None}


def sweep_lines(rec: dict[str, Any] | None) -> list[str]:
    if not rec:
        return []
    pts = ", ".join(f"{p['load']:g}: {p['share']:.0%} ({p['met']}/{p['requests']})"
                    if p["share"] is not None else f"{p['load']:g}: -" for p in rec["points"])
    best = rec["highest_load_meeting"]
    head = (f"highest {rec['axis']} meeting the SLO (goodput ≥ {rec['target']:.0%}): "
            + (f"{best:g}" if best is not None else "none of the loads"))
    return [f"goodput by {rec['axis']}: {pts}", head]
