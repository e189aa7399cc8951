"""`decodescope check NAME URL`: probe a baseline's anchor caliber and judge it against the
anchor's stored runs (verdict/anchor.py).

For cron / CI: exit 0 no change (or an improvement, reported), 1 the judge's REGRESSION (or a
value under the user's floor), 3 when the probe is not comparable or the judge cannot decide
(foreign load, other caliber, no decode rate, noise).
"""

from __future__ import annotations

import click

from decodescope.caliber.spec import Caliber
from decodescope.cli.common import check_url, emit, make_options, probe_options, store_option, warn
from decodescope.console import json_option
from decodescope.exitcodes import ExitCode
from decodescope.records.evidence import render_rows
from decodescope.run.probe_side import ProbeOptions, probe_side
from decodescope.store.connect import open_store
from decodescope.store.db import Store
from decodescope.verdict.anchor import CheckResult, check_against, judge_anchor
from decodescope.verdict.baseline import anchor_caliber, get_baseline
from decodescope.verdict.side import Side


def announced_probe_side(store: Store, url: str, cal: Caliber, opts: ProbeOptions, *,
                         quiet: bool) -> tuple[Side, bool]:
    """`run.probe_side.probe_side`, saying on stderr what it probes and what it found unless
    quiet (--json)."""
    if quiet:
        return probe_side(store, url, cal, opts)
    return probe_side(store, url, cal, opts, announce=lambda line: click.echo(line, err=True),
                          warn=warn)


@click.command("check")
@click.argument("name")
@click.argument("url")
@probe_options
@store_option
@json_option
def command(name: str, url: str, trials: int, labels: tuple[str, ...], model: str | None,
            api_key_env: str | None, proxy: str | None, log_path: str | None,
            scrape_interval: float, no_scrape: bool, no_fingerprint: bool,
            store_path: str | None, as_json: bool) -> int:
    """Probe URL at baseline NAME's anchor caliber and judge it against the anchor's runs.

    The alarm is the judge's REGRESSION against the baseline's stored runs, under the
    run-to-run spread of the anchor's stack (learned, or the prior: said). Exit codes: 0 no
    change, or an improvement (ABOVE_BAND: reported, re-baseline if intended); 1 a regression
    beyond noise (BELOW_BAND / BELOW_FLOOR) or a value under the user's --floor; 3 not
    comparable or undecided (foreign load, other caliber, no decode rate, noise); 6 the probe
    missed its caliber.
    """
    url = check_url(url)  # bad input (exit 2) before the store is opened or a probe sent
    opts = make_options(trials, labels, model, api_key_env, proxy, log_path, scrape_interval,
                        no_scrape, no_fingerprint)
    opts.labels.setdefault("check", name)
    with open_store(store_path) as store:
        base = get_baseline(store, name)
        assert base is not None
        cal = anchor_caliber(base)
        side, missed = announced_probe_side(store, url, cal, opts, quiet=as_json)
        judged = judge_anchor(store, base, side)
    result = check_against(base, side, judged=judged)
    emit(result, as_json, render_check)
    if missed:  # the realized run is not the anchor's caliber: its number proves nothing
        click.echo("the probe missed its caliber (see the warnings): exit 6, whatever the band says",
                   err=True)
        return int(ExitCode.CALIBER_MISSED)
    return result.exit_code


def render_check(r: CheckResult) -> str:
    runs = ", ".join(map(str, r.side.run_ids))
    tag = f"exit {r.exit_code}"
    lines = [f"{r.headline}   {tag}",
             f"baseline {r.baseline.name}: {r.baseline.caliber_ref}, {r.baseline.band_text()}; "
             f"run {runs}" + (" [SIMULATED]" if r.side.simulated else ""),
             "", "Evidence", render_rows(list(r.evidence))]
    if r.notes:
        lines += ["", "Notes", *(f"  {n}" for n in r.notes)]
    return "\n".join(lines)
