"""`decodescope logs FILE`: an engine log alone, summed up in windows (docs/logs.md).

Exit codes: 0 when the log was read (also when it holds no engine windows: the answer says
so and the notes give the counts); 2 for bad input (missing file, bad --since, --follow of a
compressed file, a zstd file); 130 on Ctrl-C outside --follow. In --follow mode Ctrl-C ends
the tail and prints the summary (0). A gzip / bzip2 / xz file is read through its
decompressor.
"""

from __future__ import annotations

import io
import json
from dataclasses import replace
from datetime import datetime
from typing import Any

import click

from decodescope.cli.common import emit, to_jsonable, warn
from decodescope.console import json_option
from decodescope.records.window import EngineWindow
from decodescope.telemetry.logs import (
    ENGINE_NAMES,
    LogAccumulator,
    LogSummary,
    ParseCounts,
    Selection,
    analyze_log,
    check_log_path,
    is_simulated,
    iter_windows,
    parse_time,
    window_step_rate,
)
from decodescope.telemetry.logs.accumulate import MAX_WINDOWS_KEPT, spec_of
from decodescope.telemetry.logs.log_summary import RequestShape
from decodescope.telemetry.logs.notes import human_bytes
from decodescope.telemetry.logs.reader import check_followable


@click.command("logs")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--since", metavar="T", help="From time T: HH:MM, 'MM-DD HH:MM[:SS]', ISO date-time.")
@click.option("--until", metavar="T", help="Up to time T (same forms).")
@click.option("--engine", type=click.Choice([*ENGINE_NAMES, "auto"]), default="auto",
              show_default=True, help="Log format; auto detects it from the first stats line.")
@click.option("--year", type=int, help="Year of the first line (vLLM prints none); "
              "default: from the file's modification time.")
@click.option("--follow", "-f", is_flag=True,
              help="Keep reading as the file grows (survives rotation and truncation); "
                   "print each window; Ctrl-C prints the summary.")
@click.option("--max-windows", type=int, default=MAX_WINDOWS_KEPT, show_default=True,
              help="Windows listed in --json (the most recent); 0 = all. The summary always "
                   "covers every window.")
@json_option
def command(file: str, since: str | None, until: str | None, engine: str, year: int | None,
            follow: bool, max_windows: int, as_json: bool) -> int:
    """Read a vLLM / SGLang / llama.cpp server log: decode rate, MAL and step rate per window.

    Answer first (median and peak decode tok/s, MAL, step rate), then a table of the windows
    over time, then what was read. Ctrl-C in --follow mode prints the summary so far.
    """
    eng = None if engine == "auto" else engine
    if follow:
        return _follow(file, since, until, eng, year, max_windows, as_json)
    check_log_path(file)
    if as_json and max_windows <= 0:
        return _json_all_windows(file, since, until, eng, year)
    summary = analyze_log(file, since=since, until=until, engine=eng, year=year,
                          max_windows=max_windows)
    _emit(summary, as_json)
    return 0


def _json_all_windows(file: str, since: str | None, until: str | None, engine: str | None,
                      year: int | None) -> int:
    """`--json --max-windows 0`: every window, written to a spool file as it comes (memory
    stays bounded whatever the log's size), then the summary with the windows last."""
    import tempfile

    n = 0
    with tempfile.TemporaryFile("w+", encoding="utf-8") as spool:
        def write(w: EngineWindow) -> None:
            nonlocal n
            spool.write((",\n" if n else "") + "    " + json.dumps(to_jsonable(w)))
            n += 1

        summary = analyze_log(file, since=since, until=until, engine=engine, year=year,
                              max_windows=1, on_window=write)
        doc = to_jsonable(summary)
        doc.pop("windows", None)
        doc["windows_listed"] = n
        head = json.dumps(doc, indent=2, sort_keys=False)
        assert head.endswith("\n}")
        click.echo(head[:-2] + ',\n  "windows": [\n', nl=False)
        spool.seek(0)
        while chunk := spool.read(1 << 20):
            click.echo(chunk, nl=False)
        click.echo("\n  ]\n}")
    return 0


def _emit(summary: LogSummary, as_json: bool) -> None:
    if not as_json:
        for note in summary.notes:
            if note.severity != "info":
                warn(note)
    emit(summary, as_json, render)


def _follow(file: str, since: str | None, until: str | None, engine: str | None,
            year: int | None, max_windows: int, as_json: bool) -> int:
    check_followable(file)
    selection = Selection(since=parse_time(since) if since else None,
                          until=parse_time(until) if until else None)
    counts = ParseCounts()
    readers: list[Any] = []
    acc = LogAccumulator(max_windows)
    try:
        for w in selection.apply(iter_windows(file, engine=engine, year=year, counts=counts,
                                              follow=True, reader_out=readers)):
            acc.add(w)
            if as_json:
                click.echo(json.dumps(to_jsonable(w)))
            else:
                click.echo(window_line(w))
    except KeyboardInterrupt:
        pass
    found = readers[0].engine.name if readers and readers[0].engine else None
    acc.spec = spec_of(readers[0] if readers else None)
    summary = acc.finish(file, found, counts, selection)
    _emit(replace(summary, simulated=is_simulated(file)), as_json)
    return 0


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


def render(s: LogSummary) -> str:
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
