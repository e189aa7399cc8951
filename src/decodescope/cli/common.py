"""What every CLI command shares: --json output, store option, error rendering, and the one
pass over everything printed (redaction, and terminal control characters removed).

Commands are thin: parse options, call the library, hand a typed result to `emit`. `run_click`
is the only place that turns exceptions into exit codes (docs/faults.md has the table).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import sqlite3
import sys
import traceback
from collections.abc import Callable, Iterator
from typing import Any, TextIO

import click

from decodescope.findings import Finding
from decodescope.redact import redact_output, redact_text, register_url_secrets, strip_controls

json_option = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
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
    if isinstance(obj, float) and obj != obj:  # NaN is not JSON
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


INTERNAL_HINT = "run with --debug for the traceback"
MAX_INTERNAL_LINE = 300  # characters of an unexpected exception's text shown on its one line


def run_click(command: click.Command, argv: list[str] | None, prog_name: str, *,
              debug: bool = False) -> int:
    """Run a click command and return its exit code; the one place exceptions become codes.

    DecodescopeError -> one stderr line and its class's code; an SQLite failure -> 2 with the
    cause; too many open files -> 2; a missing or unwritable file -> 2; anything else is a bug:
    one line and 70 (ExitCode.INTERNAL), never 1, which means REGRESSION. --debug adds the
    traceback. Ctrl-C -> 130; SIGTERM is handled like Ctrl-C (`signals.sigterm_as_interrupt`:
    completed trials kept, the run marked interrupted) -> 143. Everything printed passes through
    the redaction pass and loses terminal control sequences (`redacted_output`)."""
    from decodescope.signals import sigterm_as_interrupt

    args = list(sys.argv[1:] if argv is None else argv)
    register_url_secrets(" ".join(args))  # a password in a URL is redacted wherever it turns up
    with redacted_output():
        try:
            with sigterm_as_interrupt():
                return _dispatch(command, args, prog_name, debug)
        except KeyboardInterrupt as exc:  # a signal while an error line was being printed
            return _interrupted(exc)


def _interrupted(exc: BaseException) -> int:
    from decodescope.exitcodes import ExitCode
    from decodescope.signals import stop_signal

    if stop_signal(exc) == "SIGTERM":
        click.echo("terminated (SIGTERM)", err=True)
        return int(ExitCode.TERMINATED)
    click.echo("interrupted", err=True)
    return int(ExitCode.INTERRUPTED)


def _dispatch(command: click.Command, args: list[str], prog_name: str, debug: bool) -> int:
    """The body of run_click, under the output pass and SIGTERM handling."""
    from decodescope.errors import DecodescopeError
    from decodescope.exitcodes import ExitCode

    try:
        rv = command.main(args=args, prog_name=prog_name, standalone_mode=False)
    except DecodescopeError as exc:
        _traceback(debug)
        click.echo(f"error: {redact_text(exc.one_line())}", err=True)
        return int(exc.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt) as exc:
        return _interrupted(exc)
    except click.ClickException as exc:
        exc.show()
        return int(ExitCode.USAGE)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except (sqlite3.OperationalError, sqlite3.DataError) as exc:
        _traceback(debug)
        click.echo(f"error: {_store_line(exc)}", err=True)
        return int(ExitCode.USAGE)
    except OSError as exc:
        _traceback(debug)
        line = _os_error_line(exc)
        if line is None:
            return _internal(exc, debug)
        click.echo(f"error: {line}", err=True)
        return int(ExitCode.USAGE)
    except Exception as exc:  # a bug: say so on one line, never exit 1 (REGRESSION)
        if isinstance(exc, sqlite3.DatabaseError) and not isinstance(
                exc, (sqlite3.ProgrammingError, sqlite3.IntegrityError, sqlite3.InterfaceError)):
            _traceback(debug)
            click.echo(f"error: {_store_line(exc)}", err=True)
            return int(ExitCode.USAGE)
        return _internal(exc, debug)
    return int(rv) if isinstance(rv, int) else 0


def _store_line(exc: sqlite3.Error) -> str:
    from decodescope.store.db import store_error

    return store_error(exc, "the run store").one_line()


def _internal(exc: BaseException, debug: bool) -> int:
    from decodescope.exitcodes import ExitCode

    _traceback(debug)
    text = " ".join(str(exc).split())
    if len(text) > MAX_INTERNAL_LINE:
        text = text[:MAX_INTERNAL_LINE] + "..."
    what = f"{type(exc).__name__}: {redact_text(text)}" if text else type(exc).__name__
    hint = "the traceback is above" if debug else INTERNAL_HINT
    click.echo(f"internal error: {what}. This is a bug in decodescope; {hint} "
               f"(exit {int(ExitCode.INTERNAL)})", err=True)
    return int(ExitCode.INTERNAL)


def _os_error_line(exc: OSError) -> str | None:
    """The one line for an OSError a user can act on (open files, a path), else None."""
    import errno

    if exc.errno in (errno.EMFILE, errno.ENFILE):
        return ("too many open files (the process's open-file limit). Lower the caliber's "
                "concurrency, or raise the limit with `ulimit -n`, and rerun.")
    if exc.filename is not None:
        return (f"cannot use {exc.filename}: {exc.strerror or exc}. Check the path and its "
                "permissions.")
    return None


def _traceback(debug: bool) -> None:
    if debug:
        traceback.print_exc(file=sys.stderr)


class RedactingStream:
    """A text stream that removes terminal control from every string written (ESC sequences,
    C0 / C1 characters but newline and tab: a model id or error body a server sent must not
    recolour, retitle or clear the terminal), then passes it through the output redaction pass
    (registered secrets such as the API key or a URL's password, URL userinfo, auth values, key
    formats), before the terminal or a pipe sees it. Everything else is the wrapped stream's.
    Output decodescope draws itself with control sequences (a progress bar) writes to
    `raw_stream()` instead."""

    def __init__(self, inner: TextIO) -> None:
        self._inner = inner

    @property
    def raw(self) -> TextIO:
        return self._inner

    def write(self, text: Any) -> int:
        if isinstance(text, str):
            # controls first: a secret split by an escape sequence is whole again, and caught
            text = redact_output(strip_controls(text))
        return self._inner.write(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@contextlib.contextmanager
def redacted_output() -> Iterator[None]:
    """sys.stdout and sys.stderr pass through the redaction pass inside this block."""
    out, err = sys.stdout, sys.stderr
    sys.stdout = RedactingStream(out)
    sys.stderr = RedactingStream(err)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err


def raw_stream(err: bool = True) -> TextIO:
    """The terminal stream under the output pass, for what decodescope draws itself with control
    sequences (rich progress bars: their text is decodescope's, never a server's)."""
    stream = sys.stderr if err else sys.stdout
    return stream.raw if isinstance(stream, RedactingStream) else stream


def stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
