"""`decodescope fingerprint URL`: show the stack fingerprint (what a run would store)."""

from __future__ import annotations

import click

from decodescope.cli.common import emit
from decodescope.console import json_option
from decodescope.fingerprint.collect import collect_fingerprint
from decodescope.fingerprint.render import render_fingerprint


@click.command("fingerprint")
@click.argument("url")
@click.option("--model", "model", default=None, help="Served model name to pick the card of.")
@click.option("--log", "log_path", type=click.Path(dir_okay=False), default=None,
              help="Engine log file: backend-selection lines since its last start.")
@click.option("--watch-repo", "watch_repos", multiple=True, type=click.Path(file_okay=False),
              help="A repository to check: git HEAD, and whether the engine loads code from it. "
                   "Repeatable.")
@click.option("--timeout", "timeout_s", type=float, default=3.0, show_default=True,
              help="Seconds per HTTP request to the endpoint.")
@json_option
def command(url: str, model: str | None, log_path: str | None, watch_repos: tuple[str, ...],
            timeout_s: float, as_json: bool) -> int:
    """Show the stack fingerprint of the server at URL.

    Engine kind and version, served model, the local server process (cmdline, start time,
    selected environment), engine package version and file times, backend-selection log
    lines, watched repos, GPU state (NVML) and host. Every item says whether it was
    collected or why not. Secrets are redacted. Always exits 0: an unreachable endpoint is
    reported as unavailable items.
    """
    fp = collect_fingerprint(url, model=model, log_path=log_path, watch_repos=watch_repos,
                             timeout_s=timeout_s)
    emit(fp, as_json, render_fingerprint)
    return 0
