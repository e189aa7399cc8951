"""`decodescope exporter --config fleet.toml`: run `check` on a schedule, serve /metrics.

Runs until Ctrl-C / SIGTERM (exit 0). A failing probe is a counter and a line on stderr,
never a traceback or an exit; a bad config is exit 2 before anything starts.
"""

from __future__ import annotations

import signal
import sys
from dataclasses import replace
from types import FrameType

import click

from decodescope.exporter import Exporter, load_config
from decodescope.exporter.config import parse_listen, parse_max_workers, parse_shard


@click.command("exporter")
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="fleet.toml: [exporter] listen/store, one [[check]] per endpoint.")
@click.option("--listen", default=None, metavar="HOST:PORT",
              help="Serve /metrics here (default: [exporter] listen, else 127.0.0.1:9464).")
@click.option("--once", is_flag=True,
              help="Run every check once, print the metrics text and exit (no server).")
@click.option("--max-workers", "max_workers", type=int, default=None, metavar="N",
              help="Checks running at once, at most (default: [exporter] max_workers, else "
                   "min(4, CPU cores)); the others wait their turn.")
@click.option("--shard", default=None, metavar="I/N",
              help="Run only the checks of shard I of N (stable hash of the check name mod N): "
                   "N instances on one PostgreSQL store run every check exactly once.")
def command(config_path: str, listen: str | None, once: bool, max_workers: int | None,
            shard: str | None) -> int:
    """Run each [[check]] on its schedule and serve the results on /metrics for Prometheus.

    Served per check: decode rate, MAL, step rate, band floor and ceiling, the last verdict
    and exit code, consecutive regressions, last success time, result age and a staleness flag
    (numbers older than 2x the schedule are dropped), runs and probe errors as counters; and
    the exporter's queue (workers, checks running and waiting). docs/exporter.md.
    """
    cfg = load_config(config_path)
    if listen:
        host, port = parse_listen(listen, "--listen")
        cfg = replace(cfg, host=host, port=port)
    if max_workers is not None:
        cfg = replace(cfg, max_workers=parse_max_workers(max_workers, "--max-workers"))
    if shard is not None:
        cfg = cfg.sharded(parse_shard(shard, "--shard"))
    if cfg.shard is not None:
        click.echo(f"shard {cfg.shard}: {len(cfg.checks)} of the {cfg.fleet_size} check(s) in "
                   f"{config_path}" + ("" if cfg.checks else
                                       " — none here: this instance serves no check"), err=True)
    exp = Exporter(cfg, log=lambda s: click.echo(s, err=True))
    if once:
        exp.run_once()
        click.echo(exp.metrics_text(), nl=False)
        return 0

    def _term(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _term)
    exp.start()
    click.echo(f"serving http://{cfg.host}:{exp.port}/metrics · {len(cfg.checks)} check(s) "
               f"from {config_path}", err=True)
    try:
        exp.wait()
    except KeyboardInterrupt:
        click.echo("stopping", err=True)
    finally:
        exp.stop(timeout_s=5.0)
    sys.stdout.flush()
    return 0
