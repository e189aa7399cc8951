"""`decodescope baseline set | list | show | rm`: named anchors (caliber + decode band / floor)."""

from __future__ import annotations

from datetime import datetime

import click

from decodescope.caliber.resolve import resolve
from decodescope.cli.common import emit, store_option
from decodescope.console import json_option
from decodescope.errors import UsageError
from decodescope.store.connect import open_store
from decodescope.verdict import run_spread as rs
from decodescope.verdict.baseline import (
    Baseline,
    delete_baseline,
    get_baseline,
    list_baselines,
    make_baseline,
    parse_band,
    save_baseline,
)
from decodescope.verdict.side_from_runs import side_from_runs
from decodescope.verdict.side_resolve import load_run


def parse_run_ids(text: str) -> list[int]:
    try:
        ids = [int(x.strip().lstrip("#")) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"bad run list {text!r}", where="--from-runs",
                         remedy="Give run ids separated by commas, e.g. --from-runs 12,13,14") from None
    if not ids:
        raise UsageError("empty run list", where="--from-runs", remedy="e.g. --from-runs 12,13,14")
    return ids


@click.group("baseline")
def command() -> None:
    """Named anchors: a caliber with a band (and floor) of decode rate, checked by `check`."""


@command.command("set")
@click.argument("name")
@click.option("--caliber", "caliber_name", required=True, help="The anchor caliber (name, name@version, or .toml).")
@click.option("--from-runs", "from_runs", default=None, metavar="IDS", help="Stored runs of this caliber (12,13,14): `check` judges against them; their values and the run-to-run spread of their stack give the band.")
@click.option("--band", "band_text", default=None, metavar="LO-HI", help="Decode-rate band, tok/s (e.g. 96-107). Default: derived from --from-runs.")
@click.option("--floor", type=click.FloatRange(min=0, min_open=True), default=None, help="Decode rate (tok/s) under which the stack is suspect, absolute: `check` alarms under it whatever the noise. Default: 6% under the band (derived: alarms only with the judge's REGRESSION).")
@store_option
@json_option
def set_cmd(name: str, caliber_name: str, from_runs: str | None, band_text: str | None,
            floor: float | None, store_path: str | None, as_json: bool) -> None:
    """Create or replace the baseline NAME."""
    cal = resolve(caliber_name)
    band = parse_band(band_text) if band_text else None
    with open_store(store_path) as store:
        runs = [load_run(store, i) for i in parse_run_ids(from_runs)] if from_runs else []
        spread = rs.for_side(store, side_from_runs(runs)) if runs else None
        b = make_baseline(name, cal, runs, band=band, floor=floor, spread=spread)
        save_baseline(store, b)
    emit(b, as_json, _render_set)


def _render_set(x: Baseline) -> str:
    text = (f"baseline {x.name} set: {x.caliber_ref} ({x.caliber_identity}), {x.band_text()}"
            + (f", from runs {', '.join(map(str, x.run_ids))}" if x.run_ids else ""))
    if x.spread_text():
        text += f"\n  {x.spread_text()}" + (
            " — the band carries it; `check` judges against the runs under it" if x.derived
            else "; `check` judges against the runs under it")
    return text


@command.command("list")
@store_option
@json_option
def list_cmd(store_path: str | None, as_json: bool) -> None:
    """List baselines."""
    with open_store(store_path, read_only=True) as store:
        items = list_baselines(store)
    emit(items, as_json, _render_list)


@command.command("show")
@click.argument("name")
@store_option
@json_option
def show_cmd(name: str, store_path: str | None, as_json: bool) -> None:
    """Show one baseline."""
    with open_store(store_path, read_only=True) as store:
        b = get_baseline(store, name)
    emit(b, as_json, _render_one)


@command.command("rm")
@click.argument("name")
@store_option
def rm_cmd(name: str, store_path: str | None) -> None:
    """Delete a baseline (its runs stay in the store)."""
    with open_store(store_path) as store:
        if not delete_baseline(store, name):
            get_baseline(store, name)  # raises the "no baseline" error
    click.echo(f"baseline {name} deleted")


def _render_list(items: list[Baseline]) -> str:
    if not items:
        return "no baselines (create one: decodescope baseline set NAME --caliber C --from-runs IDS)"
    w = max(len(b.name) for b in items) + 2
    return "\n".join(f"{b.name:<{w}}{b.caliber_ref:<26}{b.band_text()}" for b in items)


NO_SPREAD = "— (no runs: the band and floor are the user's, absolute)"


def _render_one(b: Baseline | None) -> str:
    assert b is not None
    lines = [
        f"baseline {b.name}",
        f"  caliber       {b.caliber_ref} ({b.caliber_identity}), "
        + ("content stored with the baseline" if b.caliber is not None
           else "name only (an older baseline: re-create it to store the caliber)"),
        f"  band / floor  {b.band_text()}" + ("  [derived from runs]" if b.derived else ""),
        f"  runs          {', '.join(map(str, b.run_ids)) or '—'}",
        f"  spread        {b.spread_text() or NO_SPREAD}",
        f"  created       {datetime.fromtimestamp(b.created_at):%Y-%m-%d %H:%M}",
    ]
    if b.values:
        lines.append(f"  trial values  {', '.join(f'{v:.1f}' for v in b.values)}")
    if b.length_decay_pct is not None:
        lines.append(f"  length decay  {b.length_decay_pct:+.1f}% per 1K output tokens")
    return "\n".join(lines)
