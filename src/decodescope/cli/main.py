"""The `decodescope` command: a thin shell over the library.

Each subcommand lives in its own module and exposes `command` (a click command or group).
Errors from the library (DecodescopeError) become one line on stderr and the documented exit
code; a traceback only with --debug.
"""

from __future__ import annotations

import importlib
import sys

import click

from decodescope import __version__
from decodescope.console import run_click

# Module name under decodescope.cli -> exposes `command`.
SUBCOMMANDS = [
    "calibers",
    "probe",
    "runs",
    "sim",
    "logs",
    "prom",
    "import",
    "engine",
    "demo",
    "triage",
    "baseline",
    "check",
    "sweep",
    "report",
    "doctor",
    "exporter",
    "fingerprint",
    "store",
    "ab",
    "spread",
    "history",
]


# Subcommands whose click command lives in their own package (the simulator runs without the
# CLI: `python -m decodescope.sim`); every other one is decodescope.cli.<name>.
SUBCOMMAND_MODULES = {"sim": "decodescope.sim.command", "import": "decodescope.cli.import_"}


class LazyGroup(click.Group):
    """Imports a subcommand's module only when that command runs (start-up stays fast)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in SUBCOMMANDS:
            return None
        mod = importlib.import_module(SUBCOMMAND_MODULES.get(cmd_name, f"decodescope.cli.{cmd_name}"))
        cmd: click.Command = mod.command
        return cmd


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="decodescope")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Is decode throughput really down, or was it measured at another caliber?

    Probes OpenAI-compatible servers (vLLM, SGLang, llama.cpp) under declared, hashed
    calibers, reads the engine's own numbers, splits decode rate into step rate x MAL, stores
    every run and gives a verdict with evidence.
    """
    ctx.obj = {"debug": debug}


def main(argv: list[str] | None = None) -> int:
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    # Commands that report a verdict return its exit code (an int); others return None.
    return run_click(cli, argv, "decodescope", debug=debug)


if __name__ == "__main__":
    sys.exit(main())
