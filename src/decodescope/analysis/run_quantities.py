"""Who decides a run's decode rate, and the run's reported quantities — each decided once.

`who_decides` is the one decision between the client's and the engine's decode rate: every
output (the probe's header, the reconciliation line, warnings, the stored `deciding` field,
JSON / Markdown / HTML) renders it and none decides again. `run_quantities` builds the
run's reported numbers (decode rate, step rate, MAL, tokens per step) as `Quantity` records,
with their statistic, basis and source; renderers print these records.

Pure: over the derived result of `run_result.analyze_run` (or a stored one of an older
version, which has no `deciding` / `quantities`: then they are built here from its trials).
"""

from __future__ import annotations

from statistics import median
from typing import Any

from decodescope.records.quantity import MEDIAN, POOLED, Quantity

# Per-trial engine rates decide when at least this many trials have one (or every ok trial
# does, for runs of one trial): the verdict's minimum units per side (verdict.thresholds).
MIN_ENGINE_TRIALS = 2
ENGINE_SOURCES = ("prometheus", "log", "request")  # engine sources, best first


def who_decides(trials: list[dict[str, Any]], engine_source: str | None) -> dict[str, Any]:
    """{"source": "engine" | "client" | None, "engine_source", "reason", "trials"}.

    The engine decides when enough ok trials have a per-trial engine decode rate: it counts
    tokens where they are made and times them with its own clock. It never decides when every
    per-trial engine rate is withheld or suspended — the client's number does, and the reason
    says why."""
    ok = [t for t in trials if t.get("status") == "ok"]
    eng = [t for t in ok if t.get("engine_decode_rate") is not None]
    cli = [t for t in ok if t.get("decode_rate") is not None]
    if eng and len(eng) >= min(MIN_ENGINE_TRIALS, len(ok)):
        return {"source": "engine", "engine_source": engine_source, "trials": len(eng),
                "reason": (f"{len(eng)} of {len(ok)} trials have an engine decode rate "
                           f"({engine_source}): the engine counts tokens where they are made, "
                           "on its own clock")}
    if not cli:
        return {"source": None, "engine_source": engine_source, "trials": 0,
                "reason": "no trial has a decode rate"}
    suspended = [t for t in ok if t.get("engine_decode_rate_suspended") is not None]
    withheld = [t for t in ok if t.get("engine_withheld")]
    if suspended:
        why = ("client and engine disagree at concurrency 1, so the engine's per-trial rates "
               "are suspended (warning engine.disagrees)")
    elif withheld and not eng:
        why = f"every trial's engine rate is withheld: {withheld[0]['engine_withheld']}"
    elif engine_source is None:
        why = "no engine numbers (no /metrics, log or timings)"
    elif not eng:
        why = f"no trial has an engine decode rate ({engine_source})"
    else:
        why = (f"only {len(eng)} of {len(ok)} trials have an engine decode rate "
               f"(≥ {MIN_ENGINE_TRIALS} needed)")
    return {"source": "client", "engine_source": engine_source, "trials": len(cli),
            "reason": why}


def deciding_of(result: dict[str, Any] | None) -> dict[str, Any]:
    """The stored decision, or the same decision made from an older result's trials."""
    res = result or {}
    d = res.get("deciding")
    if isinstance(d, dict) and "source" in d:
        return d
    return who_decides(res.get("trials") or [], engine_source_of(res))


def engine_source_of(result: dict[str, Any]) -> str | None:
    """The engine source whose numbers the run uses (the stored decision's, else the first
    pooled source with a per-request decode rate, else the first pooled source)."""
    d = result.get("deciding")
    if isinstance(d, dict) and d.get("engine_source"):
        return str(d["engine_source"])
    eng = result.get("engine") or {}
    for src in ENGINE_SOURCES:
        if eng.get(src) and eng[src].get("decode_rate_per_request") is not None:
            return src
    return next((s for s in ENGINE_SOURCES if eng.get(s)), None)


# name, per-trial key, pooled key, unit, digits
_ENGINE_METRICS = (
    ("engine_decode_rate", "decode rate", "engine_decode_rate", "decode_rate_per_request",
     "tok/s", 1),
    ("step_rate", "step rate", "engine_step_rate", "step_rate", "steps/s", 1),
    ("mal", "MAL", "engine_mal", "mal", "", 2),
    ("tokens_per_step", "tokens per step", "engine_tokens_per_step", "tokens_per_step",
     "tokens/step", 2),
)


# Quantities the engine times on its clock: a trial's timing withheld (stalls inside
# whole-request timings) withholds these, never MAL or tokens per step (counts, no time).
_TIMED = ("engine_decode_rate", "step_rate")
NO_DRAFTS = "no drafts (speculative decoding off): one token per step, MAL 1 by definition"


def run_quantities(result: dict[str, Any]) -> dict[str, Quantity]:
    """The run's reported quantities: `decode_rate` (the deciding source's), `client_decode_rate`,
    `engine_decode_rate`, `step_rate`, `mal`, `tokens_per_step`. Each is the median over the ok
    trials that have a value; an engine quantity without per-trial values is the pooled count
    of the engine's windows (said so), and every engine quantity is when the engine's decode
    rate is; None with the reason when withheld."""
    ok = [t for t in result.get("trials") or [] if t.get("status") == "ok"]
    src = engine_source_of(result)
    pool = (result.get("engine") or {}).get(src) if src else None
    withheld = next((t["engine_withheld"] for t in ok if t.get("engine_withheld")), None)
    out: dict[str, Quantity] = {
        "client_decode_rate": _median_q("decode rate", [t.get("decode_rate") for t in ok],
                                        "tok/s", "client", 1),
    }
    # One statistic for the engine's column: when its decode rate has no per-trial value (each
    # withheld) and is the pooled count, MAL, tokens per step and step rate are the pooled
    # counts too — so decode = step rate × tokens per step holds within the column, and a note
    # that quotes the pooled MAL shows the row's number (never a median beside a pooled count).
    all_pooled = pool is not None and pool.get("decode_rate_per_request") is not None and not any(
        t.get("engine_decode_rate") is not None for t in ok)
    for key, name, per_trial, pooled, unit, digits in _ENGINE_METRICS:
        q = _median_q(name, [t.get(per_trial) for t in ok], unit, "engine", digits)
        if (all_pooled or q.value is None) and pool and pool.get(pooled) is not None:
            q = Quantity(name, float(pool[pooled]), unit, POOLED, int(pool.get("windows") or 0),
                         "engine windows", "engine", digits=digits)
        elif key == "mal" and q.value is None and pool and pool.get("drafts") == 0:
            q = Quantity(name, None, unit, POOLED, int(pool.get("windows") or 0),
                         "engine windows", "engine", withheld=NO_DRAFTS, digits=digits)
        elif q.value is None and withheld and src and key in _TIMED:
            q = Quantity(name, None, unit, MEDIAN, 0, "trials", "engine", withheld=withheld,
                         digits=digits)
        out[key] = q
    decision = deciding_of(result)
    # The decision needs per-trial engine rates, so the engine's is then a median too.
    out["decode_rate"] = out["engine_decode_rate" if decision["source"] == "engine"
                             else "client_decode_rate"]
    return _no_drafts(out)


def quantities_of(result: dict[str, Any] | None) -> dict[str, Quantity]:
    """The run's reported numbers as records — the one function every output of a run calls
    (`runs list`, `runs show`, `probe`, the reports, the CSV export, the demos' side by side):
    `decode_rate` (the deciding source's), `client_decode_rate`, `engine_decode_rate`,
    `step_rate`, `mal`, `tokens_per_step`, each with its statistic, basis and source. The
    stored records when the result carries them, else the same built from its trials (a
    result of an older version). None of the outputs recomputes a number of its own."""
    res = result or {}
    stored = res.get("quantities")
    if isinstance(stored, dict) and stored:
        try:
            return _no_drafts({k: Quantity.from_dict(v) for k, v in stored.items()})
        except (KeyError, TypeError, ValueError):
            pass  # a result written by another version: rebuild from its trials
    return run_quantities(res)


def speculative_of(qs: dict[str, Quantity]) -> bool | None:
    """Speculative decoding as the run's numbers show it: True with a MAL, False when the
    engine counted steps but no drafts (MAL 1 by definition — the rule
    `verdict.decide.spec_state` applies to a side), None when the engine said neither."""
    mal = qs.get("mal")
    if mal is None:
        return None
    if mal.value is not None:
        return True
    return False if mal.withheld == NO_DRAFTS else None


def _no_drafts(qs: dict[str, Quantity]) -> dict[str, Quantity]:
    """A run whose engine counted tokens per step but no MAL drafted nothing: its MAL record
    says so (withheld: 1 by definition), under the statistic of its tokens per step."""
    mal, tps = qs.get("mal"), qs.get("tokens_per_step")
    if (mal is not None and mal.value is None and not mal.withheld and tps is not None
            and tps.value is not None):
        qs = {**qs, "mal": Quantity(mal.name, None, mal.unit, tps.statistic, tps.n, tps.basis,
                                    tps.source, withheld=NO_DRAFTS, digits=mal.digits)}
    return qs


def _median_q(name: str, xs: list[Any], unit: str, source: Any, digits: int) -> Quantity:
    vals = [float(x) for x in xs if isinstance(x, (int, float)) and not isinstance(x, bool)]
    return Quantity(name, median(vals) if vals else None, unit, MEDIAN, len(vals), "trials",
                    source, digits=digits)
