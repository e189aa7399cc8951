"""`decodescope sweep URL --calibers A,B,...`: the caliber matrix of one server;
`decodescope sweep URL --caliber A --concurrency 1,8,32` (or `--request-rate 1,2,4`): the
throughput–latency curve of one caliber under several loads."""

from __future__ import annotations

import os
import time
from typing import Any

import click

from decodescope.caliber.resolve import resolve
from decodescope.caliber.spec import MAX_CONCURRENCY, Caliber
from decodescope.cli.check import announced_probe_side, make_options, probe_options
from decodescope.cli.common import emit, store_option
from decodescope.cli.probe import derive_caliber, load_options
from decodescope.console import json_option
from decodescope.errors import UsageError
from decodescope.records.stored_run import StoredRun
from decodescope.run.probe_side import ProbeOptions
from decodescope.store import runs as sr
from decodescope.store.connect import open_store
from decodescope.store.db import Store
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
    opts.labels.setdefault("sweep", ",".join(c.ref for c in cals))
    sides = []
    with open_store(store_path) as store:
        for cal in cals:
            side, _missed = announced_probe_side(store, url, cal, opts, quiet=as_json)
            sides.append(side)
    matrix = caliber_matrix(sides, bands)
    if fmt == "md":
        from decodescope.markup import md_text
        from decodescope.report.verdict_md import numbers_side_by_side

        sim = " [SIMULATED]" if matrix.simulated else ""
        click.echo(md_text(matrix.summary + sim) + "\n\n" + numbers_side_by_side(sides, bands))
    else:
        emit(matrix, as_json, render_matrix)
    return 0


def load_points(cal: Caliber, concs: list[float], rates: list[float],
                extra: dict[str, Any]) -> tuple[str, list[float], list[Caliber]]:
    """The sweep's axis, values and one derived caliber per point."""
    if concs and rates and len(concs) > 1:
        raise UsageError("sweep one load at a time: --concurrency and --request-rate are both "
                         "lists", where="sweep",
                         remedy="With --request-rate R,R,..., --concurrency takes one value "
                                "(the cap on requests in flight)")
    if rates:
        cap = int(concs[0]) if concs else None
        return "request_rate", rates, [derive_caliber(cal, concurrency=cap, request_rate=r, **extra)
                                       for r in rates]
    return "concurrency", concs, [derive_caliber(cal, concurrency=int(c), **extra)
                                  for c in concs]


def _probe_point(store: Store, url: str, cal: Caliber, opts: ProbeOptions, warmup: int,
                 created: list[int], quiet: bool, what: str) -> int:
    """One point of a load sweep: a probe with the same observers as `probe`."""
    from decodescope.cli.common import warn
    from decodescope.records.findings import Finding
    from decodescope.run.runner import ProbeSettings, prepare, run_probe
    from decodescope.run.setup import build_observers, collect_fp

    settings = ProbeSettings(url=url, caliber=cal, trials=opts.trials, labels=dict(opts.labels),
                             model=opts.model, api_key=opts.api_key, proxy=opts.proxy,
                             warmup=warmup)
    prepared = prepare(settings)
    info = prepared[0]
    if not quiet:
        sim = " [SIMULATED]" if info.simulated else ""
        click.echo(f"probing {cal.ref} ({cal.identity}) at {what} on {info.kind} "
                   f"{info.version or ''}{sim} · {opts.trials} trials", err=True)
    observers = build_observers(settings, info, log_path=opts.log_path, scrape=opts.scrape,
                                scrape_interval_s=opts.scrape_interval_s)
    fp = collect_fp(settings, opts.log_path, ()) if opts.fingerprint else None
    outcome = run_probe(settings, store, observers=observers, fingerprint=fp, prepared=prepared,
                        on_created=created.append)
    if not quiet:
        for f in outcome.findings:
            warn(f if isinstance(f, Finding) else Finding.from_dict(f))
    return outcome.run_id


def _load_sweep(url: str, names: list[str], concs: list[float], rates: list[float],
                opts: ProbeOptions, extra: dict[str, Any], warmup: int, fmt: str,
                plot_path: str | None, store_path: str | None, as_json: bool,
                slo: str | None = None, slo_target: float = 0.99) -> int:
    import dataclasses

    from decodescope.analysis.goodput import sweep_goodput, sweep_lines
    from decodescope.report import loadsweep

    if len(names) != 1:
        raise UsageError("a load sweep probes one caliber", where="--caliber",
                         remedy="Give one caliber with --concurrency / --request-rate lists")
    axis, values, cals = load_points(resolve(names[0]), concs, rates, extra)
    if slo is not None:
        from decodescope.caliber.slo import parse_slo

        limits = parse_slo(slo)
        cals = [dataclasses.replace(c, slo=limits) for c in cals]
    tag = f"load-{int(time.time())}"
    opts.labels.setdefault("sweep", tag)
    opts.labels.setdefault("load_axis", axis)
    runs: list[StoredRun] = []
    created: list[int] = []
    with open_store(store_path) as store:
        try:
            for v, cal in zip(values, cals, strict=True):
                opts.labels["load"] = f"{v:g}"
                run_id = _probe_point(store, url, cal, opts, warmup, created, as_json, f"{axis} {v:g}")
                runs.append(sr.get_run(store, run_id))
        except KeyboardInterrupt:
            if created:
                click.echo(f"interrupted: kept run(s) {', '.join(map(str, created))} in "
                           f"{store.path} (label sweep={tag}); the last one is incomplete",
                           err=True)
            raise
    sweep = loadsweep.load_sweep(axis, values, runs)
    good = sweep_goodput(axis, values, [(r.result or {}).get("goodput") for r in runs],
                         slo_target) if slo is not None else None
    if plot_path:
        from decodescope.cli.report import _write

        _write(plot_path, loadsweep.render_html(sweep))
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
