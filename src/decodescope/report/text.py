"""Terminal rendering of a run: the answer first, then evidence, then the next step."""

from __future__ import annotations

from typing import Any

from decodescope.analysis.decay import decay_pct, withheld_reason
from decodescope.analysis.run_quantities import deciding_of, engine_source_of, quantities_of
from decodescope.records.quantity import Quantity
from decodescope.records.stored_run import StoredRun
from decodescope.report.distributions import latency_rows
from decodescope.report.headline import median_or_none, output_throughput_all
from decodescope.report.text_table import text_table


def _f(v: Any, fmt: str = "{:.1f}") -> str:
    return "—" if v is None else fmt.format(v)


def engine_pool(result: dict[str, Any]) -> tuple[str | None, dict[str, Any] | None]:
    """The engine source the run's decision uses, and its pooled numbers."""
    src = engine_source_of(result)
    return (src, (result.get("engine") or {}).get(src)) if src else (None, None)


def _status_lines(run: StoredRun) -> list[str]:
    """Why a run is not complete: the failure cause, the signal, the vanished process, and how
    many trials it kept."""
    lines: list[str] = []
    stop_ = run.meta.get("stop")
    stop: dict[str, Any] = stop_ if isinstance(stop_, dict) else {}
    if run.status == "failed":
        f = run.failure or {}
        where = (f" (trial {f['trial']}, request {f['request']})"
                 if f.get("trial") is not None and f.get("request") is not None else "")
        lines.append(f"failed: {f.get('error') or 'cause not recorded'}{where}")
    elif run.status == "interrupted" and stop.get("signal"):
        lines.append(f"interrupted by {stop['signal']}")
    elif run.status_note:
        lines.append(f"{run.status}: {run.status_note}")
    planned = run.meta.get("trials")
    if run.status != "complete" and isinstance(planned, int):
        done = sum(1 for t in run.trials if t.status == "ok")
        lines.append(f"trials: {done} of {planned} completed and kept")
    return lines


def cell(q: Quantity) -> str:
    """A quantity in a run's table: the record's own cell (value, unit, statistic)."""
    return q.cell()


def render_run(run: StoredRun, dist: dict[str, Any] | None = None) -> str:
    """`dist`: report.distributions.run_distributions(run), when the traces were read."""
    res = run.result or {}
    cl = res.get("client") or {}
    src, eng = engine_pool(res)
    sim = " [SIMULATED]" if run.simulated else ""
    lines = [
        f"run {run.id} · {run.status} · {run.caliber_ref} ({run.caliber_identity}) · "
        f"{run.engine or '?'}{sim} · model {run.model or '?'}",
    ]
    lines += _status_lines(run)
    if run.labels:
        lines.append("labels: " + ", ".join(f"{k}={v}" for k, v in run.labels.items()))
    lines.append("")
    lines.append(f"{'':<22}{'client':<28}engine ({src or 'none'})")
    trials_ok = [t for t in res.get("trials") or [] if t.get("status") == "ok"]
    qs = quantities_of(res)
    decision = deciding_of(res)
    who = decision.get("source")
    decides = f"   ← {who} decides" if who else ""
    lines.append(f"{'decode rate':<22}{cell(qs['client_decode_rate']):<28}"
                 f"{cell(qs['engine_decode_rate'])}{decides}")
    lines.append(f"{'  (per request)':<22}tokens/s of one stream after the steady-state start")
    if who == "client" and src:
        lines.append(f"{'  (client decides)':<22}{decision.get('reason')}")
    thr = median_or_none([output_throughput_all(t) for t in trials_ok])
    if thr is not None:
        lines.append(f"{'output throughput':<22}{_f(thr)} tok/s (all requests: output tokens of "
                     "a trial / its wall time, median over trials)")
    lines.append(f"{'MAL':<22}{'—':<28}{cell(qs['mal'])}")
    lines.append(f"{'step rate':<22}{'—':<28}{cell(qs['step_rate'])}")
    if qs["tokens_per_step"].value is not None:
        cov = eng.get("draft_coverage") if eng else None
        extra = f"   ({100 * min(cov, 1.0):.0f}% of steps drafted)" if cov is not None else ""
        lines.append(f"{'tokens per step':<22}{'—':<28}{cell(qs['tokens_per_step'])}{extra}")
    if eng and eng.get("acceptance_rate") is not None:
        lines.append(f"{'draft acceptance':<22}{'—':<28}{100 * eng['acceptance_rate']:.1f}% "
                     "(pooled counts)")
    tpc = cl.get("mean_tokens_per_chunk") or {}
    lines.append(f"{'tokens per chunk':<22}{_f(tpc.get('median'), '{:.2f}'):<28}")
    ttft = (cl.get("ttft_s") or {}).get("median")
    ttfot = (cl.get("ttfot_s") or {}).get("median")
    lines.append(f"{'TTFT / TTFOT':<22}{_f(ttft, '{:.3f}')} s / {_f(ttfot, '{:.3f}')} s "
                 "(median over trials; per request: the table below)")
    out = (cl.get("output_tokens") or {}).get("median")
    prm = (cl.get("prompt_tokens") or {}).get("median")
    rsn = (cl.get("reasoning_tokens") or {}).get("median")
    status = res.get("caliber_status", "?")
    lines.append(f"{'caliber check':<22}{status}: {_f(out, '{:.0f}')} output tokens, "
                 f"{_f(rsn, '{:.0f}')} reasoning, prompt {_f(prm, '{:.0f}')} tokens")
    from decodescope.analysis.goodput import goodput_line

    gp = goodput_line(res.get("goodput"))
    if gp:
        lines.append(f"{'goodput (SLO)':<22}{gp.removeprefix('goodput ')}")
    rec = res.get("reconciliation")
    if rec:
        lines.append(f"{'client vs engine':<22}{rec.get('text', '')}")
    dec = res.get("decomposition") or {}
    if dec.get("note"):
        lines.append(f"{'':<22}{dec['note']}")
    cont = res.get("contamination")
    if cont and cont.get("flagged"):
        lines.append(f"{'contamination':<22}engine ran up to {cont['max_running']:g} requests, "
                     f"probe had {cont['in_flight']} in flight ({cont['windows']} windows)")
    decay = res.get("length_decay")
    if decay_pct(decay) is not None:
        lines.append(f"{'length decay':<22}{decay_pct(decay):+.1f}% per 1K output tokens")
    elif decay and withheld_reason(decay):
        lines.append(f"{'length decay':<22}{withheld_reason(decay)}")
    trials = res.get("trials") or []
    if dist:
        lines.append("")
        lines.append(f"per request, ms ({dist.get('requests', 0)} requests of "
                     f"{dist.get('trials', 0)} ok trials; ITL: every token gap)")
        lines.append(text_table(["", "n", "mean", "min", "p50", "p90", "p99", "max"],
                                latency_rows(dist), right=range(1, 8), indent=2))
    if trials:
        lines.append("")
        lines.append(text_table(
            ["trial", "decode tok/s", "engine tok/s", "MAL", "step/s", "TTFT s", "out tok",
             "requests", "all req tok/s", "status"],
            [[str(t["idx"] + 1), _f(t["decode_rate"]), _f(t.get("engine_decode_rate")),
              _f(t.get("engine_mal"), "{:.2f}"), _f(t.get("engine_step_rate")),
              _f(t["ttft_s"], "{:.3f}"), _f(t["output_tokens"], "{:.0f}"),
              str(t.get("requests", "—")), _f(output_throughput_all(t)), t["status"]]
             for t in trials], right=range(0, 9)))
        lines.append("decode and engine tok/s: per request; all req tok/s: all requests of "
                     "the trial together")
        withheld = [t for t in trials if t.get("status") == "ok" and t.get("engine_withheld")]
        if withheld and src:
            which = ", ".join(str(t["idx"] + 1) for t in withheld)
            lines.append(f"engine rate withheld for trial {which}: {withheld[0]['engine_withheld']}")
    stalls = res.get("stalls") or {}
    if stalls.get("count"):
        lines.append(f"{'stalls':<22}{stalls['count']} in {stalls['requests']} requests, "
                     f"{stalls['min_s']:.2f}–{stalls['max_s']:.2f} s, "
                     f"{100 * (stalls.get('time_share') or 0):.0f}% of the steady state "
                     "(left out of the rates)")
    findings = res.get("findings") or []
    if findings:
        lines.append("")
        lines.append("warnings")
        for f in findings[:12]:
            ctx = f" ({f['context']})" if f.get("context") else ""
            rem = f" — {f['remedy']}" if f.get("remedy") else ""
            lines.append(f"  ! {f['cause']}{ctx}{rem}")
        if len(findings) > 12:
            lines.append(f"  … {len(findings) - 12} more (decodescope runs show {run.id} --json)")
    return "\n".join(lines)
