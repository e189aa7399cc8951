"""What every CLI command shares: the store option, --timeout / --deadline, the URL check,
JSON or text output of a typed result, warnings on stderr, and the option groups several
commands take (--label parsing, load options, probe options). No CLI module imports another
one but this (tests/test_cli_thin.py).

Commands are thin: parse options, call the library, hand a typed result to `emit`. The one
place that turns exceptions into exit codes, and the redaction pass over everything printed,
live one layer down in `decodescope.console` (docs/faults.md has the table).
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from decodescope.caliber.spec import DEFAULT_RATE_REQUESTS, MAX_CONCURRENCY
from decodescope.errors import UsageError
from decodescope.records.findings import Finding
from decodescope.records.jsonable import to_jsonable

if TYPE_CHECKING:
    from decodescope.engines.install import InstallStep
    from decodescope.run.probe_side import ProbeOptions

store_option = click.option(
    "--store",
    "store_path",
    type=click.Path(dir_okay=False),
    envvar="DECODESCOPE_STORE",
    default=None,
    help="Run store: an SQLite file or a postgresql:// URL. Default: the platform data directory; env DECODESCOPE_STORE.",
)


def limit_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--timeout and --deadline for every command that probes: the requests it sends run
    inside `probe.client.stream_limits`, so a server that never answers cannot hold it."""

    @functools.wraps(f)
    def wrapper(*args: Any, timeout_s: float | None, deadline_s: float | None, **kwargs: Any) -> Any:
        from decodescope.probe.client import stream_limits

        with stream_limits(idle_timeout_s=timeout_s, deadline_s=deadline_s):
            return f(*args, **kwargs)

    wrapper = click.option(
        "--deadline", "deadline_s", type=click.FloatRange(0.1, 7 * 86400), default=None,
        metavar="SECONDS",
        help="Give up on a request this long after it was sent, answered or not (default: no deadline).",
    )(wrapper)
    wrapper = click.option(
        "--timeout", "timeout_s", type=click.FloatRange(0.1, 86400), default=None, metavar="SECONDS",
        help="Give up on a request after this long without a byte from the server (default 600).",
    )(wrapper)
    return wrapper


def client_options(runs: str, warmup: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """--api-key-env, --proxy, --warmup and --label for a command that stores several runs
    (`ab`, `spread`): `runs` says which runs carry the labels, `warmup` where it is sent."""

    def deco(f: Callable[..., Any]) -> Callable[..., Any]:
        for opt in reversed((
            click.option("--api-key-env", default=None, metavar="VAR",
                         help="Name of the environment variable holding the API key."),
            click.option("--proxy", default=None, help="Send requests through this proxy."),
            click.option("--warmup", default=1, show_default=True,
                         type=click.IntRange(0, 100),
                         help=f"Uncounted requests {warmup}."),
            click.option("--label", "labels", multiple=True,
                         help=f"key=value label for {runs}."),
        )):
            f = opt(f)
        return f

    return deco


def check_url(url: str, where: str = "URL") -> str:
    """The server URL a command was given, checked before anything is sent or stored: an
    http(s) scheme, a host, a numeric port. Anything else is bad input (exit 2), not an
    unreachable server (exit 4)."""
    from urllib.parse import urlsplit

    remedy = "Give the server's base URL with its scheme, e.g. http://127.0.0.1:8000"
    try:
        parts = urlsplit(url.strip())
        port = parts.port  # raises ValueError on a port that is not a number in 0..65535
    except ValueError as exc:
        raise UsageError(f"not a valid URL: {url!r} ({exc})", where=where, remedy=remedy) from None
    if parts.scheme.lower() not in ("http", "https"):
        what = f"scheme {parts.scheme!r}" if "://" in url else "no http:// or https://"
        raise UsageError(f"not an http(s) URL: {url!r} has {what}", where=where, remedy=remedy)
    if not parts.hostname:
        raise UsageError(f"not a valid URL: {url!r} has no host", where=where, remedy=remedy)
    if port == 0:
        raise UsageError(f"not a valid URL: {url!r} has port 0", where=where, remedy=remedy)
    return url.strip()


def emit(result: Any, as_json: bool, render_text: Callable[[Any], str]) -> None:
    """Print a command's typed result as JSON or through its text renderer."""
    if as_json:
        click.echo(json.dumps(to_jsonable(result), indent=2, sort_keys=False))
    else:
        click.echo(render_text(result))


def warn(finding: Finding) -> None:
    """Print a finding to stderr (warnings are values; the run stores them too)."""
    tag = {"error": "error", "warning": "warning", "info": "note"}[finding.severity]
    click.echo(f"{tag}: {finding.one_line()}", err=True)


def stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def parse_labels(labels: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in labels:
        if "=" not in item:
            raise UsageError(f"label {item!r} is not key=value", where="--label",
                             remedy="Write labels as --label key=value")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def load_options(f: Any, *, sweep: bool = False) -> Any:
    """Load shape and prompt source options (caliber elements), shared by `probe` and `sweep`.
    Names follow vllm bench serve / AIPerf / guidellm where they agree (docs/peers.md)."""
    rate = [] if sweep else [
        click.option("--request-rate", "request_rate", type=click.FloatRange(min=0, min_open=True), default=None,
                     metavar="R", help="Open loop: R requests/s with Poisson arrivals (with --burstiness: gamma). "
                     "A trial is one load period. Default: closed loop."),
    ]
    opts = [*rate,
        click.option("--burstiness", type=click.FloatRange(min=0, min_open=True), default=None, metavar="G",
                     help="Gamma shape of the arrival gaps with --request-rate (vLLM's): 1 = Poisson, < 1 burstier."),
        click.option("--num-requests", "num_requests", type=click.IntRange(1, 100_000), default=None, metavar="N",
                     help=f"Requests per trial (one load period; default with --request-rate: {DEFAULT_RATE_REQUESTS})."),
        click.option("--duration", "duration_s", type=click.FloatRange(min=0, min_open=True, max=86400), default=None,
                     metavar="SECONDS", help="Seconds of sending per trial (one load period); in-flight requests finish."),
        click.option("--dataset", "dataset", type=click.Path(dir_okay=False), default=None, metavar="FILE",
                     help="Prompts from FILE: JSONL of {\"prompt\"} or {\"messages\"}, or ShareGPT JSON; hashed "
                     "into the caliber, sampled in a fixed order."),
    ]
    if not sweep:
        opts.insert(0, click.option(
            "--concurrency", type=click.IntRange(1, MAX_CONCURRENCY), default=None, metavar="N",
            help="Requests in flight (closed loop), or at most in flight with --request-rate "
                 "(vLLM's --max-concurrency). Default: the caliber's."))
    for o in reversed(opts):
        f = o(f)
    return f


def probe_options(f: Any) -> Any:
    """The probe options `check` and `sweep` share with `probe`."""
    opts = [
        click.option("--trials", default=3, show_default=True, type=click.IntRange(1, 1000), help="Repeats (the unit of statistics)."),
        click.option("--label", "labels", multiple=True, help="key=value label stored with each run (repeatable)."),
        click.option("--model", default=None, help="Model name (default: the first one the server lists)."),
        click.option("--api-key-env", default=None, metavar="VAR", help="Name of the environment variable holding the API key."),
        click.option("--proxy", default=None, help="Send requests through this proxy."),
        click.option("--log", "log_path", type=click.Path(dir_okay=False), default=None, help="Engine log file to tail during the probes."),
        click.option("--scrape-interval", default=1.0, show_default=True, type=click.FloatRange(0.05, 60), help="Prometheus scrape interval, seconds."),
        click.option("--no-scrape", is_flag=True, help="Do not scrape /metrics."),
        click.option("--no-fingerprint", is_flag=True, help="Do not collect the stack fingerprint."),
    ]
    for o in reversed(opts):
        f = o(f)
    return limit_options(f)  # --timeout / --deadline, applied around the whole command


def make_options(trials: int, labels: tuple[str, ...], model: str | None, api_key_env: str | None,
                 proxy: str | None, log_path: str | None, scrape_interval: float,
                 no_scrape: bool, no_fingerprint: bool) -> ProbeOptions:
    """The ProbeOptions of `check` and `sweep` from their probe options."""
    from decodescope.run.probe_side import ProbeOptions, read_api_key

    return ProbeOptions(trials=trials, labels=parse_labels(labels), model=model,
                        api_key=read_api_key(api_key_env), proxy=proxy, log_path=log_path,
                        scrape=not no_scrape, scrape_interval_s=scrape_interval,
                        fingerprint=not no_fingerprint)


class StepPrinter:
    """Install progress on stderr: one line per step, build percent in 10% steps (or a bar)."""

    def __init__(self) -> None:
        self._last_step: str | None = None
        self._last_decile = -1
        self._bar: Any = None
        self._task: Any = None
        self._tty = sys.stderr.isatty()

    def __call__(self, ev: InstallStep) -> None:
        if ev.step == "build" and ev.percent is not None:
            self._build_progress(ev)
            return
        self._close_bar()
        click.echo(f"[{ev.elapsed_s:6.1f}s] {ev.step}: {ev.detail}", err=True)
        self._last_step = ev.step

    def _build_progress(self, ev: InstallStep) -> None:
        pct = ev.percent or 0.0
        if self._tty:
            if self._bar is None:
                from rich.console import Console
                from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

                from decodescope.console import raw_stream

                self._bar = Progress(  # drawn with control sequences: past the output pass
                    TextColumn("build llama-server"), BarColumn(),
                    TextColumn("{task.percentage:>3.0f}%"), TimeElapsedColumn(), transient=True,
                    console=Console(file=raw_stream(err=False)),
                )  # fmt: skip
                self._bar.start()
                self._task = self._bar.add_task("build", total=100)
            self._bar.update(self._task, completed=pct)
            return
        decile = int(pct // 10)
        if decile != self._last_decile:
            self._last_decile = decile
            click.echo(f"[{ev.elapsed_s:6.1f}s] build: {pct:.0f}%", err=True)

    def _close_bar(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def close(self) -> None:
        self._close_bar()
