"""`decodescope prom SELECTOR --since T --until T`: an engine's history in Prometheus, summed up
in windows of the query step, as `decodescope logs` does for a log file (docs/prometheus.md).

Exit codes: 0 when the history was read; 2 for bad input (selector, times, a query too large);
4 when the server cannot be reached; 5 when it answers something that is not Prometheus's API.
"""

from __future__ import annotations

import statistics
from typing import Any

import click

from decodescope.cli.common import emit
from decodescope.console import json_option
from decodescope.errors import UsageError
from decodescope.telemetry.prom_history import SCHEME, SELECTOR_FORMS, SHORT
from decodescope.verdict.prom_side import read_prom, side_from_prom


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
    name = sel.rpartition("@")[0]
    side = side_from_prom(name, read)
    result = PromSummary(read.windows, side.to_dict(), read.engine, read.step_s, read.series,
                         [*side.notes], read.queries, read.start_s, read.end_s)
    emit(result, as_json, render)
    return 0


class PromSummary:
    def __init__(self, windows: list[Any], side: dict[str, Any], engine: str | None,
                 step_s: float, series: list[str], notes: list[str], queries: int,
                 start_s: float, end_s: float):
        self.windows, self.side, self.engine, self.step_s = windows, side, engine, step_s
        self.series, self.notes, self.queries = series, notes, queries
        self.start_s, self.end_s = start_s, end_s

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "step_s": self.step_s, "series": self.series,
                "start_s": self.start_s, "end_s": self.end_s, "queries": self.queries,
                "median": self.side["median"], "spec_method": self.side["spec_method"],
                "spec_k": self.side["spec_k"], "units": len(self.side["units"]),
                "notes": self.notes, "windows": [w.to_dict() for w in self.windows]}


def render(s: PromSummary) -> str:
    from decodescope.cli.logs import DECODE_NOTE, window_line

    med = s.side["median"]
    busy = [d for w in s.windows if (d := w.decode_rate) is not None and w.generation_tokens]
    parts = [f"{s.engine or 'engine'} via Prometheus, {len(s.windows)} windows × {s.step_s:g} s"]
    if busy:
        parts.append(f"decode median {statistics.median(busy):.1f} tok/s (all requests), "
                     f"peak {max(busy):.1f}")
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
