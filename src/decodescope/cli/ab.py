"""`decodescope ab URL_A URL_B --caliber C`: interleaved A/B of two live endpoints with a
sequential stop (run/ab.py, verdict/paired_test.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import click

from decodescope.caliber.resolve import resolve
from decodescope.cli.common import check_url, client_options, emit, limit_options, store_option
from decodescope.console import json_option
from decodescope.run.probe_side import read_api_key
from decodescope.run.runner import ProbeSettings
from decodescope.store.connect import open_store
from decodescope.verdict import thresholds as th
from decodescope.verdict.paired_test import Design, Look, ab_verdict, render_ab


@click.command("ab")
@click.argument("url_a")
@click.argument("url_b")
@click.option("--caliber", "caliber_name", required=True,
              help="Built-in name, name@version, or a .toml file (closed loop).")
@click.option("--min-effect", default=th.MIN_EFFECT * 100, show_default=True,
              type=click.FloatRange(0.1, 100), metavar="PCT",
              help="Smallest relative change (percent) that counts as a change.")
@click.option("--alpha", default=th.AB_ALPHA, show_default=True,
              type=click.FloatRange(1e-6, 0.25),
              help="False-alarm rate over all looks; the false 'no change' rate too.")
@click.option("--min-pairs", default=th.AB_MIN_PAIRS, show_default=True,
              type=click.IntRange(3, 10_000), help="First look; never decides on fewer pairs.")
@click.option("--max-pairs", default=th.AB_MAX_PAIRS, show_default=True,
              type=click.IntRange(3, 10_000), help="Last look: stop here whatever it says.")
@click.option("--looks", "n_looks", default=th.AB_LOOKS, show_default=True,
              type=click.IntRange(1, 100), help="Planned looks, geometrically spaced.")
@click.option("--spending", default=th.AB_SPENDING, show_default=True,
              type=click.Choice(["pocock", "obrien-fleming"]),
              help="Lan–DeMets alpha-spending function over the looks.")
@click.option("--model-a", default=None, help="Model on A (default: the first it lists).")
@click.option("--model-b", default=None, help="Model on B (default: the first it lists).")
@client_options("both runs", "per side before its first trial")
@click.option("--no-scrape", is_flag=True, help="Do not scrape /metrics.")
@click.option("--no-fingerprint", is_flag=True, help="Do not collect the stack fingerprints.")
@limit_options
@store_option
@json_option
def command(url_a: str, url_b: str, caliber_name: str, min_effect: float, alpha: float,
            min_pairs: int, max_pairs: int, n_looks: int, spending: str, model_a: str | None,
            model_b: str | None, api_key_env: str | None, proxy: str | None, warmup: int,
            labels: tuple[str, ...], no_scrape: bool, no_fingerprint: bool,
            store_path: str | None, as_json: bool) -> int:
    """Probe URL_A and URL_B alternately (A B, B A, …), one trial at a time, and stop when the
    paired interval decides: B slower or faster than A by at least --min-effect, or a change
    that large ruled out (its equivalence interval inside ±--min-effect); else stop at
    --max-pairs (INCONCLUSIVE with the pairs that would decide it). Sequential error control:
    Lan–DeMets alpha spending over the planned looks, for the change and the equivalence
    decision each (≤ --alpha whatever look stops it); the first look is after --min-pairs
    pairs. A pair whose trial saw foreign load, missed its caliber or stalled is named and
    re-taken (bounded); a cause that persists decides as in triage. When A and B are two
    server processes and the between-process spread of A's stack is in the store (`spread`
    runs over ≥ 3 fresh starts), both intervals carry it; when it is unknown the verdict says
    it speaks of these two processes.

    Exit codes as triage: 0 NO_CHANGE / IMPROVEMENT, 1 REGRESSION (B slower), 3 INCONCLUSIVE
    or CONTAMINATED.
    """
    from decodescope.cli.common import parse_labels
    from decodescope.errors import UsageError

    if max_pairs < min_pairs:
        raise UsageError("--max-pairs is below --min-pairs", where="ab",
                         remedy="Give --max-pairs ≥ --min-pairs")
    design = Design(alpha=alpha, min_pairs=min_pairs, max_pairs=max_pairs, n_looks=n_looks,
                    min_effect=min_effect / 100.0, spending=spending)
    cal = resolve(caliber_name)
    key = read_api_key(api_key_env)
    sa = ProbeSettings(url=check_url(url_a, "URL_A"), caliber=cal, trials=max_pairs,
                       model=model_a, api_key=key, proxy=proxy, warmup=warmup)
    sb = ProbeSettings(url=check_url(url_b, "URL_B"), caliber=cal, trials=max_pairs,
                       model=model_b, api_key=key, proxy=proxy, warmup=warmup)
    fps: tuple[dict[str, Any] | None, dict[str, Any] | None] = (None, None)
    if not no_fingerprint:
        from decodescope.run.setup import collect_fp

        fps = (collect_fp(sa, None, ()), collect_fp(sb, None, ()))
    from decodescope.run.ab import run_ab

    def progress(n: int, order: str, lk: Look | None) -> None:
        if not as_json:
            at = f": {lk.describe()} → {lk.decision}" if lk is not None else ""
            click.echo(f"pair {n} ({order}){at}", err=True)

    store = open_store(store_path)
    try:
        processes = _processes(store, fps, sa.url, sb.url, cal.identity)
        design = replace(design, **processes.design_fields())
        created: list[int] = []
        try:
            out = run_ab(sa, sb, store, design, labels=parse_labels(labels),
                         scrape=not no_scrape, fingerprints=fps, progress=progress,
                         on_created=lambda a, b: created.extend((a, b)))
        except KeyboardInterrupt:
            if created:
                click.echo(f"interrupted: kept runs {created[0]} (A) and {created[1]} (B) "
                           f"in {store.path}", err=True)
            raise
        from decodescope.verdict.side_resolve import resolve_side
        from decodescope.verdict.triage import triage

        side_a = resolve_side(str(out.run_a), store=store)
        side_b = resolve_side(str(out.run_b), store=store)
        runs_verdict = triage(side_a, side_b, min_effect=design.min_effect, run_spread=0.0)
    finally:
        store.close()
    v = ab_verdict(out.log_ratios, out.orders, out.looks, design, stopped=out.stopped,
                   run_a=out.run_a, run_b=out.run_b, urls=(sa.url, sb.url), fingerprints=fps,
                   runs_verdict=runs_verdict, seconds=out.seconds, arms=out.arms,
                   retaken=out.retaken, processes=processes)
    emit(v, as_json, render_ab)
    return v.exit_code


def _processes(store: Any, fps: tuple[dict[str, Any] | None, dict[str, Any] | None],
               url_a: str, url_b: str, identity: str | None) -> Any:
    """One server process or two, and A's stack's between-process spread from the store
    (learned only when they are two: one process carries none)."""
    from decodescope.store import runs as sr
    from decodescope.verdict import process_spread as ps

    one, _ = ps.same_process(fps[0], fps[1], url_a, url_b)
    spread = None
    if not one:
        spread = ps.learn_for_fingerprint(sr.list_runs(store, caliber=identity,
                                                       limit=100_000), fps[0], identity)
    return ps.for_ab(fps[0], fps[1], url_a, url_b, spread)
