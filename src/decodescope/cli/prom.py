"""`decodescope prom SELECTOR --since T --until T`: an engine's history in Prometheus, summed up
in windows of the query step, as `decodescope logs` does for a log file (docs/prometheus.md).

Exit codes: 0 when the history was read; 2 for bad input (selector, times, a query too large);
4 when the server cannot be reached; 5 when it answers something that is not Prometheus's API.
"""

from __future__ import annotations

import click

from decodescope.cli.common import emit
from decodescope.console import json_option
from decodescope.errors import UsageError
from decodescope.report.windows_text import render_prom
from decodescope.telemetry.prom_history import SCHEME, SELECTOR_FORMS, SHORT
from decodescope.verdict.prom_side import prom_summary, read_prom


def full_selector(selector: str, since: str | None, until: str | None) -> str:
    """SELECTOR with its range: `@A..B` from the selector or from --since / --until."""
    s = selector.strip()
    if s.startswith(("http://", "https://")):
        s = SCHEME + s
    elif not s.startswith((SCHEME, SHORT)):
        s = SHORT + ("?" + s if "=" in s and not s.startswith("?") else s)
    _, at, rng = s.rpartition("@")
    if at and ".." in rng:
        if since or until:
            raise UsageError("the selector has a range and --since/--until give another",
                             where="prom", remedy="Give the range once")
        return s
    if not since:
        raise UsageError("no time range", where="prom",
                         remedy=f"Give --since T [--until T], or write {SELECTOR_FORMS}")
    return f"{s}@{since}..{until or ''}"


@click.command("prom")
@click.argument("selector")
@click.option("--since", metavar="T", help="From time T: HH:MM, 'MM-DD HH:MM[:SS]', ISO date-time, "
              "epoch seconds.")
@click.option("--until", metavar="T", help="Up to time T (same forms; default: now).")
@click.option("--prometheus", "server", metavar="URL", envvar="DECODESCOPE_PROMETHEUS",
              help="Prometheus server for selectors without one (prom:?job=...; "
                   "env DECODESCOPE_PROMETHEUS).")
@click.option("--engine", default=None, type=click.Choice(["vllm", "sglang", "llamacpp"]),
              help="Engine whose metric names to read (default: from the names found).")
@json_option
def command(selector: str, since: str | None, until: str | None, server: str | None,
            engine: str | None, as_json: bool) -> int:
    """Read an engine's series from a Prometheus server: decode rate, MAL and step rate per
    window of the query step (range queries over /api/v1/query_range, never a scrape).

    SELECTOR is `prom+http://HOST:9090/?job=vllm&instance=gpu-a:8000` (label matchers as
    query parameters: key=value, key=~regex, key=!value; step=15s sets the window, default 30 s),
    `job=vllm` with --prometheus URL, or either with `@START..END` instead of --since/--until.
    Several matching series (replicas, data-parallel ranks) are summed, with a note.
    """
    sel = full_selector(selector, since, until)
    read = read_prom(sel, engine=engine, server=server)
    result = prom_summary(sel.rpartition("@")[0], read)
    emit(result, as_json, render_prom)
    return 0
