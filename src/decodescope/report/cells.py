"""Table cells shared by the HTML and Markdown reports (plain text; renderers escape it)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from decodescope.analysis.run_quantities import NO_DRAFTS
from decodescope.records.quantity import Quantity
from decodescope.report.document import RunSection

NONE = "—"


def f(v: Any, fmt: str = "{:.1f}") -> str:
    return NONE if v is None else fmt.format(v)


def when(t: float | None) -> str:
    return dt.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S") if t else NONE


def med(summary: dict[str, Any] | None, key: str = "median") -> float | None:
    return (summary or {}).get(key)


def quantity(r: RunSection, key: str) -> Quantity | None:
    """The run's reported quantity (analysis.run_quantities), as the terminal shows it."""
    d = r.quantities.get(key)
    return Quantity.from_dict(d) if d else None


def _decides(r: RunSection, who: str) -> str:
    return " ← decides" if r.deciding.get("source") == who else ""


def client_decode(r: RunSection) -> str:
    s = r.client.get("decode_rate")
    q = quantity(r, "client_decode_rate")
    if q is not None:
        if q.value is None:
            return q.cell()
        spread = (f", {s['min']:.1f}–{s['max']:.1f}" if s and s.get("n", 0) > 1 else "")
        return q.cell().replace(")", f"{spread})", 1) + _decides(r, "client")
    if not s:
        return NONE
    if s.get("n", 0) > 1:
        return f"{s['median']:.1f} ({s['min']:.1f}–{s['max']:.1f}, n={s['n']} trials)"
    return f"{s['median']:.1f} (1 trial)"


def engine_decode(r: RunSection) -> str:
    w = r.engine_windows
    q = quantity(r, "engine_decode_rate")
    if q is not None:
        text = q.cell() + _decides(r, "engine") if q.value is not None or q.withheld else ""
    else:
        pooled = (r.engine_pool or {}).get("decode_rate_per_request")
        text = f"{f(pooled)} pooled" if pooled is not None else ""
    if not text and w.get("decode_median") is None:
        return NONE
    if w.get("n"):
        dur = w.get("duration_median_s")
        span = (f"{dur:.0f} s " if dur >= 1 else f"{dur:.2f} s ") if dur is not None else ""
        text += (f"{'; ' if text else ''}{w['n']} × {span}windows median "
                 f"{f(w.get('decode_median'))} / best window {f(w.get('decode_peak'))}")
    return text


def mal(r: RunSection) -> str:
    q = quantity(r, "mal")
    pooled = (r.engine_pool or {}).get("mal")
    lo, hi = r.engine_windows.get("mal_min"), r.engine_windows.get("mal_max")
    rng = f"{lo:.2f}–{hi:.2f}" if lo is not None and hi is not None and hi - lo >= 0.005 else ""
    if q is not None and q.value is not None:
        return q.cell() + (f"; windows {rng}" if rng else "")
    pool = r.engine_pool or {}
    if (pool.get("drafts") == 0 and pool.get("generation_tokens")) or (
            q is not None and q.withheld == NO_DRAFTS):
        return "1 by definition (no drafts)"  # as the verdict's tables say it (spec_state)
    if q is not None and q.withheld and pooled is None:
        return q.cell()  # '— (why)', never a bare dash
    if pooled is None and lo is None:
        return NONE
    if pooled is None:
        return rng or f"{lo:.2f}"
    return f"{pooled:.2f}" + (f" (windows {rng})" if rng else "")


def rate(v: float | None) -> str:
    """A rate with three significant digits at small values (0.42, 2.61, 87.3)."""
    if v is None:
        return NONE
    return f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"


def step_rate(r: RunSection) -> str:
    q = quantity(r, "step_rate")
    if q is not None and q.value is not None:
        return q.cell()
    v = (r.engine_pool or {}).get("step_rate")
    return NONE if v is None else f"{rate(v)} /s"


def caliber(r: RunSection) -> str:
    c = r.caliber
    bits = [c.get("content_class"), c.get("task_class")]
    if c.get("thinking") is not None:
        bits.append("thinking on" if c["thinking"] else "thinking off")
    if c.get("max_tokens") is not None:
        bits.append(f"out {c['max_tokens']}")
    if c.get("temperature") is not None:
        bits.append(f"temp {c['temperature']:g}")
    if c.get("concurrency") is not None:
        bits.append(f"c{c['concurrency']}")
    detail = ", ".join(str(b) for b in bits if b)
    return f"{r.caliber_ref or 'no caliber'}" + (f" ({detail})" if detail else "")


def source(r: RunSection) -> str:
    bits = [f"run {r.run_id}", r.engine or "engine ?"]
    if r.simulated:
        bits.append("SIMULATED")
    if r.model:
        bits.append(f"model {r.model}")
    bits.append(when(r.created_at))
    if r.labels:
        bits.append(", ".join(f"{k}={v}" for k, v in r.labels.items()))
    return " · ".join(bits)


def pair_rows(base: RunSection, cur: RunSection) -> list[tuple[str, str, str]]:
    """Baseline beside current, metric by metric (the triage sketch's table)."""
    def row(label: str, fn: Any) -> tuple[str, str, str]:
        return label, fn(base), fn(cur)

    def ttft(r: RunSection) -> str:
        return f"{f(med(r.client.get('ttft_s')), '{:.3f}')} s / {f(med(r.client.get('ttfot_s')), '{:.3f}')} s"

    def running(r: RunSection) -> str:
        p = r.engine_pool or {}
        return f(p.get("running_mean"), "{:.2f}") + (f" (max {p['running_max']:g})"
                                                     if p.get("running_max") is not None else "")

    return [
        row("caliber", caliber),
        row("decode (client)", client_decode),
        row("decode (engine)", engine_decode),
        row("MAL", mal),
        row("step rate", step_rate),
        row("running requests", running),
        row("TTFT / TTFOT (median over trials)", ttft),
        row("tokens per chunk", lambda r: f(med(r.client.get("mean_tokens_per_chunk")), "{:.2f}")),
        row("output tokens", lambda r: f(med(r.client.get("output_tokens")), "{:.0f}")),
        row("engine windows", lambda r: f"{r.engine_windows.get('n') or 0} ({r.engine_source or 'none'})"),
        row("source", source),
    ]


def run_rows(r: RunSection) -> list[tuple[str, str, str]]:
    """One run: metric | client | engine, as `decodescope probe` prints it."""
    p = r.engine_pool or {}
    ttft = f"{f(med(r.client.get('ttft_s')), '{:.3f}')} s / {f(med(r.client.get('ttfot_s')), '{:.3f}')} s"
    rows = [
        ("decode rate (tok/s)", client_decode(r), engine_decode(r)),
        ("MAL", NONE, mal(r)),
        ("step rate", NONE, step_rate(r)),
        ("acceptance rate", NONE, f(p.get("acceptance_rate"), "{:.1%}")),
        ("TTFT / TTFOT (median over trials)", ttft, NONE),
        ("tokens per chunk", f(med(r.client.get("mean_tokens_per_chunk")), "{:.2f}"), NONE),
        ("output / reasoning / prompt tokens",
         " / ".join(f(med(r.client.get(k)), "{:.0f}")
                    for k in ("output_tokens", "reasoning_tokens", "prompt_tokens")), NONE),
    ]
    if r.reconciliation:
        rows.append(("client vs engine", r.reconciliation, ""))
    if r.length_decay_pct is not None:
        rows.append(("length decay", f"{r.length_decay_pct:+.1f}% per 1K output tokens", ""))
    elif r.length_decay_withheld:
        rows.append(("length decay", r.length_decay_withheld, ""))
    return rows


def trial_table(r: RunSection) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """Per-trial values; a column no trial has a value for is left out."""
    shown = [c for c in TRIAL_COLUMNS if any(t.get(c[0]) is not None for t in r.trials)]
    header = ("trial", "status", *(head for _, head, _ in shown))
    rows = [(str(int(t.get("idx", 0)) + 1), str(t.get("status", "?")),
             *(f(t.get(key), fmt) for key, _, fmt in shown)) for t in r.trials]
    return header, rows


def latency_table(r: RunSection) -> tuple[tuple[str, ...], list[list[str]]]:
    """Per-request latency distributions (ms) and throughput per request / all requests."""
    from decodescope.report.distributions import THROUGHPUTS, latency_rows

    d = r.distributions
    if not d:
        return (), []
    rows = latency_rows(d)
    for key, name, unit in THROUGHPUTS:
        x = (d.get("throughput") or {}).get(key)
        rows.append([f"{name}, {unit}", str(x["n"]) if x else "0",
                     *((f"{x[k]:.1f}" for k in ("mean", "min", "p50", "p90", "p99", "max"))
                       if x else ["—"] * 6)])
    return ("metric (ms unless said)", "n", "mean", "min", "p50", "p90", "p99", "max"), rows


TRIAL_COLUMNS = (  # result["trials"] key, header, format
    ("decode_rate", "decode tok/s (per request)", "{:.1f}"),
    ("engine_decode_rate", "engine tok/s (per request)", "{:.1f}"),
    ("engine_mal", "MAL", "{:.2f}"),
    ("engine_step_rate", "step rate /s", "{:.3g}"),
    ("ttft_s", "TTFT s", "{:.3f}"),
    ("output_tokens", "output tok", "{:.0f}"),
)


def finding_text(fd: dict[str, Any]) -> str:
    text = str(fd.get("cause", ""))
    if fd.get("context"):
        text += f" ({fd['context']})"
    if fd.get("remedy"):
        text += f" — {fd['remedy']}"
    return text


def decomposition_text(d: dict[str, Any] | None) -> str | None:
    """One line from a decomposition dict (keys tolerated: mal_share / step_share / ...)."""
    if not d:
        return None
    if isinstance(d.get("text"), str):
        return str(d["text"])
    ms = d.get("mal_share")
    ss = d.get("step_share", d.get("step_rate_share"))
    if ms is None and ss is None:
        return None
    parts = []
    if ms is not None:
        parts.append(f"MAL carries {ms:.0%} of the log-delta")
    if ss is not None:
        parts.append(f"step rate {ss:.0%}")
    return "; ".join(parts)


def strip_kind(headline: str, word: str) -> str:
    """The headline without the verdict word the badge beside it already shows."""
    for sep in (" — ", ": ", ". "):
        if headline.upper().startswith(word.upper() + sep):
            rest = headline[len(word) + len(sep):]
            return rest[:1].upper() + rest[1:]
    return headline


def is_command(line: str) -> bool:
    """A next-step line that is a shell command (the verdict indents them)."""
    text = line.strip()
    return text.startswith("decodescope ") or text.startswith("$ ")
