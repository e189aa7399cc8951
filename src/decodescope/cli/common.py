"""What every CLI command shares: the store option, --timeout / --deadline, the URL check,
JSON or text output of a typed result, and warnings on stderr.

Commands are thin: parse options, call the library, hand a typed result to `emit`. The one
place that turns exceptions into exit codes, and the redaction pass over everything printed,
live one layer down in `decodescope.console` (docs/faults.md has the table).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import sys
from collections.abc import Callable
from typing import Any

import click

from decodescope.records.findings import Finding

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

    from decodescope.errors import UsageError

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


def to_jsonable(obj: Any) -> Any:
    if hasattr(obj, "to_dict"):
        return to_jsonable(obj.to_dict())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return to_jsonable(dataclasses.asdict(obj))
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):  # NaN and infinities are not JSON
        return None
    return obj


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
