"""What both demos (llama.cpp in demo.py, vLLM in demo_vllm.py) share: the fall-back signal and
the numbers of a run side by side."""

from __future__ import annotations

from typing import Any

from decodescope.cli.runs import run_speculative
from decodescope.records.stored_run import StoredRun
from decodescope.records.summary import Summary


class FallBack(Exception):
    """Raised by the vLLM demo before anything was probed, when `auto` may fall back."""


def numbers(run: StoredRun) -> dict[str, Any]:
    """Per-trial medians: the values triage works on (the trial is the unit of statistics)."""
    res = run.result or {}
    trials = [t for t in res.get("trials") or [] if t.get("status") == "ok"]

    def med(key: str) -> float | None:
        s = Summary.of(t.get(key) for t in trials)
        return s.median if s else None

    mal = med("engine_mal")
    return {"run": run.id, "caliber": run.caliber_ref, "step": run.labels.get("step"),
            "client_decode": med("decode_rate"), "engine_decode": med("engine_decode_rate"),
            "mal": mal, "speculative": run_speculative(res, mal),
            "tokens_per_step": med("engine_tokens_per_step"),
            "step_rate": med("engine_step_rate"), "simulated": run.simulated}


def _mal(r: dict[str, Any]) -> str:
    """As `runs list` shows it: a run whose engine counted steps but no drafts has MAL 1 by
    definition, never a dash beside the verdict's "1 by definition"."""
    if r["mal"] is None and r.get("speculative") is False:
        return "1 (no drafts)"
    return "—" if r["mal"] is None else f"{r['mal']:.2f}"


def side_by_side(rows: list[dict[str, Any]]) -> str:
    def f(v: Any, fmt: str = "{:.1f}") -> str:
        return "—" if v is None else fmt.format(v)

    lines = [f"{'run':>4}  {'caliber':<22} {'client tok/s':>12} {'engine tok/s':>12} {'MAL':>5} "
             f"{'tok/step':>8} {'steps/s':>8}   (per-trial medians)"]
    for r in rows:
        lines.append(f"{r['run']:>4}  {r['caliber']:<22} {f(r['client_decode']):>12} "
                     f"{f(r['engine_decode']):>12} {_mal(r):>5} "
                     f"{f(r['tokens_per_step'], '{:.2f}'):>8} {f(r['step_rate']):>8}"
                     + ("  [SIMULATED]" if r["simulated"] else ""))
    return "\n".join(lines)


