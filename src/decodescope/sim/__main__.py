"""`python -m decodescope.sim [OPTIONS]`: `decodescope sim` without loading the whole CLI
(starts faster as a subprocess in tests and benchmarks). Same options, output, exit codes."""

from __future__ import annotations

import sys

from decodescope.console import run_click
from decodescope.sim.command import command


def main(argv: list[str] | None = None) -> int:
    return run_click(command, argv, "python -m decodescope.sim")


if __name__ == "__main__":
    sys.exit(main())
