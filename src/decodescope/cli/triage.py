"""`decodescope triage CURRENT --baseline BASELINE`: like-for-like verdict with evidence."""

from __future__ import annotations

import dataclasses
from typing import Any

import click

from decodescope.cli.common import emit, store_option
from decodescope.console import json_option
from decodescope.errors import UsageError
from decodescope.store.connect import open_store
from decodescope.store.db import Store
from decodescope.verdict import thresholds as th
from decodescope.verdict.bands import DEFAULT_BANDS, load_bands
from decodescope.verdict.judge import judge
from decodescope.verdict.side_resolve import SELECTOR_HELP, is_log_selector, resolve_side


@click.command("triage")
@click.argument("current")
@click.option("--baseline", "baseline_sel", required=True, metavar="BASELINE",
              help="What to compare against: " + SELECTOR_HELP + ".")
@click.option("--format", "fmt", type=click.Choice(["text", "md"]), default="text",
              show_default=True, help="Text for the terminal, or Markdown (the seed's tables).")
@click.option("--min-effect", default=th.MIN_EFFECT * 100, show_default=True,
              type=click.FloatRange(0, 100), metavar="PCT",
              help="Smallest relative change (percent) that counts as a change.")
@click.option("--run-spread", default=None, type=click.FloatRange(0, 50), metavar="PCT",
              help="Override the between-run spread (percent sd of a run's mean rate) that "
                   "widens decode and step-rate intervals. Default: learned from the store's "
                   f"runs of this caliber on each side's stack (≥ {th.MIN_SPREAD_RUNS} runs; "
                   "`decodescope spread` measures it), else a conservative prior of "
                   f"{th.PRIOR_RUN_SD:.0%}; log windows: {th.RUN_TO_RUN_SD:.0%}.")
@click.option("--bands", "bands_path", type=click.Path(dir_okay=False), default=None,
              help="TOML file of MAL bands by content class (default: the seed's).")
@click.option("--engine", default=None, type=click.Choice(["vllm", "sglang", "llamacpp"]),
              help="Engine of a log-window side (default: detected from the log).")
@click.option("--year", default=None, type=click.IntRange(1970, 9999),
              help="Year of year-less log stamps (vLLM prints MM-DD; default: the file's mtime).")
@click.option("--prometheus", "prometheus", metavar="URL", envvar="DECODESCOPE_PROMETHEUS",
              help="Prometheus server for prom:?job=...@A..B sides (env DECODESCOPE_PROMETHEUS).")
@click.option("--assume-same-caliber", is_flag=True,
              help="Assert that both sides ran the same workload (prompt, sampling, output "
                   "length, concurrency). Log windows carry no caliber: without this, a log "
                   "window whose caliber the MAL bands cannot establish is INCONCLUSIVE.")
@store_option
@json_option
def command(current: str, baseline_sel: str, fmt: str, min_effect: float,
            run_spread: float | None,
            bands_path: str | None,
            engine: str | None, year: int | None, prometheus: str | None,
            assume_same_caliber: bool,
            store_path: str | None, as_json: bool) -> int:
    """Compare CURRENT with --baseline and give one verdict with evidence.

    Each side is a stored run (42, last, key=value label), a baseline name, or an engine-log
    window FILE@START..END (times: 2026-09-15T23:30..23:45, 23:30..23:45, 09-15 23:30..09-15 23:45),
    or a Prometheus window prom+http://HOST:9090/?job=vllm&instance=gpu-a:8000@23:00..23:30
    (prom:?job=vllm@23:00..23:30 with --prometheus URL; windows of the query step, step=30s).

    Exit codes: 0 NO_CHANGE / IMPROVEMENT, 1 REGRESSION, 3 CALIBER_MISMATCH / CONTAMINATED /
    INCONCLUSIVE, 2 bad input.
    """
    if as_json and fmt == "md":
        raise UsageError("--json and --format md exclude each other", where="triage",
                         remedy="Pick one output format")
    bands = load_bands(bands_path) if bands_path else DEFAULT_BANDS
    need_store = not (is_log_selector(current) and is_log_selector(baseline_sel))
    store = open_store(store_path, read_only=True) if need_store else None
    try:
        base = resolve_side(baseline_sel, store=store, engine=engine, year=year,
                            prometheus=prometheus)
        cur = resolve_side(current, store=store, engine=engine, year=year, prometheus=prometheus)
        if assume_same_caliber:
            base = dataclasses.replace(base, caliber_asserted=True)
            cur = dataclasses.replace(cur, caliber_asserted=True)
        verdict = judge(base, cur, store=store, run_spread_pct=run_spread,
                        min_effect=min_effect / 100.0, bands=bands,
                        assume_same_caliber=assume_same_caliber)
        goodput = _goodput(store, base.run_ids, cur.run_ids)
    finally:
        if store is not None:
            store.close()
    if fmt == "md":
        from decodescope.report.verdict_md import render_verdict_md

        click.echo(render_verdict_md(verdict), nl=False)
        if goodput is not None:
            from decodescope.analysis.goodput import beside_lines

            click.echo("\n" + "\n".join(beside_lines(goodput)))
    else:
        from decodescope.analysis.goodput import beside_lines
        from decodescope.cli.common import to_jsonable
        from decodescope.verdict.render import render_text

        if goodput is None:
            emit(verdict, as_json, render_text)
        else:
            emit({**to_jsonable(verdict), "goodput": goodput}, as_json,
                 lambda _: "\n".join([render_text(verdict), "", *beside_lines(goodput)]))
    return verdict.exit_code


def _goodput(store: Store | None, base_ids: tuple[int, ...], cur_ids: tuple[int, ...]
             ) -> dict[str, Any] | None:
    """Each side's goodput (stored runs' records), for showing beside the verdict."""
    from decodescope.analysis.goodput import beside_verdict, pooled
    from decodescope.store import runs as sr

    if store is None:
        return None

    def side(ids: tuple[int, ...]) -> dict[str, Any] | None:
        if not ids:
            return None
        return pooled([(sr.get_run(store, i, with_traces=False).result or {}).get("goodput")
                       for i in ids])

    return beside_verdict(side(base_ids), side(cur_ids))
