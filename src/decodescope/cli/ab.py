"""`decodescope ab URL_A URL_B --caliber C`: interleaved A/B of two live endpoints with a
sequential stop; `decodescope ab --launch-a CMD --launch-b CMD --caliber C`: the same over
fresh server processes it starts itself (run/ab.py, verdict/paired_test.py)."""

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
@click.argument("url_a", required=False)
@click.argument("url_b", required=False)
@click.option("--launch-a", default=None, metavar="CMD",
              help="Start side A's server with this command ({port} where its port goes), "
                   "afresh for each start, instead of probing URL_A.")
@click.option("--launch-b", default=None, metavar="CMD",
              help="Side B's launch command (with --launch-a).")
@click.option("--pairs-per-start", default=th.AB_PAIRS_PER_START, show_default=True,
              type=click.IntRange(1, 1000), help="With --launch-*: pairs per start.")
@click.option("--min-starts", default=th.AB_MIN_STARTS, show_default=True,
              type=click.IntRange(3, 1000), help="With --launch-*: first look, in starts.")
@click.option("--max-starts", default=th.AB_MAX_STARTS, show_default=True,
              type=click.IntRange(3, 1000), help="With --launch-*: last look, in starts.")
@click.option("--ready-timeout", default=600.0, show_default=True,
              type=click.FloatRange(1, 86_400), metavar="S",
              help="With --launch-*: seconds a started server has to answer GET /v1/models.")
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
def command(url_a: str | None, url_b: str | None, launch_a: str | None, launch_b: str | None,
            pairs_per_start: int, min_starts: int, max_starts: int, ready_timeout: float,
            caliber_name: str, min_effect: float, alpha: float,
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

    With --launch-a CMD --launch-b CMD instead of the URLs, the A/B starts both servers
    itself ({port} in each command is replaced by a free loopback port; ready when GET
    /v1/models answers 200) and restarts them between starts: each start is a fresh process
    of each side and --pairs-per-start pairs, and the test's unit is a start's mean change —
    so two processes of one stack that differ in level are carried by the starts' spread, and
    "no change" can be shown where pairs of two processes never show it. Looks from
    --min-starts to --max-starts starts; /metrics is not scraped (the processes are its own).

    Exit codes as triage: 0 NO_CHANGE / IMPROVEMENT, 1 REGRESSION (B slower), 3 INCONCLUSIVE
    or CONTAMINATED.
    """
    from decodescope.cli.common import parse_labels
    from decodescope.errors import UsageError

    ctx = click.get_current_context()
    launch_mode = _launch_mode(ctx, url_a, url_b, launch_a, launch_b)
    if launch_mode:
        if max_starts < min_starts:
            raise UsageError("--max-starts is below --min-starts", where="ab",
                             remedy="Give --max-starts ≥ --min-starts")
        design = Design(alpha=alpha, min_pairs=min_starts, max_pairs=max_starts,
                        n_looks=n_looks, min_effect=min_effect / 100.0, spending=spending,
                        unit="starts")
    else:
        if max_pairs < min_pairs:
            raise UsageError("--max-pairs is below --min-pairs", where="ab",
                             remedy="Give --max-pairs ≥ --min-pairs")
        design = Design(alpha=alpha, min_pairs=min_pairs, max_pairs=max_pairs,
                        n_looks=n_looks, min_effect=min_effect / 100.0, spending=spending)
    cal = resolve(caliber_name)
    key = read_api_key(api_key_env)
    trials = design.max_pairs * (pairs_per_start if launch_mode else 1)
    sa = ProbeSettings(url=check_url(url_a, "URL_A") if url_a else "http://127.0.0.1",
                       caliber=cal, trials=trials, model=model_a, api_key=key, proxy=proxy,
                       warmup=warmup)
    sb = ProbeSettings(url=check_url(url_b, "URL_B") if url_b else "http://127.0.0.1",
                       caliber=cal, trials=trials, model=model_b, api_key=key, proxy=proxy,
                       warmup=warmup)
    if launch_mode:
        assert launch_a is not None and launch_b is not None
        return _launched_ab(sa, sb, design, launch_a, launch_b, pairs_per_start,
                            ready_timeout, labels, no_fingerprint, store_path, as_json)
    fps: tuple[dict[str, Any] | None, dict[str, Any] | None] = (None, None)
    if not no_fingerprint:
        from decodescope.run.setup import collect_fp

        fps = (collect_fp(sa, None, ()), collect_fp(sb, None, ()))
    from decodescope.run.ab import run_ab

    progress = _progress(as_json)

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


def _progress(as_json: bool) -> Any:
    def progress(taken: str, order: str, lk: Look | None) -> None:
        if not as_json:
            at = f": {lk.describe()} → {lk.decision}" if lk is not None else ""
            click.echo(f"{taken} ({order}){at}", err=True)
    return progress


def _launch_mode(ctx: click.Context, url_a: str | None, url_b: str | None,
                 launch_a: str | None, launch_b: str | None) -> bool:
    """Two URLs, or two launch commands (never a mix); the options of the other mode not
    given."""
    from click.core import ParameterSource

    from decodescope.errors import UsageError

    launches = (launch_a, launch_b)
    if any(launches):
        if not all(launches):
            raise UsageError("one launch command given: an A/B that starts its servers "
                             "needs both", where="--launch-a/--launch-b",
                             remedy="Give --launch-a CMD and --launch-b CMD")
        if url_a or url_b:
            raise UsageError("URLs and launch commands given together", where="ab",
                             remedy="Give URL_A URL_B (servers already running) or "
                                    "--launch-a/--launch-b (servers it starts), not both")
        given = [f"--{n.replace('_', '-')}" for n in ("min_pairs", "max_pairs")
                 if ctx.get_parameter_source(n) == ParameterSource.COMMANDLINE]
        if given:
            raise UsageError(f"{' and '.join(given)} count pairs between two running servers",
                             where="ab --launch-a/--launch-b",
                             remedy="With launch commands give --min-starts / --max-starts "
                                    "and --pairs-per-start")
        return True
    if not (url_a and url_b):
        raise UsageError("two endpoints are needed", where="ab",
                         remedy="Give URL_A URL_B, or --launch-a CMD --launch-b CMD")
    given = [f"--{n.replace('_', '-')}" for n in ("pairs_per_start", "min_starts", "max_starts",
                                                  "ready_timeout")
             if ctx.get_parameter_source(n) == ParameterSource.COMMANDLINE]
    if given:
        raise UsageError(f"{', '.join(given)} apply to servers the A/B starts itself",
                         where="ab", remedy="Add --launch-a CMD --launch-b CMD, or drop them")
    return False


def _launched_ab(sa: ProbeSettings, sb: ProbeSettings, design: Design, launch_a: str,
                 launch_b: str, pairs_per_start: int, ready_timeout: float,
                 labels: tuple[str, ...], no_fingerprint: bool, store_path: str | None,
                 as_json: bool) -> int:
    """The A/B over fresh server processes started from the two launch commands."""
    import shutil
    import tempfile
    from pathlib import Path

    from decodescope.cli.common import parse_labels
    from decodescope.engines.launch import LaunchCommand
    from decodescope.run.ab import Launch, run_ab
    from decodescope.verdict.side_resolve import resolve_side
    from decodescope.verdict.triage import triage

    cmds = (LaunchCommand(launch_a, "A"), LaunchCommand(launch_b, "B"))
    log_dir = Path(tempfile.mkdtemp(prefix="decodescope-ab-"))
    launch = Launch(cmds, pairs_per_start, ready_timeout, log_dir)
    fingerprint = None
    if not no_fingerprint:
        from decodescope.run.setup import collect_fp

        def fingerprint(s: ProbeSettings) -> dict[str, Any] | None:
            return collect_fp(s, None, ())
    store = open_store(store_path)
    created: list[int] = []
    try:
        out = run_ab(sa, sb, store, design, labels=parse_labels(labels),
                     progress=_progress(as_json), launch=launch, fingerprint=fingerprint,
                     on_created=lambda a, b: created.extend((a, b)))
        side_a = resolve_side(str(out.run_a), store=store)
        side_b = resolve_side(str(out.run_b), store=store)
        runs_verdict = triage(side_a, side_b, min_effect=design.min_effect, run_spread=0.0)
    except BaseException:
        if created:
            click.echo(f"stopped: kept runs {created[0]} (A) and {created[1]} (B) in "
                       f"{store.path}; the servers' output is in {log_dir}", err=True)
        raise
    finally:
        store.close()
    shutil.rmtree(log_dir, ignore_errors=True)
    v = ab_verdict(out.log_ratios, out.orders, out.looks, design, stopped=out.stopped,
                   run_a=out.run_a, run_b=out.run_b,
                   urls=(f"started by: {cmds[0].shown()}", f"started by: {cmds[1].shown()}"),
                   fingerprints=out.fingerprints, runs_verdict=runs_verdict,
                   seconds=out.seconds, arms=out.arms, retaken=out.retaken, pair_log_ratios=out.pair_log_ratios,
                   starts=out.starts)
    emit(v, as_json, render_ab)
    return v.exit_code
