"""Terminal rendering of a run: the answer first, then evidence, then the next step."""

from __future__ import annotations

from statistics import median
from typing import Any

from decodescope.store.runs import StoredRun

DECIDING_SOURCES = ("prometheus", "log", "request")  # engine sources, best first


def _f(v: Any, fmt: str = "{:.1f}") -> str:
    return "—" if v is None else fmt.format(v)


def engine_pool(result: dict[str, Any]) -> tuple[str | None, dict[str, Any] | None]:
    eng = result.get("engine") or {}
    for src in DECIDING_SOURCES:
        if eng.get(src):
            return src, eng[src]
    return None, None


def render_run(run: StoredRun) -> str:
    res = run.result or {}
    cl = res.get("client") or {}
    src, eng = engine_pool(res)
    dec = cl.get("decode_rate") or {}
    sim = " [SIMULATED]" if run.simulated else ""
    lines = [
        f"run {run.id} · {run.status} · {run.caliber_ref} ({run.caliber_identity}) · "
        f"{run.engine or '?'}{sim} · model {run.model or '?'}",
    ]
    if run.labels:
        lines.append("labels: " + ", ".join(f"{k}={v}" for k, v in run.labels.items()))
    lines.append("")
    lines.append(f"{'':<22}{'client':<22}engine ({src or 'none'})")
    cli_dec = (f"{_f(dec.get('median'))} tok/s (n={dec.get('n')})" if dec else "—")
    per_trial = sorted(t["engine_decode_rate"] for t in res.get("trials") or []
                       if t.get("status") == "ok" and t.get("engine_decode_rate") is not None)
    if per_trial:  # the same statistic as the client column: median over trials
        eng_dec = median(per_trial)
        eng_txt = f"{_f(eng_dec)} tok/s (n={len(per_trial)})"
    else:
        eng_dec = eng.get("decode_rate_per_request") if eng else None
        eng_txt = f"{_f(eng_dec)} tok/s"
    lines.append(f"{'decode rate':<22}{cli_dec:<22}{eng_txt}" + ("   ← engine decides" if eng_dec else ""))
    lines.append(f"{'MAL':<22}{'—':<22}{_f(eng.get('mal') if eng else None, '{:.2f}')}")
    lines.append(f"{'step rate':<22}{'—':<22}{_f(eng.get('step_rate') if eng else None)} /s")
    if eng and eng.get("tokens_per_step") is not None:
        cov = eng.get("draft_coverage")
        extra = f"   ({100 * min(cov, 1.0):.0f}% of steps drafted)" if cov is not None else ""
        lines.append(f"{'tokens per step':<22}{'—':<22}{_f(eng['tokens_per_step'], '{:.2f}')}{extra}")
    if eng and eng.get("acceptance_rate") is not None:
        lines.append(f"{'draft acceptance':<22}{'—':<22}{100 * eng['acceptance_rate']:.1f}%")
    tpc = cl.get("mean_tokens_per_chunk") or {}
    lines.append(f"{'tokens per chunk':<22}{_f(tpc.get('median'), '{:.2f}'):<22}")
    ttft = (cl.get("ttft_s") or {}).get("median")
    ttfot = (cl.get("ttfot_s") or {}).get("median")
    lines.append(f"{'TTFT / TTFOT':<22}{_f(ttft, '{:.3f}')} s / {_f(ttfot, '{:.3f}')} s")
    out = (cl.get("output_tokens") or {}).get("median")
    prm = (cl.get("prompt_tokens") or {}).get("median")
    rsn = (cl.get("reasoning_tokens") or {}).get("median")
    status = res.get("caliber_status", "?")
    lines.append(f"{'caliber check':<22}{status}: {_f(out, '{:.0f}')} output tokens, "
                 f"{_f(rsn, '{:.0f}')} reasoning, prompt {_f(prm, '{:.0f}')} tokens")
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
    if decay and decay.get("per_1k_pct") is not None:
        lines.append(f"{'length decay':<22}{decay['per_1k_pct']:+.1f}% per 1K output tokens")
    trials = res.get("trials") or []
    if trials:
        lines.append("")
        lines.append("trial  decode tok/s  TTFT s   out tok  engine tok/s   MAL  step/s")
        for t in trials:
            lines.append(f"{t['idx'] + 1:>5}  {_f(t['decode_rate']):>12}  {_f(t['ttft_s'], '{:.3f}'):>6}  "
                         f"{_f(t['output_tokens'], '{:.0f}'):>7}  "
                         f"{_f(t.get('engine_decode_rate')):>12}  "
                         f"{_f(t.get('engine_mal'), '{:.2f}'):>5}  "
                         f"{_f(t.get('engine_step_rate')):>6}  {t['status']}")
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
