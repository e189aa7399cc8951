"""One fleet, one PostgreSQL store: one exporter instance for all checks, then the fleet split
across two instances (`--shard 0/2`, `--shard 1/2`) started together (issue 34).

N simulators on N loopback addresses (N hosts), one anchor baseline, a fleet.toml with N
checks; each instance is `decodescope exporter --config fleet.toml --once [--shard i/2]
--max-workers W`, a process of its own. Reported per instance: its round time (its own
`round: ...` line), its checks, the most that ran at once; then the runs stored per check
(target: exactly one per check in each phase) and whether run ids are unique.

    PYTHONPATH=src python bench/bench_exporter_shards.py [--checks 12] [--workers 2]
        [--trials 2] [--store postgresql://...]

Without --store it starts tests/test_postgres.py's throwaway cluster (Debian's postgresql).
Two instances on one machine share its cores: the split is for more than one host; here it
shows that the shards run every check once on one store, and what one instance's round costs.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from decodescope.cli.main import main
from decodescope.sim import SimConfig, SimServer
from decodescope.store import runs as sr
from decodescope.store.connect import open_store

CALIBER = "demo-code-rewrite"
CLI = "import sys; from decodescope.cli.main import main; sys.exit(main(sys.argv[1:]))"
ROUND = re.compile(r"round(?: \(shard (\S+)\))?: (\d+) check\(s\) in ([\d.]+) s, at most (\d+)")


def quiet(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(list(argv))
    return code, out.getvalue()


def phase(cfg: Path, shards: list[str | None], workers: int) -> tuple[float, list[dict]]:
    t0 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-c", CLI, "exporter", "--config", str(cfg),
                               "--once", "--max-workers", str(workers),
                               *(["--shard", s] if s else [])],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"}) for s in shards]
    rows = []
    for s, p in zip(shards, procs, strict=True):
        _, err = p.communicate(timeout=1800)
        m = ROUND.search(err.decode())
        if p.returncode != 0 or m is None:
            raise SystemExit(f"instance {s or 'all'} failed (exit {p.returncode}): "
                             f"{err.decode()[-500:]}")
        rows.append({"shard": s or "all", "checks": int(m.group(2)),
                     "round_s": float(m.group(3)), "peak": int(m.group(4))})
    return time.monotonic() - t0, rows


def stored(store: str) -> tuple[dict[str, int], bool, int]:
    with open_store(store) as st:
        runs = sr.list_runs(st, limit=100000)
    per: dict[str, int] = {}
    for r in runs:
        if "check" in r.labels:
            per[r.labels["check"]] = per.get(r.labels["check"], 0) + 1
    ids = [r.id for r in runs]
    return per, len(ids) == len(set(ids)), len(runs)


def run(args: argparse.Namespace) -> dict:
    store = args.store
    if store is None:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from test_postgres import pg_cluster  # type: ignore[import-not-found]

        c = pg_cluster()
        store = c.url(c.new_db())
    sims = [SimServer(SimConfig(time_scale=0.1, seed=3 + i, host=f"127.0.0.{i + 2}",
                                step_rate_hz=40.0)).start_in_thread() for i in range(args.checks)]
    try:
        code, out = quiet("probe", sims[0].url, "--caliber", CALIBER, "--trials", "2",
                          "--store", store, "--no-fingerprint", "--no-scrape", "--json")
        assert code == 0, "anchor probe failed"
        assert quiet("baseline", "set", "anchor-shards", "--caliber", CALIBER, "--from-runs",
                     str(json.loads(out)["id"]), "--store", store)[0] == 0
        import tempfile

        d = Path(tempfile.mkdtemp(prefix="ds-shards-"))
        result: dict = {"checks": args.checks, "max_workers": args.workers,
                        "trials": args.trials, "phases": []}
        for label, shards in (("one instance", [None]), ("two instances", ["0/2", "1/2"])):
            tag = "one" if len(shards) == 1 else "two"
            cfg = d / f"fleet-{tag}.toml"
            cfg.write_text(f'[exporter]\nstore = "{store}"\n\n' + "".join(
                f'[[check]]\nname = "{tag}-{i}"\nbaseline = "anchor-shards"\nurl = "{s.url}"\n'
                f'trials = {args.trials}\nscrape = false\nfingerprint = false\n\n'
                for i, s in enumerate(sims)))
            wall, rows = phase(cfg, shards, args.workers)
            per, unique, _ = stored(store)
            mine = {k: v for k, v in per.items() if k.startswith(tag + "-")}
            result["phases"].append({
                "phase": label, "wall_s": round(wall, 1), "instances": rows,
                "runs_stored": sum(mine.values()), "checks_with_one_run": sum(
                    1 for v in mine.values() if v == 1), "run_ids_unique": unique})
    finally:
        for s in sims:
            s.stop()
    return result


def main_() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checks", type=int, default=12)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--store", default=None)
    r = run(ap.parse_args())
    for p in r["phases"]:
        inst = "; ".join(f"{i['shard']}: {i['checks']} checks in {i['round_s']} s "
                         f"(at most {i['peak']} at once)" for i in p["instances"])
        print(f"{p['phase']}: wall {p['wall_s']} s — {inst}; {p['runs_stored']} runs stored, "
              f"{p['checks_with_one_run']}/{r['checks']} checks with exactly one, "
              f"ids unique: {p['run_ids_unique']}")
    print(json.dumps(r))


if __name__ == "__main__":
    main_()
