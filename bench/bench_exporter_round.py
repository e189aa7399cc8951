"""An exporter round over a fleet of unchanged simulated endpoints — alarms counted — and the
same with one endpoint made 15 % slower (issue 32, item 2).

As a user would: N simulators (`decodescope sim`, one process each, one host), each probed
into the store with `decodescope spread URL --runs R` (its anchor runs; the stack's run-to-run
spread is learned from them), `decodescope baseline set anchor-i --from-runs IDS`, then one
exporter round (`Exporter(load_config(fleet.toml)).run_once()`, the library call of
`decodescope exporter --config fleet.toml --once`: each check in its own worker process).
Round A: every endpoint unchanged (target: 0 alarms). Round B: endpoint SLOW restarted on the
same port with its step rate × 0.85 (target: that one alarms, no other).

    PYTHONPATH=src python bench/bench_exporter_round.py [--endpoints 20] [--runs 5]
        [--anchor-trials 2] [--trials 3] [--hosts one|many]

--hosts many binds endpoint i to 127.0.0.(2+i): the exporter then probes them all at once
(other hosts), which saturates a small machine — the fleet rule's case. Light on CPU by
default: short trials (demo-code-rewrite at time scale 0.1), one host (checks one at a time).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from decodescope.cli.main import main
from decodescope.exporter import Exporter, load_config
from decodescope.exporter.outcome import Outcome

CALIBER = "demo-code-rewrite"
TIME_SCALE = 0.1
STEP_RATE = 40.0
SLOWER = 0.85  # endpoint SLOW's step rate in round B: 15 % slower
ALARMS = ("BELOW_FLOOR", "BELOW_BAND")
SIM_MAIN = "import sys; from decodescope.sim.command import command; sys.exit(command())"


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class Sim:
    def __init__(self, host: str, port: int, seed: int, step_rate: float) -> None:
        self.host, self.port = host, port
        self.url = f"http://{host}:{port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SIM_MAIN, "--host", host, "--port", str(port),
             "--seed", str(seed), "--time-scale", str(TIME_SCALE), "--step-rate",
             str(step_rate)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        t_end = time.monotonic() + timeout_s
        while time.monotonic() < t_end:
            if self.proc.poll() is not None:
                raise SystemExit(f"simulator {self.url} exited with {self.proc.returncode}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/v1/models", timeout=2.0).status_code == 200:
                    return
            time.sleep(0.2)
        raise SystemExit(f"simulator {self.url} not ready in {timeout_s:.0f} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def cli(args: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(args)
    return code, out.getvalue()


@contextlib.contextmanager
def fleet(n: int, hosts: str) -> Iterator[list[Sim]]:
    sims: list[Sim] = []
    try:
        for i in range(n):
            host = f"127.0.0.{2 + i}" if hosts == "many" else "127.0.0.1"
            sims.append(Sim(host, free_port(host), seed=100 + i, step_rate=STEP_RATE))
        for s in sims:
            s.wait_ready()
        yield sims
    finally:
        for s in sims:
            s.stop()


def fleet_toml(path: Path, store: str, sims: list[Sim], trials: int) -> None:
    lines = ["[exporter]", 'listen = "127.0.0.1:0"', f'store = "{store}"', ""]
    for i, s in enumerate(sims):
        lines += ["[[check]]", f'name = "ep{i:02d}"', f'baseline = "anchor-{i:02d}"',
                  f'url = "{s.url}"', f"trials = {trials}", "timeout_s = 300",
                  "scrape_interval_s = 0.1", ""]
    path.write_text("\n".join(lines))


def round_(cfg_path: Path, log: list[str]) -> tuple[dict[str, Outcome | None], str, float]:
    exp = Exporter(load_config(str(cfg_path)), log=log.append)
    t0 = time.monotonic()
    exp.run_once()
    wall = time.monotonic() - t0
    return exp.reported(), exp.fleet_finding().text(), wall


def cell(o: Outcome | None) -> str:
    if o is None:
        return "—"
    if not o.ok:
        return f"error {o.error_kind}"
    ch = f"{100 * o.change:+.1f}%" if o.change is not None else "  n/a"
    return f"{o.verdict:<12} {ch:>7}  exit {o.exit_code}"


def main_() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--endpoints", type=int, default=20)
    ap.add_argument("--runs", type=int, default=5, help="anchor runs per endpoint")
    ap.add_argument("--anchor-trials", type=int, default=2)
    ap.add_argument("--trials", type=int, default=3, help="trials per check")
    ap.add_argument("--slow", type=int, default=7, help="the endpoint made slower in round B")
    ap.add_argument("--hosts", choices=("one", "many"), default="one")
    ap.add_argument("--json", dest="json_out", default=None, help="also write the rows here")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ds-bench-fleet-"))
    store = str(tmp / "runs.sqlite")
    cfg = tmp / "fleet.toml"
    log_a: list[str] = []
    log_b: list[str] = []
    t_start = time.monotonic()
    with fleet(a.endpoints, a.hosts) as sims:
        spreads = []
        for i, s in enumerate(sims):  # the anchors, as a user sets them
            code, out = cli(["spread", s.url, "--caliber", CALIBER, "--runs", str(a.runs),
                             "--trials", str(a.anchor_trials), "--wait", "0", "--store", store,
                             "--json"])
            if code != 0:
                raise SystemExit(f"spread {s.url}: exit {code}")
            ids = ",".join(map(str, json.loads(out)["runs"]))
            code, out = cli(["baseline", "set", f"anchor-{i:02d}", "--caliber", CALIBER,
                             "--from-runs", ids, "--store", store, "--json"])
            if code != 0:
                raise SystemExit(f"baseline set anchor-{i:02d}: exit {code}")
            b = json.loads(out)
            spreads.append((b["spread"]["source"], b["spread"]["sd"], b["band"]))
        t_anchor = time.monotonic() - t_start
        fleet_toml(cfg, store, sims, a.trials)
        rep_a, fleet_a, wall_a = round_(cfg, log_a)
        slow = sims[a.slow]  # round B: the same endpoint, 15 % slower, on the same port
        slow.stop()
        sims[a.slow] = Sim(slow.host, slow.port, seed=100 + a.slow, step_rate=STEP_RATE * SLOWER)
        sims[a.slow].wait_ready()
        rep_b, fleet_b, wall_b = round_(cfg, log_b)
    names = sorted(rep_a)
    slow_name = f"ep{a.slow:02d}"
    alarms_a = [n for n in names if rep_a[n] is not None and rep_a[n].verdict in ALARMS]
    alarms_b = [n for n in names if rep_b[n] is not None and rep_b[n].verdict in ALARMS]
    learned = sum(1 for s in spreads if s[0] == "learned")
    print(f"exporter round over {a.endpoints} simulated endpoints ({a.hosts} host(s)); anchors: "
          f"{a.runs} runs x {a.anchor_trials} trials each ({t_anchor:.0f} s), checks: "
          f"{a.trials} trials; spread learned for {learned} of {len(spreads)} anchors "
          f"(sd {min(s[1] for s in spreads):.1%} … {max(s[1] for s in spreads):.1%})")
    print()
    print(f"{'endpoint':<10} {'round A: all unchanged':<30} {'round B: ' + slow_name + ' 15 % slower':<30}")
    for n in names:
        mark = "  <- 15 % slower" if n == slow_name else ""
        print(f"{n:<10} {cell(rep_a[n]):<30} {cell(rep_b[n]):<30}{mark}")
    print()
    print(f"alarms     {len(alarms_a):<30} {len(alarms_b):<30}")
    print(f"           target 0{'':<22} target 1 ({slow_name})")
    print(f"round wall {wall_a:.0f} s{'':<26} {wall_b:.0f} s")
    print(f"fleet A: {fleet_a}")
    print(f"fleet B: {fleet_b}")
    ok_a = not alarms_a
    ok_b = alarms_b == [slow_name]
    print(f"result: round A {'met' if ok_a else 'MISSED'} (alarms: {', '.join(alarms_a) or 'none'});"
          f" round B {'met' if ok_b else 'MISSED'} (alarms: {', '.join(alarms_b) or 'none'})")
    if a.json_out:
        Path(a.json_out).write_text(json.dumps({
            "endpoints": a.endpoints, "hosts": a.hosts, "spreads": spreads,
            "round_a": {n: (o.to_dict() if o else None) for n, o in rep_a.items()},
            "round_b": {n: (o.to_dict() if o else None) for n, o in rep_b.items()},
            "fleet_a": fleet_a, "fleet_b": fleet_b, "alarms_a": alarms_a, "alarms_b": alarms_b},
            indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main_())
