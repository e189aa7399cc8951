"""What both demos (llama.cpp in demo/__init__.py, vLLM in demo/vllm.py) share: the fall-back signal and
the numbers of a run side by side."""

from __future__ import annotations

from typing import Any

from decodescope.analysis.run_quantities import quantities_of, speculative_of
from decodescope.records.quantity import POOLED
from decodescope.records.stored_run import StoredRun


class FallBack(Exception):
    """Raised by the vLLM demo before anything was probed, when `auto` may fall back."""


def numbers(run: StoredRun) -> dict[str, Any]:
    """The run's reported numbers (analysis.run_quantities.quantities_of: the records `runs list`,
    `runs show` and the reports render), with each one's statistic."""
    qs = quantities_of(run.result)
    return {"run": run.id, "caliber": run.caliber_ref, "step": run.labels.get("step"),
            "client_decode": qs["client_decode_rate"].value,
            "engine_decode": qs["engine_decode_rate"].value,
            "mal": qs["mal"].value, "speculative": speculative_of(qs),
            "tokens_per_step": qs["tokens_per_step"].value,
            "step_rate": qs["step_rate"].value, "simulated": run.simulated,
            "quantities": {k: q.to_dict() for k, q in qs.items()}}


def _mal(r: dict[str, Any]) -> str:
    """As `runs list` shows it: a run whose engine counted steps but no drafts has MAL 1 by
    definition, never a dash beside the verdict's "1 by definition"."""
    if r["mal"] is None and r.get("speculative") is False:
        return "1 (no drafts)"
    return "—" if r["mal"] is None else f"{r['mal']:.2f}" + _pooled(r, "mal")


def _pooled(r: dict[str, Any], key: str) -> str:
    """'p' after a number that is the engine's pooled counts (the header names the rest)."""
    q = (r.get("quantities") or {}).get(key) or {}
    return "p" if q.get("value") is not None and q.get("statistic") == POOLED else ""


def side_by_side(rows: list[dict[str, Any]]) -> str:
    def f(v: Any, fmt: str = "{:.1f}") -> str:
        return "—" if v is None else fmt.format(v)

    lines = [f"{'run':>4}  {'caliber':<22} {'client tok/s':>12} {'engine tok/s':>12} {'MAL':>5} "
             f"{'tok/step':>8} {'steps/s':>8}   (medians over trials; p: the engine's pooled "
             "counts)"]
    for r in rows:
        lines.append(f"{r['run']:>4}  {r['caliber']:<22} {f(r['client_decode']):>12} "
                     f"{f(r['engine_decode']) + _pooled(r, 'engine_decode_rate'):>12} "
                     f"{_mal(r):>5} "
                     f"{f(r['tokens_per_step'], '{:.2f}') + _pooled(r, 'tokens_per_step'):>8} "
                     f"{f(r['step_rate']) + _pooled(r, 'step_rate'):>8}"
                     + ("  [SIMULATED]" if r["simulated"] else ""))
    return "\n".join(lines)


