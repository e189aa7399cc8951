"""Engine windows as text: one line per window (`logs --follow`, `prom`), and a log's summary
(`decodescope logs`): the answer first, a table of the windows over time, what was read.

Renders the records of telemetry.logs (LogSummary, EngineWindow) and verdict.prom_side
(PromSummary); computes nothing of its own.
"""

from __future__ import annotations

import io
from datetime import datetime
from typing import Any

from decodescope.records.window import EngineWindow
from decodescope.telemetry.logs import LogSummary, window_step_rate
from decodescope.telemetry.logs.log_summary import RequestShape
from decodescope.telemetry.logs.notes import human_bytes
from decodescope.verdict.prom_side import PromSummary

# llama.cpp prints one timing per request: a window is one request, its decode that request's.
REQUEST_NOTE = ("decode: tokens/s of one request over its own eval time (llama.cpp prints one "
                "timing per request); requests that ran at once shared the server")
# Which throughput `logs` prints: the engine's own, over all the requests it ran in a window.
DECODE_NOTE = ("decode: tokens/s of all requests together (the engine's generation throughput); "
               "per request = decode ÷ running, which `triage` compares")


def window_line(w: EngineWindow) -> str:
    """One line per window for --follow."""
    t = _hms(w.t_end_s) if w.t_end_s is not None else "--:--:--"
    parts = [t, f"{w.engine_id or w.engine:<12}"]
    dec, mal, step = w.decode_rate, w.mal, window_step_rate(w)
    parts.append(f"decode {dec:7.1f} tok/s (all requests)" if dec is not None
                 else "decode      -      ")
    parts.append(f"MAL {mal:4.2f}" if mal is not None else "MAL    -")
    parts.append(f"step {step:5.1f}/s" if step is not None else "step     -  ")
    if w.running is not None:
        parts.append(f"running {w.running:g}")
    if w.flags:
        parts.append("[" + ", ".join(w.flags) + "]")
    return "  ".join(parts)


def render_log_summary(s: LogSummary) -> str:
    from rich.console import Console  # imported here: `logs --json` does not need it

    lines = [s.headline()]
    if len(s.shapes) > 1:  # the overall figures mix request shapes: one line per shape
        lines += [f"  {x.requests} × {x.label()}: " + ", ".join(_shape_figures(x))
                  for x in s.shapes]
        if s.shapes_other:
            lines.append(f"  {s.shapes_other} more of other shapes")
    if s.bins:
        out = io.StringIO()
        # markup=False: a cell's text (an engine id read from the log) is text, never rich markup
        Console(file=out, width=120, color_system=None, highlight=False, markup=False,
                emoji=False).print(_table(s))
        lines += [ln.rstrip() for ln in out.getvalue().rstrip("\n").split("\n")]
    lines.append(REQUEST_NOTE if s.engine == "llamacpp" else DECODE_NOTE)
    lines.append(_counts_line(s))
    lines += [f"note: {n.one_line()}" for n in s.notes if n.severity == "info"]
    return "\n".join(lines)


def _shape_figures(x: RequestShape) -> list[str]:
    out = []
    if x.decode is not None:
        out.append(f"decode median {x.decode.median:.1f} tok/s")
    if x.mal is not None:
        out.append(f"MAL {x.mal:.2f}")
    if x.tokens_per_step is not None:
        out.append(f"{x.tokens_per_step:.2f} tokens/step")
    if x.step_rate is not None:
        out.append(f"step rate {x.step_rate.median:.1f}/s")
    return out or ["no decode figures"]


def _table(s: LogSummary) -> Any:
    from rich import box
    from rich.table import Table

    per_window = all(b.windows == 1 for b in s.bins)
    t = Table(box=box.SIMPLE, pad_edge=False, show_edge=False)
    t.add_column("time" if per_window else "from – to")
    t.add_column("engine")
    if not per_window:
        t.add_column("windows", justify="right")
    whose = "one request" if s.engine == "llamacpp" else "all requests"  # llama.cpp: a window
    t.add_column(f"decode tok/s ({whose})" if per_window else f"decode mean ({whose})",
                 justify="right")
    if not per_window:
        t.add_column("peak", justify="right")
    t.add_column("MAL", justify="right")
    t.add_column("step/s", justify="right")
    t.add_column("running", justify="right")
    t.add_column("flags")
    days = _one_day(s)
    for b in s.bins:
        end = _clock(b.t_end_s, days)
        when = end if per_window else f"{_clock(b.t_start_s, days)} – {end}"
        row = [when, b.engine_id or "-"]
        if not per_window:
            row.append(str(b.windows))
        row.append(_f(b.decode_mean, 1))
        if not per_window:
            row.append(_f(b.decode_peak, 1))
        row += [_f(b.mal, 2), _f(b.step_rate_mean, 1), _f(b.running_mean, 1),
                ", ".join(b.flags)]
        t.add_row(*row)
    return t


def _counts_line(s: LogSummary) -> str:
    ln = s.lines
    mixed = len(s.engine_kinds()) > 1  # name each engine's kind: a log of two engines
    engines = ", ".join(
        (f"{_KIND.get(e.engine or '', e.engine)} " if mixed and e.engine else "")
        + f"{e.engine_id or '(no engine id)'}{f' (pid {e.pid})' if e.pid is not None else ''} "
        f"{e.windows}" for e in s.engines) or "none"
    gaps = (f"{s.idle_gap_count} ({s.idle_gap_total_s:.0f} s, longest "
            f"{s.idle_gaps[0].seconds:.0f} s)" if s.idle_gaps else "none")
    formats = ", ".join(f"{k} {v}" for k, v in ln["formats"].items())
    return (f"read {human_bytes(ln['bytes_read'])}: {ln['lines_parsed']:,} stats lines parsed, "
            f"{ln['lines_unparsed']:,} not understood" + (f" ({formats})" if formats else "") + "\n"
            f"engines: {engines} · idle windows: {s.windows_idle} · idle gaps: {gaps}")


_KIND = {"vllm": "vLLM", "sglang": "SGLang", "llamacpp": "llama.cpp"}


def _f(v: float | None, nd: int) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def _hms(t: float | None) -> str:
    return "-" if t is None else datetime.fromtimestamp(t).strftime("%m-%d %H:%M:%S")


def _one_day(s: LogSummary) -> bool:
    if s.t_first_s is None or s.t_last_s is None:
        return False
    return datetime.fromtimestamp(s.t_first_s).date() == datetime.fromtimestamp(s.t_last_s).date()


def _clock(t: float | None, one_day: bool) -> str:
    if t is None:
        return "-"
    return datetime.fromtimestamp(t).strftime("%H:%M:%S" if one_day else "%m-%d %H:%M:%S")


def render_prom(s: PromSummary) -> str:
    """`decodescope prom`: the history's figures, one line per window, the series read."""
    med = s.side["median"]
    parts = [f"{s.engine or 'engine'} via Prometheus, {len(s.windows)} windows × {s.step_s:g} s"]
    if s.decode_median is not None and s.decode_peak is not None:
        parts.append(f"decode median {s.decode_median:.1f} tok/s (all requests), "
                     f"peak {s.decode_peak:.1f}")
    for key, label, fmt in (("engine_decode_rate", "per request", "{:.1f} tok/s"),
                            ("mal", "MAL", "{:.2f}"), ("step_rate", "step rate", "{:.1f}/s"),
                            ("running", "running", "{:.3g}")):
        if med.get(key) is not None:
            parts.append(f"{label} {fmt.format(med[key])}")
    lines = ["; ".join(parts)]
    lines += [window_line(w) for w in s.windows]
    lines.append(DECODE_NOTE)
    lines.append(f"{len(s.series)} series ({'; '.join(s.series)}), {s.queries} queries")
    lines += [f"note: {n}" for n in s.notes]
    return "\n".join(lines)
