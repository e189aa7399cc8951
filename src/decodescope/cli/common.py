"""What every CLI command shares: --json output, store option, error rendering.

Commands are thin: parse options, call the library, hand a typed result to `emit`.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from typing import Any

import click

from decodescope.findings import Finding

json_option = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
store_option = click.option(
    "--store",
    "store_path",
    type=click.Path(dir_okay=False),
    envvar="DECODESCOPE_STORE",
    default=None,
    help="Run store (SQLite file). Default: the platform data directory; env DECODESCOPE_STORE.",
)


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


def run_click(command: click.Command, argv: list[str] | None, prog_name: str, *,
              debug: bool = False) -> int:
    """Run a click command; DecodescopeError becomes one stderr line and its exit code (a
    traceback only with debug). A command's int return value is the exit code."""
    from decodescope.errors import DecodescopeError
    from decodescope.exitcodes import ExitCode

    try:
        rv = command.main(args=argv, prog_name=prog_name, standalone_mode=False)
    except DecodescopeError as exc:
        if debug:
            raise
        click.echo(f"error: {exc.one_line()}", err=True)
        return int(exc.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("interrupted", err=True)
        return int(ExitCode.INTERRUPTED)
    except click.ClickException as exc:
        exc.show()
        return int(ExitCode.USAGE)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    return int(rv) if isinstance(rv, int) else 0


def stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
