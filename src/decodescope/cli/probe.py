"""`decodescope probe URL --caliber NAME`: measure one caliber against one endpoint."""

from __future__ import annotations

import os
from typing import Any

import click

from decodescope.caliber.load import resolve
from decodescope.cli.common import emit, json_option, limit_options, store_option, warn
from decodescope.errors import UsageError
from decodescope.exitcodes import ExitCode
from decodescope.findings import Finding
from decodescope.probe.runner import ProbeSettings, prepare, run_probe
from decodescope.report.text import render_run
from decodescope.store import runs as sr
from decodescope.store.db import Store


def parse_labels(labels: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in labels:
        if "=" not in item:
            raise UsageError(f"label {item!r} is not key=value", where="--label",
                             remedy="Write labels as --label key=value")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def read_api_key(var: str | None) -> str | None:
    if not var:
        return None
    key = os.environ.get(var)
    if not key:
        raise UsageError(f"environment variable {var} is empty or unset", where="--api-key-env",
                         remedy=f"export {var}=... (the variable's NAME goes to --api-key-env, never the key)")
    try:
        from decodescope.fingerprint.redact import register_secret
    except ImportError:  # pragma: no cover
        pass
    else:
        register_secret(key)
    return key


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
@click.option("--warmup", default=1, show_default=True, type=click.IntRange(0, 100), help="Requests sent before the trials and not counted (speculators that learn from earlier outputs, caches).")
@click.option("--no-scrape", is_flag=True, help="Do not scrape /metrics.")
@click.option("--no-fingerprint", is_flag=True, help="Do not collect the stack fingerprint.")
@click.option("--watch-repo", "watch_repos", multiple=True, type=click.Path(), help="Repository to check the engine against (repeatable).")
@limit_options
@store_option
@json_option
def command(url: str, caliber_name: str, trials: int, labels: tuple[str, ...], model: str | None,
            api_key_env: str | None, proxy: str | None, log_path: str | None,
            scrape_interval: float, warmup: int, no_scrape: bool, no_fingerprint: bool,
            watch_repos: tuple[str, ...], store_path: str | None, as_json: bool) -> int:
    """Probe URL under a caliber; store every trial; print client and engine numbers."""
    cal = resolve(caliber_name)
    settings = ProbeSettings(url=url, caliber=cal, trials=trials, labels=parse_labels(labels),
                             model=model, api_key=read_api_key(api_key_env), proxy=proxy,
                             warmup=warmup, caliber_path=_caliber_file(caliber_name))
    store = Store.open(store_path)
    try:
        prepared = prepare(settings)
        info, served_model, prompt = prepared
        if not as_json:
            sim = " [SIMULATED]" if info.simulated else ""
            click.echo(f"engine: {info.kind} {info.version or ''}{sim} · model {served_model} · "
                       f"caliber {cal.ref} ({cal.identity}) · prompt {prompt.tokens or '?'} tokens "
                       f"({prompt.tokens_source})", err=True)
        from decodescope.cli.probe_setup import build_observers, collect_fp

        observers = build_observers(settings, info, log_path=log_path, scrape=not no_scrape,
                                    scrape_interval_s=scrape_interval)
        fp = None if no_fingerprint else collect_fp(settings, log_path, watch_repos)
        with _progress(not as_json, trials) as progress:
            outcome = run_probe(settings, store, observers=observers, progress=progress,
                                fingerprint=fp, prepared=prepared)
        run = sr.get_run(store, outcome.run_id, with_traces=False)
        if not as_json:
            for f in outcome.findings:
                warn(f if isinstance(f, Finding) else Finding.from_dict(f))
        emit(run.to_dict(with_traces=False), as_json,
             lambda _: render_run(run) + f"\nsaved run {run.id} in {store.path}")
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
        if not self.enabled:
            return None
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
                           console=Console(stderr=True), transient=True)
        self._p.start()
        return self.update

    def update(self, trial: int, tokens: int, expected: int) -> None:
        assert self._p is not None
        if trial != self._trial:
            if self._task is not None:
                self._p.remove_task(self._task)
            self._task = self._p.add_task(f"trial {trial + 1}/{self.trials}", total=expected)
            self._trial = trial
        self._p.update(self._task, completed=min(tokens, expected))

    def __exit__(self, *exc: object) -> None:
        if self._p is not None:
            self._p.stop()
