"""`python -m decodescope.sim [OPTIONS]`: `decodescope sim` without loading the whole CLI
(starts faster as a subprocess in tests and benchmarks). Same options, output, exit codes."""

from __future__ import annotations

import sys

import click

from decodescope.cli.sim import command
from decodescope.errors import DecodescopeError
from decodescope.exitcodes import ExitCode


def main(argv: list[str] | None = None) -> int:
    try:
        rv = command.main(args=argv, prog_name="python -m decodescope.sim", standalone_mode=False)
    except DecodescopeError as exc:
        click.echo(f"error: {exc.one_line()}", err=True)
        return int(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        return int(ExitCode.USAGE)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    return int(rv) if isinstance(rv, int) else 0


if __name__ == "__main__":
    sys.exit(main())
