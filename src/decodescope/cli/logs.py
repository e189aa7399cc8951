"""`decodescope logs FILE`: an engine log alone, summed up in windows (docs/logs.md).

Exit codes: 0 when the log was read (also when it holds no engine windows: the answer says
so and the notes give the counts); 2 for bad input (missing file, bad --since, --follow of a
compressed file, a zstd file); 130 on Ctrl-C outside --follow. In --follow mode Ctrl-C ends
the tail and prints the summary (0). A gzip / bzip2 / xz file is read through its
decompressor.
"""

from __future__ import annotations

import json

import click

from decodescope.cli.common import emit, to_jsonable, warn
from decodescope.console import json_option
from decodescope.records.window import EngineWindow
from decodescope.report.windows_text import render_log_summary, window_line
from decodescope.telemetry.logs import (
    ENGINE_NAMES,
    LogSummary,
    analyze_log,
    check_log_path,
)
from decodescope.telemetry.logs.accumulate import MAX_WINDOWS_KEPT


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
    emit(summary, as_json, render_log_summary)


def _follow(file: str, since: str | None, until: str | None, engine: str | None,
            year: int | None, max_windows: int, as_json: bool) -> int:
    def show(w: EngineWindow) -> None:
        click.echo(json.dumps(to_jsonable(w)) if as_json else window_line(w))

    summary = analyze_log(file, since=since, until=until, engine=engine, year=year,
                          max_windows=max_windows, follow=True, on_window=show)
    _emit(summary, as_json)
    return 0
