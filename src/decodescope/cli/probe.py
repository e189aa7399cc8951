"""`decodescope probe URL --caliber NAME`: measure one caliber against one endpoint."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import click

from decodescope.caliber.derive import derive_caliber
from decodescope.caliber.resolve import resolve
from decodescope.caliber.spec import (
    Caliber,
    element_table,
)
from decodescope.cli.common import (
    check_url,
    emit,
    limit_options,
    load_options,
    parse_labels,
    store_option,
    warn,
)
from decodescope.console import json_option, raw_stream
from decodescope.exitcodes import ExitCode
from decodescope.records.findings import Finding
from decodescope.report.distributions import run_distributions
from decodescope.report.run_document import run_document
from decodescope.report.text import render_run
from decodescope.run.probe_side import Prepared, probe_once, read_api_key
from decodescope.run.runner import ProbeSettings
from decodescope.store import runs as sr
from decodescope.store.connect import open_store
from decodescope.store.db import Store


def load_line(cal: Caliber) -> str | None:
    """One header line naming the load shape and prompt source, when not the classic ones."""
    rows = dict(element_table(cal))
    parts = []
    if not cal.load.classic:
        parts.append(f"load: {rows['request rate']}, concurrency {rows['concurrency']}, "
                     f"{rows['requests per trial']} requests per trial"
                     + (f", {rows['trial duration']}" if cal.load.duration_s else ""))
    if cal.dataset is not None:
        parts.append(f"prompts: dataset {os.path.basename(cal.dataset.path)} ({rows['dataset']})")
    return " · ".join(parts) or None


def kept_line(store: Store, run_id: int) -> str:
    """What Ctrl-C leaves: the run id and its completed trials."""
    try:
        run = sr.get_run(store, run_id, with_traces=False)
    except Exception:  # the store itself failed: name the id anyway
        return f"interrupted: run {run_id} was kept in {store.path}"
    done = sum(1 for t in run.trials if t.status == "ok")
    planned = run.meta.get("trials", "?")
    return (f"interrupted: kept run {run_id} ({done} of {planned} trials completed) in "
            f"{store.path}; see it with: decodescope runs show {run_id}")


def _caliber_file(name: str) -> str | None:
    """The absolute path of a caliber given as a file (for "Next" commands that work)."""
    import os

    return os.path.abspath(name) if name.endswith(".toml") and os.path.isfile(name) else None


@click.command("probe")
@click.argument("url")
@click.option("--caliber", "caliber_name", required=True, help="Built-in name, name@version, or a .toml file.")
@click.option("--trials", default=3, show_default=True, type=click.IntRange(1, 1000), help="Repeats (the unit of statistics).")
@click.option("--label", "labels", multiple=True, help="key=value label stored with the run (repeatable).")
@click.option("--model", default=None, help="Model name (default: the first one the server lists).")
@click.option("--api-key-env", default=None, metavar="VAR", help="Name of the environment variable holding the API key.")
@click.option("--proxy", default=None, help="Send requests through this proxy (environment proxies are ignored by default).")
@click.option("--log", "log_path", type=click.Path(dir_okay=False), default=None, help="Engine log file to tail during the run.")
@click.option("--scrape-interval", default=1.0, show_default=True, type=click.FloatRange(0.05, 60), help="Longest Prometheus scrape interval, seconds; shorter trials get shorter intervals (about 12 scrapes per trial).")
@load_options
@click.option("--warmup", default=1, show_default=True, type=click.IntRange(0, 100), help="Requests sent before the trials and not counted (speculators that learn from earlier outputs, caches).")
@click.option("--slo", "slo", default=None, metavar="LIMITS",
              help="Goodput limits, e.g. ttft=200ms,tpot=50ms,e2e=10s, or a preset "
                   "(mlperf-llama2-70b, ...: docs/methodology.md). A caliber element, kept out "
                   "of the identity.")
@click.option("--no-scrape", is_flag=True, help="Do not scrape /metrics.")
@click.option("--no-fingerprint", is_flag=True, help="Do not collect the stack fingerprint.")
@click.option("--watch-repo", "watch_repos", multiple=True, type=click.Path(), help="Repository to check the engine against (repeatable).")
@limit_options
@store_option
@json_option
def command(url: str, caliber_name: str, trials: int, labels: tuple[str, ...], model: str | None,
            api_key_env: str | None, proxy: str | None, log_path: str | None,
            scrape_interval: float, warmup: int, no_scrape: bool, no_fingerprint: bool,
            watch_repos: tuple[str, ...], store_path: str | None, as_json: bool,
            concurrency: int | None = None, request_rate: float | None = None,
            burstiness: float | None = None, num_requests: int | None = None,
            duration_s: float | None = None, dataset: str | None = None,
            slo: str | None = None) -> int:
    """Probe URL under a caliber; store every trial; print client and engine numbers.

    URL is the server's base URL (a trailing /v1 is fine). Load options (--concurrency,
    --request-rate, --burstiness, --num-requests, --duration) and --dataset are caliber
    elements: they give the run its own caliber identity."""
    url = check_url(url)
    cal = derive_caliber(resolve(caliber_name), concurrency=concurrency,
                         request_rate=request_rate, burstiness=burstiness,
                         num_requests=num_requests, duration_s=duration_s, dataset=dataset)
    if slo is not None:
        from decodescope.caliber.slo import parse_slo

        cal = dataclasses.replace(cal, slo=parse_slo(slo))
    settings = ProbeSettings(url=url, caliber=cal, trials=trials, labels=parse_labels(labels),
                             model=model, api_key=read_api_key(api_key_env), proxy=proxy,
                             warmup=warmup, caliber_path=_caliber_file(caliber_name))
    store = open_store(store_path)
    try:
        def announce(prepared: Prepared) -> None:
            if as_json:
                return
            info, served_model, prompt = prepared
            sim = " [SIMULATED]" if info.simulated else ""
            what = ("prompt: one dataset entry per request" if cal.dataset else
                    f"prompt {prompt.tokens} tokens ({prompt.tokens_source})"
                    if prompt.tokens is not None else "prompt tokens unknown")
            click.echo(f"engine: {info.kind} {info.version or ''}{sim} · model {served_model} · "
                       f"caliber {cal.ref} ({cal.identity}) · {what}", err=True)
            extra = load_line(cal)
            if extra:
                click.echo(extra, err=True)

        created: list[int] = []
        try:
            with _progress(not as_json, trials) as progress:
                outcome = probe_once(store, settings, log_path=log_path, scrape=not no_scrape,
                                     scrape_interval_s=scrape_interval,
                                     fingerprint=not no_fingerprint, watch_repos=watch_repos,
                                     progress=progress, on_created=created.append,
                                     announce=announce)
        except KeyboardInterrupt:
            if created:
                click.echo(kept_line(store, created[0]), err=True)
            raise
        run = sr.get_run(store, outcome.run_id, with_traces=False)
        dist = run_distributions(sr.get_run(store, outcome.run_id))
        if not as_json:
            for f in outcome.findings:
                warn(f if isinstance(f, Finding) else Finding.from_dict(f))
        emit(run_document(run, dist), as_json,
             lambda _: render_run(run, dist) + f"\nsaved run {run.id} in {store.path}")
        if (run.result or {}).get("caliber_status") == "missed":
            return int(ExitCode.CALIBER_MISSED)
        return int(ExitCode.OK)
    finally:
        store.close()


class _progress:
    """A rich progress bar on stderr (tokens of the current trial)."""

    def __init__(self, enabled: bool, trials: int):
        self.enabled = enabled
        self.trials = trials
        self._p: Any = None
        self._task: Any = None
        self._trial = -1

    def __enter__(self) -> Any:
        return self.update if self.enabled else None

    def _start(self) -> None:
        """The bar starts with the first token, after the lines the command says first."""
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self._p = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                           TextColumn("tok"), TimeElapsedColumn(),
                           console=Console(file=raw_stream(err=True)), transient=True)
        self._p.start()

    def update(self, trial: int, tokens: int, expected: int) -> None:
        if self._p is None:
            self._start()
        if trial != self._trial:
            if self._task is not None:
                self._p.remove_task(self._task)
            self._task = self._p.add_task(f"trial {trial + 1}/{self.trials}", total=expected)
            self._trial = trial
        self._p.update(self._task, completed=min(tokens, expected))

    def __exit__(self, *exc: object) -> None:
        if self._p is not None:
            self._p.stop()
