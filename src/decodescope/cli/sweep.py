"""`decodescope sweep URL --calibers A,B,...`: the caliber matrix of one server;
`decodescope sweep URL --caliber A --concurrency 1,8,32` (or `--request-rate 1,2,4`): the
throughput–latency curve of one caliber under several loads."""

from __future__ import annotations

import os
import time
from typing import Any

import click

from decodescope.caliber.derive import derive_caliber
from decodescope.caliber.resolve import resolve
from decodescope.caliber.spec import MAX_CONCURRENCY
from decodescope.cli.common import (
    emit,
    load_options,
    make_options,
    probe_options,
    store_option,
    warn,
)
from decodescope.console import json_option
from decodescope.errors import UsageError
from decodescope.run.probe_side import ProbeOptions
from decodescope.run.sweep import caliber_sweep, load_sweep, plan_load_sweep
from decodescope.store.connect import open_store
from decodescope.verdict.bands import DEFAULT_BANDS, load_bands
from decodescope.verdict.matrix import caliber_matrix, render_matrix


def _numbers(text: str | None, where: str, integer: bool) -> list[float]:
    if not text:
        return []
    out: list[float] = []
    for part in (p.strip() for p in text.split(",")):
        try:
            v = int(part) if integer else float(part)
        except ValueError:
            raise UsageError(f"{part!r} is not a {'whole ' if integer else ''}number", where=where,
                             remedy=f"Give a comma-separated list, e.g. {where} "
                                    + ("1,8,32" if integer else "1,2,4")) from None
        if not v > 0 or (integer and v > MAX_CONCURRENCY):
            raise UsageError(f"{part} is out of range", where=where,
                             remedy=f"Use values > 0{f' and <= {MAX_CONCURRENCY}' if integer else ''}")
        out.append(v)
    return out


def _sweep_load_options(f: Any) -> Any:
    return load_options(f, sweep=True)


@click.command("sweep")
@click.argument("url")
@click.option("--calibers", "--caliber", "caliber_list", required=True, metavar="A,B,...",
              help="Calibers to probe, comma-separated (names, name@version, or .toml files); "
                   "one caliber with --concurrency / --request-rate lists.")
@click.option("--concurrency", "concurrency_list", default=None, metavar="N,N,...",
              help="Load sweep: one probe per concurrency (closed loop), e.g. 1,8,32. With "
                   "--request-rate: one value, the cap on requests in flight.")
@click.option("--request-rate", "rate_list", default=None, metavar="R,R,...",
              help="Load sweep: one probe per request rate (requests/s, Poisson), e.g. 1,2,4.")
@_sweep_load_options
@click.option("--warmup", default=1, show_default=True, type=click.IntRange(0, 100),
              help="Requests sent before each probe's trials and not counted.")
@probe_options
@click.option("--bands", "bands_path", type=click.Path(dir_okay=False), default=None,
              help="TOML file of MAL bands by content class (default: the seed's).")
@click.option("--format", "fmt", type=click.Choice(["text", "md", "csv"]), default="text",
              show_default=True, help="Text, Markdown (the seed's 'numbers side by side'), or "
                                      "CSV (load sweeps: one row per point).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              metavar="FILE.html", help="Load sweeps: write the table and the throughput–latency "
                                        "plots as one self-contained HTML file.")
@click.option("--slo", "slo", default=None, metavar="LIMITS",
              help="Load sweeps: goodput limits per point (as probe --slo); the sweep names the "
                   "highest load whose goodput reaches --slo-target.")
@click.option("--slo-target", "slo_target", default=99.0, show_default=True,
              type=click.FloatRange(0, 100, min_open=True), metavar="PCT",
              help="Share of requests that must meet the SLO for a load to meet it.")
@store_option
@json_option
def command(url: str, caliber_list: str, concurrency_list: str | None, rate_list: str | None,
            trials: int, labels: tuple[str, ...], model: str | None, api_key_env: str | None,
            proxy: str | None, log_path: str | None, scrape_interval: float, no_scrape: bool,
            no_fingerprint: bool, bands_path: str | None, fmt: str, plot_path: str | None,
            store_path: str | None, as_json: bool, warmup: int = 1,
            request_rate: float | None = None, burstiness: float | None = None,
            num_requests: int | None = None, duration_s: float | None = None,
            dataset: str | None = None, slo: str | None = None,
            slo_target: float = 99.0) -> int:
    """Probe several calibers on one server (decode rate, MAL and step rate per caliber), or
    one caliber under several loads (decode rate per request, output throughput of all
    requests, TTFT / ITL percentiles per load: the throughput–latency curve)."""
    from decodescope.cli.common import check_url  # bad URL: exit 2, before any probe or store
    url, names = check_url(url), [n.strip() for n in caliber_list.split(",") if n.strip()]
    concs = _numbers(concurrency_list, "--concurrency", integer=True)
    rates = _numbers(rate_list, "--request-rate", integer=False)
    opts = make_options(trials, labels, model, api_key_env, proxy, log_path, scrape_interval,
                        no_scrape, no_fingerprint)
    extra: dict[str, Any] = {"burstiness": burstiness, "num_requests": num_requests, "duration_s": duration_s,
             "dataset": dataset}
    if concs or rates:
        return _load_sweep(url, names, concs, rates, opts, extra, warmup, fmt, plot_path,
                           store_path, as_json, slo, slo_target / 100.0)
    if slo is not None:
        raise UsageError("--slo is for load sweeps", where="sweep",
                         remedy="Add --concurrency N,N,... or --request-rate R,R,...")
    if len(names) < 2:
        raise UsageError("a sweep needs at least two calibers, or one caliber and a load list",
                         where="--calibers",
                         remedy="e.g. --calibers demo-code-rewrite,demo-varied-prose, or "
                                "--caliber demo-code-rewrite --concurrency 1,4,16")
    if plot_path or fmt == "csv":
        raise UsageError("--plot and --format csv are for load sweeps", where="sweep",
                         remedy="Add --concurrency N,N,... or --request-rate R,R,...")
    cals = [derive_caliber(resolve(n), **extra) for n in names]  # every name checked first
    bands = load_bands(bands_path) if bands_path else DEFAULT_BANDS
    with open_store(store_path) as store:
        sides = caliber_sweep(store, url, cals, opts, **_said(as_json))
    matrix = caliber_matrix(sides, bands)
    if fmt == "md":
        from decodescope.markup import md_text
        from decodescope.report.verdict_md import numbers_side_by_side

        sim = " [SIMULATED]" if matrix.simulated else ""
        click.echo(md_text(matrix.summary + sim) + "\n\n" + numbers_side_by_side(sides, bands))
    else:
        emit(matrix, as_json, render_matrix)
    return 0


def _said(quiet: bool) -> dict[str, Any]:
    """What a sweep says on stderr while it probes: each probe's line and findings (nothing
    with --json)."""
    if quiet:
        return {}
    return {"announce": lambda line: click.echo(line, err=True), "warn": warn}


def _load_sweep(url: str, names: list[str], concs: list[float], rates: list[float],
                opts: ProbeOptions, extra: dict[str, Any], warmup: int, fmt: str,
                plot_path: str | None, store_path: str | None, as_json: bool,
                slo: str | None = None, slo_target: float = 0.99) -> int:
    from decodescope.analysis.goodput import sweep_lines
    from decodescope.report import loadsweep

    if len(names) != 1:
        raise UsageError("a load sweep probes one caliber", where="--caliber",
                         remedy="Give one caliber with --concurrency / --request-rate lists")
    plan = plan_load_sweep(resolve(names[0]), concs, rates, extra, slo)
    tag = f"load-{int(time.time())}"
    created: list[int] = []
    with open_store(store_path) as store:
        try:
            done = load_sweep(store, url, plan, opts, tag=tag, warmup=warmup,
                              slo_target=slo_target, on_created=created.append,
                              **_said(as_json))
        except KeyboardInterrupt:
            if created:
                click.echo(f"interrupted: kept run(s) {', '.join(map(str, created))} in "
                           f"{store.path} (label sweep={tag}); the last one is incomplete",
                           err=True)
            raise
    sweep = loadsweep.load_sweep(done.axis, done.values, done.runs)
    good = done.goodput
    if plot_path:
        from decodescope.report.files import write_file

        write_file(plot_path, loadsweep.render_html(sweep))
        click.echo(f"wrote {os.path.abspath(plot_path)}", err=True)
    if as_json:
        from decodescope.report.iso import with_iso

        doc = with_iso(sweep.to_dict())
        emit({**doc, "goodput": good} if good is not None else doc, True, str)
    elif fmt == "csv":
        click.echo(loadsweep.render_csv(sweep), nl=False)
    elif fmt == "md":
        click.echo("\n".join([loadsweep.render_md(sweep), *sweep_lines(good)]))
    else:
        click.echo("\n".join([loadsweep.render_text(sweep), *sweep_lines(good)]))
    return 0
