"""`decodescope sweep URL --calibers A,B,...`: the caliber matrix of one server."""

from __future__ import annotations

import click

from decodescope.caliber.load import resolve
from decodescope.cli.check import make_options, probe_options, probe_side
from decodescope.cli.common import emit, json_option, store_option
from decodescope.errors import UsageError
from decodescope.store.db import Store
from decodescope.verdict.bands import DEFAULT_BANDS, load_bands
from decodescope.verdict.matrix import caliber_matrix, render_matrix


@click.command("sweep")
@click.argument("url")
@click.option("--calibers", "caliber_list", required=True, metavar="A,B,...",
              help="Calibers to probe, comma-separated (names, name@version, or .toml files).")
@probe_options
@click.option("--bands", "bands_path", type=click.Path(dir_okay=False), default=None,
              help="TOML file of MAL bands by content class (default: the seed's).")
@click.option("--format", "fmt", type=click.Choice(["text", "md"]), default="text",
              show_default=True, help="Text, or Markdown (the seed's 'numbers side by side').")
@store_option
@json_option
def command(url: str, caliber_list: str, trials: int, labels: tuple[str, ...], model: str | None,
            api_key_env: str | None, proxy: str | None, log_path: str | None,
            scrape_interval: float, no_scrape: bool, no_fingerprint: bool, bands_path: str | None, fmt: str, store_path: str | None,
            as_json: bool) -> int:
    """Probe several calibers on one server; print decode rate, MAL and step rate per caliber
    and how much the headline number moves with the caliber alone."""
    names = [n.strip() for n in caliber_list.split(",") if n.strip()]
    if len(names) < 2:
        raise UsageError("a sweep needs at least two calibers", where="--calibers",
                         remedy="e.g. --calibers demo-code-rewrite,demo-varied-prose")
    cals = [resolve(n) for n in names]  # every name is checked before the first probe
    bands = load_bands(bands_path) if bands_path else DEFAULT_BANDS
    opts = make_options(trials, labels, model, api_key_env, proxy, log_path, scrape_interval,
                        no_scrape, no_fingerprint)
    opts.labels.setdefault("sweep", ",".join(c.ref for c in cals))
    sides = []
    with Store.open(store_path) as store:
        for cal in cals:
            side, _missed = probe_side(store, url, cal, opts, quiet=as_json)
            sides.append(side)
    matrix = caliber_matrix(sides, bands)
    if fmt == "md":
        from decodescope.report.markdown import numbers_side_by_side

        sim = " [SIMULATED]" if matrix.simulated else ""
        click.echo(matrix.summary + sim + "\n\n" + numbers_side_by_side(sides, bands))
    else:
        emit(matrix, as_json, render_matrix)
    return 0
