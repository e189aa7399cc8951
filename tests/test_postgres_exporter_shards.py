"""Two exporter instances, one PostgreSQL store, the fleet split between them (`--shard 0/2`,
`--shard 1/2`, `--once`, started together as two processes): every check's run stored exactly
once, none lost or duplicated, run ids unique (docs/exporter.md, "Outgrowing one host").
test_postgres's throwaway cluster; skipped with the reason without PostgreSQL's binaries."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_postgres import PG_PASSWORD, PG_PASSWORD_Q, pg_cluster

from decodescope.cli.main import main
from decodescope.exporter.config import shard_of
from decodescope.sim import SimConfig, SimServer
from decodescope.store import runs as sr
from decodescope.store.connect import open_store

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

ANCHOR = "demo-code-rewrite"
N_CHECKS = 6
CLI = "import sys; from decodescope.cli.main import main; sys.exit(main(sys.argv[1:]))"


def test_two_instances_split_a_fleet_on_one_postgres_store(tmp_path: Path, capsys):
    c = pg_cluster()
    pg = c.url(c.new_db())
    # six endpoints on six loopback addresses (six hosts: an instance may check them at once)
    sims = [SimServer(SimConfig(time_scale=0.1, seed=3 + i, host=f"127.0.0.{i + 2}",
                                step_rate_hz=40.0)).start_in_thread() for i in range(N_CHECKS)]
    try:
        assert main(["probe", sims[0].url, "--caliber", ANCHOR, "--trials", "2", "--store", pg,
                     "--no-fingerprint", "--no-scrape", "--json"]) == 0
        anchor_id = json.loads(capsys.readouterr().out)["id"]
        assert main(["baseline", "set", "anchor", "--caliber", ANCHOR, "--from-runs",
                     str(anchor_id), "--store", pg]) == 0
        names = [f"gpu-{i}" for i in range(N_CHECKS)]
        checks = "".join(
            f'[[check]]\nname = "{n}"\nbaseline = "anchor"\nurl = "{s.url}"\ntrials = 2\n'
            'scrape = false\nfingerprint = false\n\n' for n, s in zip(names, sims, strict=True))
        cfg = tmp_path / "fleet.toml"
        cfg.write_text(f'[exporter]\nstore = "{pg}"\nmax_workers = 2\n\n{checks}')
        capsys.readouterr()
        t0 = time.monotonic()
        procs = [subprocess.Popen([sys.executable, "-c", CLI, "exporter", "--config", str(cfg),
                                   "--once", "--shard", f"{i}/2"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  env={**os.environ, "PYTHONUNBUFFERED": "1"})
                 for i in range(2)]
        outs = [p.communicate(timeout=240) for p in procs]
        took = time.monotonic() - t0
    finally:
        for s in sims:
            s.stop()
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err.decode()
        text = out.decode() + err.decode()
        assert PG_PASSWORD not in text and PG_PASSWORD_Q not in text
    mine = [[n for n in names if shard_of(n, 2) == i] for i in range(2)]
    for i, (out, err) in enumerate(outs):
        assert f"shard {i}/2: {len(mine[i])} of the {N_CHECKS} check(s)" in err.decode()
        served = {line.split('check="')[1].split('"')[0] for line in out.decode().splitlines()
                  if line.startswith("decodescope_check_runs_total{")}
        assert served == set(mine[i])  # each instance served only its own shard
        assert f'decodescope_fleet_checks{{shard="{i}/2"}} {float(len(mine[i]))}' \
            in out.decode()
    with open_store(pg) as st:
        runs = sr.list_runs(st, limit=1000)
    per_check: dict[str, int] = {}
    for r in runs:
        if "check" in r.labels:
            per_check[r.labels["check"]] = per_check.get(r.labels["check"], 0) + 1
    assert per_check == {n: 1 for n in names}  # every check's run stored once: none lost or doubled
    ids = [r.id for r in runs]
    assert len(ids) == len(set(ids)) == N_CHECKS + 1  # the anchor's run and one per check
    print(f"two instances, {N_CHECKS} checks on one PostgreSQL store: {took:.1f} s, "
          f"{len(runs)} runs stored, per shard {[len(m) for m in mine]}")
