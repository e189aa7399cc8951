"""`decodescope spread URL --caliber C`: measure this stack's run-to-run spread on purpose.

N short runs of one caliber against one unchanged server, with a wait between them (or a
restart of the server by you between them: the launch command, not its port, defines the
stack). Runs of a trend — a warm-up after the server's start, a slide — are left out of the
spread and said (verdict/run_spread.without_trends). Every run is stored like any probe, with its fingerprint; triage learns the spread
from all stored runs of that caliber on that stack (verdict/run_spread.py), so the result of
this command is kept in the store, not in a setting.
"""

from __future__ import annotations

import time
from typing import Any

import click

from decodescope.caliber.resolve import resolve
from decodescope.cli.common import (
    check_url,
    client_options,
    limit_options,
    parse_labels,
    store_option,
)
from decodescope.console import json_option
from decodescope.errors import UsageError
from decodescope.run.probe_side import probe_once, read_api_key
from decodescope.run.runner import ProbeSettings
from decodescope.store import runs as sr
from decodescope.store.connect import open_store
from decodescope.verdict import run_spread as rs
from decodescope.verdict import thresholds as th
from decodescope.verdict.stack import stack_key


@click.command("spread")
@click.argument("url")
@click.option("--caliber", "caliber_name", required=True,
              help="Built-in name, name@version, or a .toml file.")
@click.option("--runs", default=th.MIN_SPREAD_RUNS + 1, show_default=True,
              type=click.IntRange(1, 1000), help="Runs to add (each one a stored probe).")
@click.option("--trials", default=3, show_default=True, type=click.IntRange(2, 1000),
              help="Trials per run.")
@click.option("--wait", "wait_s", default=5.0, show_default=True,
              type=click.FloatRange(0, 86400), metavar="SECONDS",
              help="Pause between runs, so they sample the machine's state at different times.")
@click.option("--model", default=None, help="Model name (default: the first one served).")
@client_options("every run", "before each run's trials")
@limit_options
@store_option
@json_option
def command(url: str, caliber_name: str, runs: int, trials: int, wait_s: float,
            model: str | None, api_key_env: str | None, proxy: str | None, warmup: int,
            labels: tuple[str, ...], store_path: str | None, as_json: bool) -> int:
    """Add RUNS runs of a caliber on the server at URL to the store and print the learned
    run-to-run spread of its stack (with its 95 % interval and the runs behind it)."""
    cal = resolve(caliber_name)
    session = time.strftime("%Y%m%dT%H%M%S")
    settings = ProbeSettings(url=check_url(url), caliber=cal, trials=trials,
                             labels={**parse_labels(labels), "spread": session}, model=model,
                             api_key=read_api_key(api_key_env), proxy=proxy, warmup=warmup)

    def stack_known(fp: dict[str, Any] | None) -> None:
        if fp is None or stack_key(fp) is None:
            raise UsageError("the server's stack cannot be fingerprinted (host, engine "
                             "version or launch command): runs of it cannot be told "
                             "from another stack's", where=url,
                             remedy="Probe a server whose fingerprint has an engine "
                                    "version or a local process (`decodescope "
                                    "fingerprint URL` shows what is collected)")

    store = open_store(store_path)
    try:
        ids: list[int] = []
        for r in range(runs):
            if r and wait_s:
                time.sleep(wait_s)
            out = probe_once(store, settings, check_fingerprint=stack_known)
            ids.append(out.run_id)
            if not as_json:
                click.echo(f"run {r + 1}/{runs}: stored as run {out.run_id} ({out.status})",
                           err=True)
        last = sr.get_run(store, ids[-1], with_traces=False)
        everything = sr.list_runs(store, caliber=cal.identity, limit=100_000)
        learned = rs.learn(everything, last)
        session_only = rs.estimate([r for r in everything if r.id in ids],
                                   stack=learned.stack)
    finally:
        store.close()
    doc = {"runs": ids, "session": session, "spread": learned.to_dict(),
           "this_session": session_only.to_dict()}
    if as_json:
        import json

        click.echo(json.dumps(doc, indent=2))
    else:
        click.echo(learned.text()[0].upper() + learned.text()[1:] + ".")
        for spread_ in (learned, session_only):
            if spread_.left_out and (spread_ is learned or spread_.trends != learned.trends):
                click.echo(f"Trend detected: {'; '.join(spread_.trends)} — {spread_.left_out} "
                           f"run{'s' if spread_.left_out != 1 else ''} discarded from the "
                           "spread (a warm-up or a slide is the server's state, not spread).")
        if learned.runs != session_only.runs:
            click.echo(f"These {len(ids)} runs alone: {session_only.text()}.")
        click.echo(f"Stored runs {', '.join(map(str, ids))} (label spread={session}); "
                   "triage of runs of this stack uses it from now on.")
    return 0
