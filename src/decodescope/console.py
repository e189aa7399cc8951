"""The console side of every command: the one place exceptions become exit codes
(`run_click`), and the one pass over everything printed (redaction, and terminal control
characters removed). At the bottom layer, with `errors` and `redact`, so the CLI and the
simulator's own entry point (`python -m decodescope.sim`) share it (docs/faults.md has the
table of codes).
"""

from __future__ import annotations

import contextlib
import sqlite3
import sys
import traceback
from collections.abc import Iterator
from typing import Any, TextIO

import click

from decodescope.redact import redact_output, redact_text, register_url_secrets, strip_controls

json_option = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")


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
    for arg in args:  # a URL's password is redacted wherever it turns up, in every form a
        register_url_secrets(arg, whole=True)  # library sends or quotes it (one argument: spaces too)
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
    from decodescope.errors import store_error

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
