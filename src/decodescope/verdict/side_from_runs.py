"""A side from stored runs: one unit per trial, the runs' pooled engine numbers, stalls,
contamination and caliber.

Pure: from `StoredRun`s.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from decodescope.analysis.decay import decay_pct
from decodescope.analysis.decompose import pool
from decodescope.caliber.spec import Caliber
from decodescope.records.stored_run import StoredRun
from decodescope.verdict import thresholds as th
from decodescope.verdict.imported_run import imported_label, imported_of, run_elements
from decodescope.verdict.side import ENGINE_SOURCES, Side, Unit, fmt_epoch


# -- from stored runs --------------------------------------------------------------------------
def side_from_runs(runs: Sequence[StoredRun], name: str | None = None) -> Side:
    """A side made of one or more stored runs (a baseline of several runs pools their trials).
    Every run must carry a derived result (`run.result`)."""
    if not runs:
        raise ValueError("side_from_runs needs at least one run")
    first = runs[0]
    units: list[Unit] = []
    notes: list[str] = []
    contamination = None
    decays = []
    for run in runs:
        res = run.result or {}
        for t in res.get("trials") or []:
            if t.get("status") != "ok":
                continue
            tag = f"run {run.id} trial {t.get('idx', 0) + 1}" if len(runs) > 1 else f"trial {t.get('idx', 0) + 1}"
            units.append(Unit(
                tag,
                decode_rate=_num(t.get("decode_rate")),
                engine_decode_rate=_num(t.get("engine_decode_rate")),
                mal=_num(t.get("engine_mal")),
                tokens_per_step=_num(t.get("engine_tokens_per_step")),
                step_rate=_num(t.get("engine_step_rate")),
                running=_num(t.get("engine_running")),
                stall_time_share=_num(t.get("stall_time_share")),
            ))
        why = contamination_of(run)
        if why and contamination is None:
            contamination = f"run {run.id}: {why}"
        decay = _decay(res)
        if decay is not None:
            decays.append(decay)
        if run.status != "complete":
            notes.append(f"run {run.id} is {run.status}")
    cal = _caliber(first)
    missed = [f"run {r.id} missed its caliber" for r in runs
              if (r.result or {}).get("caliber_status") == "missed"]
    stalls = _stalls(runs)
    idents = {r.caliber_identity for r in runs}
    if len(idents) > 1:
        notes.append("runs of different calibers pooled: " + ", ".join(sorted(str(i) for i in idents)))
    pooled = _pooled(runs)
    ids = tuple(r.id for r in runs)
    cpath = next((str(p) for r in runs if isinstance(p := (r.meta or {}).get("caliber_path"), str)),
                 None)
    label = name or (f"run {first.id}" if len(runs) == 1 else "runs " + ",".join(map(str, ids)))
    when = fmt_epoch(first.created_at)
    lab = ", ".join(f"{k}={v}" for k, v in first.labels.items())
    source = f"{label}: probe, {when}" + (f", label {lab}" if lab else "")
    imported = imported_label(first)  # a peer's result file (decodescope.peers, stored by store/peer_import.py)
    if imported:
        source = f"{label}: imported from {imported}, {when}" + (f", label {lab}" if lab else "")
    if first.simulated:
        source += " [SIMULATED]"
    return Side(
        name=label, kind="run", unit_name="trial", units=tuple(units), source=source,
        caliber=cal, caliber_ref=first.caliber_ref, caliber_identity=first.caliber_identity,
        concurrency=(cal.concurrency if cal else _concurrency(first)), engine=first.engine,
        url=first.url, simulated=any(r.simulated for r in runs), fingerprint=first.fingerprint,
        contamination=contamination, t_start_s=min(r.created_at for r in runs),
        t_end_s=max((r.finished_at or r.created_at) for r in runs), pooled=pooled,
        length_decay_pct=statistics.fmean(decays) if decays else None, run_ids=ids,
        notes=tuple(notes), stalls=stalls, caliber_missed="; ".join(missed) or None,
        caliber_path=cpath, elements=run_elements(first) if len(runs) == 1 else None,
        imported_from=imported, imported=imported_of(first) if len(runs) == 1 else None,
    )


def _stalls(runs: Sequence[StoredRun]) -> dict[str, Any] | None:
    """The runs' stall summaries (analysis.run_result "stalls"); several runs: counts summed,
    time share averaged."""
    found = [st for r in runs if isinstance(st := (r.result or {}).get("stalls"), dict)]
    if not found:
        return None
    if len(found) == 1:
        return dict(found[0])
    shares = [float(x["time_share"]) for x in found
              if isinstance(x.get("time_share"), (int, float))]
    out = dict(found[0])
    out["count"] = sum(int(x.get("count") or 0) for x in found)
    out["time_share"] = statistics.fmean(shares) if shares else None
    return out


def contamination_of(run: StoredRun) -> str | None:
    """Why a run's engine numbers carry foreign load, or None when none was seen."""
    res = run.result or {}
    c = res.get("contamination")
    if isinstance(c, dict):  # analysis.contamination: {"flagged", "max_running", "in_flight", ...}
        if c.get("flagged"):
            return (f"engine had up to {c.get('max_running')} requests running or queued while "
                    f"the probe had {c.get('in_flight')} in flight ({c.get('windows')} of "
                    f"{c.get('of_windows')} windows)")
        return None
    if "contamination" in res:  # analysed, nothing seen (or no occupancy data)
        return None
    # Results written before contamination analysis existed: findings, then the pooled gauge.
    for f in res.get("findings") or []:
        if str(f.get("code", "")).startswith("contamination"):
            return str(f.get("cause"))
    conc = _concurrency(run)
    running = (_pooled([run]) or {}).get("running_max")
    if conc is not None and running is not None and running > conc + th.FOREIGN_RUNNING_TOLERANCE:
        return f"engine saw {running:.3g} running requests, the probe sent {conc}"
    return None


def _pooled(runs: Sequence[StoredRun]) -> dict[str, Any] | None:
    for src in ENGINE_SOURCES:
        ws = [w for r in runs for w in r.windows if w.source == src and "reset" not in w.flags]
        if ws:
            return pool(ws)
    if len(runs) == 1:
        eng = (runs[0].result or {}).get("engine") or {}
        for src in ENGINE_SOURCES:
            if eng.get(src):
                return dict(eng[src])
    return None


def _caliber(run: StoredRun) -> Caliber | None:
    if not run.caliber:
        return None
    try:
        return Caliber.from_dict(run.caliber)
    except (TypeError, ValueError, KeyError):
        return None  # a caliber stored by another version: identities still compare


def _concurrency(run: StoredRun) -> int | None:
    c = (run.caliber or {}).get("concurrency") or run.meta.get("concurrency")
    return int(c) if isinstance(c, (int, float)) else None


def _decay(res: dict[str, Any]) -> float | None:
    return decay_pct(res.get("length_decay"))  # None below its minimum output length


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
