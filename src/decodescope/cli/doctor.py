"""`decodescope doctor [URL]`: what in this environment would spoil a measurement."""

from __future__ import annotations

import click

from decodescope.cli.common import emit
from decodescope.console import json_option
from decodescope.doctor.diagnose import render_doctor, run_doctor


@click.command("doctor")
@click.argument("url", required=False)
@click.option("--model", "model", default=None, help="Model name the probe will ask for.")
@click.option("--log", "log_path", type=click.Path(dir_okay=False), default=None,
              help="Engine log file to check (exists, readable, known format).")
@click.option("--timeout", "timeout_s", type=float, default=3.0, show_default=True,
              help="Seconds per HTTP request to the endpoint.")
@json_option
def command(url: str | None, model: str | None, log_path: str | None, timeout_s: float,
            as_json: bool) -> int:
    """Check proxies, endpoint, metrics, engine log and timers before measuring.

    Explains which of httpx, requests and curl would send URL through a proxy given
    http_proxy / https_proxy / all_proxy / no_proxy (httpx ignores CIDR entries in no_proxy,
    curl and requests honour them; a socks5 all_proxy breaks httpx without socksio). Without
    URL the proxy analysis uses http://127.0.0.1:8000.

    Exit 0: clean; 1: warnings; 2: errors.
    """
    report = run_doctor(url, model=model, log_path=log_path, timeout_s=timeout_s)
    emit(report, as_json, render_doctor)
    return report.exit_code
