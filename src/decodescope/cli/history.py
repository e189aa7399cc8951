"""`decodescope history SELECTOR`: when did the decode rate change, and what changed with it."""

from __future__ import annotations

import json
from pathlib import Path

import click

from decodescope.cli.common import store_option
from decodescope.errors import UsageError
from decodescope.store.connect import open_store
from decodescope.verdict.history_store import FleetResult, HistoryResult, fleet, history


@click.command("history")
@click.argument("selector")
@click.option("--control", default=None, metavar="SELECTOR",
              help="The reference series (a label or endpoint at the same caliber): a change it "
                   "shows at the same time is the environment.")
@click.option("--caliber", "caliber_name", default=None,
              help="Only runs of this caliber (needed when the selection holds several).")
@click.option("--since", default=None, help="First time (ISO date/time, UTC, or epoch s).")
@click.option("--until", default=None, help="Last time (ISO date/time, UTC, or epoch s).")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "html"]), default="text",
              show_default=True)
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False), default=None,
              help="Write to this file instead of standard output.")
@click.option("--fingerprints", default=None, metavar="SELECTOR",
              help="For a Prometheus range: stored runs (a label or endpoint URL) of the same "
                   "endpoint whose fingerprints say what changed across each change.")
@store_option
def command(selector: str, control: str | None, caliber_name: str | None, since: str | None,
            until: str | None, fmt: str, output: str | None, fingerprints: str | None,
            store_path: str | None) -> int:
    """The change points in the decode rate of SELECTOR's stored runs (a label key=value such
    as check=gpu-a or host=NAME, or an endpoint URL; LABEL=* for every value of a label, with a
    note when most of them moved at once) or of a Prometheus range
    (prom+http://HOST:9090/?job=vllm@A..B, one point per query step):
    when, the levels before and after, the component that carries each, the stack
    fingerprint's diff across it, and REGRESSION / IMPROVEMENT of the stack, content or
    caliber shift, or ENVIRONMENT. Exit 0: no change or no regression; 1: a stack REGRESSION
    in the range; 3: too few runs to tell; 2: bad input."""
    from decodescope.report import history as render

    result: HistoryResult | FleetResult
    if selector.strip().startswith(("prom+", "prom:")) and not fingerprints:  # no store
        result = history(None, selector, control=control, caliber=caliber_name, since=since,
                         until=until)
    else:
        with open_store(store_path, read_only=True) as store:
            result = (fleet(store, selector, control=control, caliber=caliber_name,
                            since=since, until=until)
                      if selector.strip().endswith("=*") else
                      history(store, selector, control=control, caliber=caliber_name,
                              since=since, until=until, fingerprints=fingerprints))
    doc = (json.dumps(result.to_dict(), indent=2) if fmt == "json"
           else render.html(result) if fmt == "html" else render.text(result))
    if output:
        try:
            Path(output).write_text(doc + "\n", encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write {output}: {exc.strerror}", where=output,
                             remedy="Choose a writable path for -o") from None
        click.echo(f"wrote {output}", err=True)
    else:
        click.echo(doc)
    return result.exit_code
