"""What every CLI command shares: --json output, store option, error rendering, and the one
redaction pass over everything printed.

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
from decodescope.redact import redact_output, redact_text, register_url_secrets

json_option = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
store_option = click.option(
    "--store",
    "store_path",
    type=click.Path(dir_okay=False),
    envvar="DECODESCOPE_STORE",
    default=None,
    help="Run store (SQLite file). Default: the platform data directory; env DECODESCOPE_STORE.",
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
    traceback. Everything printed passes through the redaction pass (`redacted_output`)."""
    from decodescope.errors import DecodescopeError
    from decodescope.exitcodes import ExitCode

    args = list(sys.argv[1:] if argv is None else argv)
    register_url_secrets(" ".join(args))  # a password in a URL is redacted wherever it turns up
    with redacted_output():
        try:
            rv = command.main(args=args, prog_name=prog_name, standalone_mode=False)
        except DecodescopeError as exc:
            _traceback(debug)
            click.echo(f"error: {redact_text(exc.one_line())}", err=True)
            return int(exc.exit_code)
        except (click.exceptions.Abort, KeyboardInterrupt):
            click.echo("interrupted", err=True)
            return int(ExitCode.INTERRUPTED)
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
    """A text stream that passes every string written through the output redaction pass
    (registered secrets such as the API key or a URL's password, URL userinfo, auth values, key
    formats) before the terminal or a pipe sees it. Everything else is the wrapped stream's."""

    def __init__(self, inner: TextIO) -> None:
        self._inner = inner

    def write(self, text: Any) -> int:
        if isinstance(text, str):
            text = redact_output(text)
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


def stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
