"""`decodescope report RUN|FILE@A..B... [--baseline RUN] --format html|md|json -o FILE`."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import click

from decodescope.cli.common import store_option
from decodescope.errors import UsageError
from decodescope.records.stored_run import StoredRun
from decodescope.report import report_html, report_json, report_md
from decodescope.report.document import Report, build_report, log_window_run
from decodescope.report.files import write_file
from decodescope.store import runs as sr
from decodescope.store.connect import open_store
from decodescope.verdict.side import Side
from decodescope.verdict.side_resolve import is_log_selector

RENDERERS = {"html": report_html.render, "md": report_md.render, "json": report_json.render}
SUFFIXES = {".html": "html", ".htm": "html", ".md": "md", ".markdown": "md", ".json": "json"}


def pick_format(fmt: str | None, output: str | None, as_json: bool) -> str:
    if as_json and fmt not in (None, "json") and output is None:
        raise UsageError(f"--json and --format {fmt} disagree", where="report",
                         remedy="Without -o, --json means --format json; drop one of them")
    if fmt:
        return fmt
    if as_json and output is None:
        return "json"
    if output:
        return SUFFIXES.get(Path(output).suffix.lower(), "html")
    return "html"


@click.command("report")
@click.argument("runs", nargs=-1, required=True)
@click.option("--baseline", default=None, help="Compare every RUN with this run (id, `last`, key=value) or log window FILE@A..B.")
@click.option("--format", "fmt", type=click.Choice(sorted(RENDERERS)), default=None,
              help="html (self-contained, plots), md (tables) or json. Default: from -o's suffix, else html.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="File to write (default: stdout).")
@click.option("--title", default=None, help="Report title (default: the runs' names).")
@store_option
@click.option("--json", "as_json", is_flag=True,
              help="With -o: print what was written as JSON. Without -o: same as --format json.")
def command(runs: tuple[str, ...], baseline: str | None, fmt: str | None, output: str | None,
            title: str | None, store_path: str | None, as_json: bool) -> int:
    """Write a report of stored RUNs or engine-log windows (FILE@START..END, as `triage`
    takes them): the verdict of a pair, evidence, numbers and plots.

    Two RUNs (or RUN --baseline RUN) are compared: the first (or the baseline) is the
    baseline. The HTML file is self-contained and works offline.
    """
    fmt = pick_format(fmt, output, as_json)
    sides: dict[int, Side] = {}
    log_runs: dict[str, StoredRun] = {}
    for sel in [*runs, *([baseline] if baseline else [])]:
        if is_log_selector(sel) and sel not in log_runs:
            log_runs[sel] = _log_run(sel, -1 - len(log_runs), sides)
    stored = [s for s in [*runs, *([baseline] if baseline else [])] if s not in log_runs]
    by_sel: dict[str, StoredRun] = dict(log_runs)
    st = open_store(store_path, read_only=True) if stored else None
    try:
        if st is not None:
            for sel in stored:
                by_sel[sel] = sr.get_run(st, sr.resolve_run_id(st, sel))
        base = by_sel[baseline] if baseline else None
        loaded = list({by_sel[s].id: by_sel[s] for s in runs}.values())
        report = build_report(loaded, baseline=base, generated_at=time.time(), title=title,
                              sides=sides, store=st)
    finally:
        if st is not None:
            st.close()
    text = RENDERERS[fmt](report)
    if output is None:
        click.echo(text, nl=False)
        return 0
    write_file(output, text)
    summary = {"written": os.path.abspath(output), "format": fmt, "bytes": len(text.encode()),
               "runs": [r.run_id if r.run_id > 0 else r.short for r in report.runs],
               "verdicts": [{"baseline": c.baseline_id, "current": c.current_id,
                             "verdict": c.verdict} for c in report.comparisons]}
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        verdicts = "; ".join(f"{_name(report, c.baseline_id)} → {_name(report, c.current_id)}: "
                             f"{c.verdict or 'no verdict'}" for c in report.comparisons)
        click.echo(f"wrote {output} ({fmt}, {summary['bytes']} bytes)"
                   + (f" · {verdicts}" if verdicts else ""))
    return 0


def _name(report: Report, run_id: int) -> str:
    return f"run {run_id}" if run_id > 0 else report.run(run_id).short


def _log_run(selector: str, run_id: int, sides: dict[int, Side]) -> StoredRun:
    """An engine-log window `FILE@A..B` as a report section (its windows plotted) and a
    verdict side (compared as `triage` compares it)."""
    from decodescope.telemetry.logs.selectors import split_selector
    from decodescope.telemetry.prom_history import is_prom_selector
    from decodescope.verdict.side_resolve import load_log_side, read_log

    if is_prom_selector(selector):  # a Prometheus window (server: $DECODESCOPE_PROMETHEUS)
        from decodescope.verdict.prom_side import load_prom_side, read_prom

        side = load_prom_side(selector)
        sides[run_id] = side
        return log_window_run(side, read_prom(selector).windows, selector, run_id)
    side = load_log_side(selector)
    path, start, end = split_selector(selector)
    windows = read_log(path, start, end, engine=None, year=None).windows
    sides[run_id] = side
    return log_window_run(side, windows, selector, run_id)
