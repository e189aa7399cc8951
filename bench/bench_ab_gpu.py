"""`decodescope ab` both ways on a real GPU: llama.cpp CUDA `llama-server` + Gemma 3 270M with
n-gram speculation (docs/methodology.md §9, issue 36).

Two servers on one GPU: A, and B identical to A ("identical": every REGRESSION / IMPROVEMENT is
a false alarm); then B restarted with a quantized KV cache (`--cache-type-k q8_0
--cache-type-v q8_0`, ≈ −5 % decode: "−5 %"). Each repetition is one `decodescope ab A B
--caliber demo-code-rewrite --json` with the default design (3 % minimum effect, α = 5 %,
Pocock-type spending, looks after 6 … 40 pairs), scraping and fingerprints on. Every freshly
started server is first probed several runs in a row (`probe --warmup 0`), one run after the
other, so its warm-up shows in the per-run decode rates.

On the GPU host (`run` subcommand; everything is written to OUT as it goes, so a call that
runs out of time still returns what it measured):

    python bench/bench_ab_gpu.py run --server BIN --model GGUF --template JINJA \
        --same 10 --slow 10 --budget-s 540 --out $OUT

Here, the table from the JSON files that came back (one or several calls), rows of a scenario
from concatenated raw `ab --json` outputs, and the sequential test replayed on one server's
per-request rates (its log):

    python bench/bench_ab_gpu.py table FILE [FILE ...]
    python bench/bench_ab_gpu.py rows self.jsonl --scenario self --tag 3 --gpu NAME > FILE
    python bench/bench_ab_gpu.py trace SERVER_LOG
    python bench/bench_ab_gpu.py replay FILE [FILE ...]

`replay` re-decides every stored repetition (`rows.*`: its measured pair log ratios, in order,
and the ANOVA of the τ it carried: MS_between, MS_within, n₀, dfs) under each way of carrying
τ's uncertainty that bench/bench_tau_carry.py compares (docs/methodology.md §9 "Two server
processes"): the verdict each would have given, its stop and interval.

How it was run on the lent H100 (docs/methodology.md §9; results in bench/results/). The
device copies the session's repository root, so everything goes under its git-ignored `.gpu/`:
`ds/` (../shared/gpu/build.sh and ds.py, src/decodescope as `decodescope/`, this file,
bench_ab.py, _common.py in `bench/`), `sdist/llama.cpp-min.tar.gz` (vendor/llama.cpp of the
llama-cpp-python 0.3.36 sdist without models/, docs/, media/, benches/), `whl/` (the runtime
dependencies for cp312 except numpy and scipy, which the host has), and the GGUF in pieces
under the 64 MiB a call carries (`p00/piece00` 40 MiB, `p01`…`p04` 57 MiB each). Calls:
1. carry ds, sdist, whl, p00: `bash .gpu/ds/build.sh` (starts the CUDA build in its own
   session), `pip install --no-index --no-deps --target /tmp/gpu/site .gpu/whl/*.whl`,
   `cp -r /tmp/gpu/ds/decodescope /tmp/gpu/site/`;
2.–4. carry p01, p02, p03 (each at once after the last: a machine goes back 30 s after a call):
   `cp .gpu/p0N/piece0N /tmp/gpu/`;
5. carry p04: `cat piece0* > gemma.gguf`, sha256 checked, wait for `/tmp/gpu/build.done`, then
   `PYTHONPATH=/tmp/gpu/site python3 ds/bench/bench_ab_gpu.py run --server
   llama.cpp/build/bin/llama-server --model gemma.gguf --template
   site/decodescope/engines/gemma.jinja --same 10 --slow 10 --warm-runs 8 --warm-runs-b 4
   --budget-s $((580 - SECONDS)) --tag 1 --out $OUT` (the build took 262 s of this call);
6. the same with `--same 1 --slow 10 --warm-runs 4 --tag 2`;
7. one server, 3 probe runs, then `python3 ds/ds.py ab URL URL --caliber demo-code-rewrite
   --json >> $OUT/self.jsonl` 9 times (now `run --self N`).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import random
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from decodescope.cli.main import main
from decodescope.verdict.paired_test import Design, run_sequential, verdict_kind

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ab import summarize, table  # noqa: E402

SPEC = ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3",
        "--spec-ngram-simple-size-m", "8"]
SLOW = ["--cache-type-k", "q8_0", "--cache-type-v", "q8_0"]
AB_GUARD_S = 55.0  # an `ab` at the 40-pair maximum took 38–46 s on an H100 (issue 36)


class Server:
    def __init__(self, args: argparse.Namespace, name: str, port: int, extra: list[str],
                 wrap: list[str] | None = None):
        """`wrap`: words run before the server's (e.g. `taskset -c 4-7`)."""
        self.name, self.port, self.extra = name, port, extra
        self.url = f"http://127.0.0.1:{port}"
        self.cmd = [*(wrap or []), args.server, "-m", args.model, "-ngl", "99", "--port", str(port), "--metrics",
                    "-c", "8192", "--chat-template-file", args.template, *SPEC, *extra]
        self.log = Path(args.workdir) / f"server-{name}-{port}.log"
        self.proc = subprocess.Popen(self.cmd, stdout=self.log.open("w"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.started = time.time()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"server {name} exited {self.proc.returncode}: "
                                 f"{self.log.read_text()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/health", timeout=2, trust_env=False).status_code == 200:
                    self.ready_s = time.time() - self.started
                    return
            time.sleep(0.5)
        raise SystemExit(f"server {name} not healthy in 120 s: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "url": self.url, "cmd": shlex.join(self.cmd),
                "ready_s": self.ready_s}


def cli(argv: list[str]) -> tuple[int, dict[str, Any], float]:
    out, err = io.StringIO(), io.StringIO()
    t0 = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    wall = time.monotonic() - t0
    try:
        return code, json.loads(out.getvalue()), wall
    except json.JSONDecodeError:
        raise SystemExit(f"{argv[0]} exit {code}, no JSON: {out.getvalue()[-1500:]}"
                         f"{err.getvalue()[-1500:]}") from None


def probe_run(s: Server, args: argparse.Namespace, i: int) -> dict[str, Any]:
    code, v, wall = cli(["probe", s.url, "--caliber", args.caliber, "--trials",
                         str(args.warm_trials), "--warmup", "0", "--store", args.store,
                         "--label", f"gpu-bench={s.name}", "--json"])
    trials = v["result"]["trials"]

    def col(key: str) -> list[float | None]:
        return [t.get(key) for t in trials]

    return {"server": s.name, "run": i, "exit": code, "wall_s": wall,
            "since_start_s": time.time() - s.started,
            "client_decode": col("decode_rate"), "engine_decode": col("engine_decode_rate"),
            "engine_step": col("engine_step_rate"), "engine_mal": col("engine_mal"),
            "client_mean": v["result"]["client"]["decode_rate"]["mean"], "run_id": v.get("id")}


def ab_row(v: dict[str, Any], code: int, wall: float | None) -> dict[str, Any]:
    """One repetition's row from the JSON of `decodescope ab --json`."""
    look = v["look"] or {}
    return {"verdict": v["verdict"], "cause": v["cause"], "exit": code, "pairs": v["pairs"],
            "retaken": len(v["retaken"]), "seconds": v["seconds"], "wall_s": wall,
            "rel": look.get("rel"), "sd": look.get("sd"), "look": look,
            "log_ratios": v.get("log_ratios"), "headline": v["headline"],
            "processes": {k: x for k, x in v.items() if "process" in k},
            "notes": [n for n in v.get("notes", []) if isinstance(n, str)]}


def warm_triage(s: Server, runs: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """Triage of a fresh server's first run against its last: is the warm-up said?"""
    first, last = runs[0]["run_id"], runs[-1]["run_id"]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["triage", str(first), "--baseline", str(last), "--store", args.store,
                     "--json"])
    try:
        v = json.loads(out.getvalue())
    except json.JSONDecodeError:
        return {"server": s.name, "exit": code, "error": (out.getvalue() + err.getvalue())[-800:]}
    notes = [n for n in v.get("notes", []) if isinstance(n, str)]
    return {"server": s.name, "first": first, "last": last, "exit": code,
            "verdict": v.get("verdict"), "headline": v.get("headline"),
            "server_notes": [n for n in notes if "Server state" in n or "warm" in n.lower()]}


def launch_cmd(args: argparse.Namespace, extra: list[str]) -> str:
    """A Server's command line with `{port}` where its port goes (`ab --launch-a/-b`)."""
    cmd = [args.server, "-m", args.model, "-ngl", "99", "--port", "PORT", "--metrics",
           "-c", "8192", "--chat-template-file", args.template, *SPEC, *extra]
    return shlex.join(cmd).replace("PORT", "{port}")


def launch_reps(args: argparse.Namespace, res: dict[str, Any],
                plan: list[tuple[str, list[str], int]], left: Any, save: Any) -> None:
    """`ab --launch-a A --launch-b B`: fresh servers for every start of every repetition. The
    scenarios (name, B's extra arguments, repetitions) take turns, so a call that runs out of
    budget still returns some of each."""
    order = [(name, extra) for k in range(max((n for _, _, n in plan), default=0))
             for name, extra, n in plan if k < n]
    for name, extra_b in order:
        a, b = launch_cmd(args, []), launch_cmd(args, extra_b)
        if left() < 2 * AB_GUARD_S:
            res["stopped"] = f"budget: {left():.0f} s left before a {name} repetition"
            return
        code, v, wall = cli(["ab", "--launch-a", a, "--launch-b", b, "--caliber", args.caliber,
                             "--store", args.store, "--json"])
        r = ab_row(v, code, wall)
        r.update(seconds=wall, unit=v.get("unit"), starts=len(v.get("starts") or []),
                 start_means=v.get("log_ratios"), log_ratios=v.get("pair_log_ratios"))
        res["rows"][name].append(r)
        save()
        print(f"{name} {len(res['rows'][name])}: {r['verdict']} after {r['starts']} starts, "
              f"{r['pairs']} pairs, {wall:.1f} s, rel {r['rel']}", file=sys.stderr, flush=True)


def ab_rep(a: Server, b: Server, args: argparse.Namespace) -> dict[str, Any]:
    code, v, wall = cli(["ab", a.url, b.url, "--caliber", args.caliber, "--store", args.store,
                         "--json"])
    return ab_row(v, code, wall)


def rows_from_raw(path: str, scenario: str, tag: str, gpu: str) -> None:
    """Rows of a scenario from concatenated `ab --json` outputs (e.g. a shell loop's)."""
    text, dec, i, rows = Path(path).read_text(), json.JSONDecoder(), 0, []
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            break
        v, i = dec.raw_decode(text, i)
        rows.append(ab_row(v, v["exit_code"], None))
    print(json.dumps({"tag": tag, "gpu": gpu, "servers": [], "warmup": [],
                      "rows": {scenario: rows}, "source": Path(path).name}, indent=1))


def gpu_name() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                               "--format=csv,noheader"], capture_output=True, text=True,
                              timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"no nvidia-smi ({e})"


def run(args: argparse.Namespace) -> None:
    t0 = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {"tag": args.tag, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                       time.gmtime()),
                           "gpu": gpu_name(),
                           "servers": [], "warmup": [], "rows": {"self": [], "same": [], "slow": []},
                           "stopped": None}
    dest = out / f"ab_gpu_{args.tag}.json"

    def save() -> None:
        dest.write_text(json.dumps(res, indent=1))

    def left() -> float:
        return args.budget_s - (time.monotonic() - t0)

    def warm(s: Server, runs: int) -> None:
        res["servers"].append(s.describe())
        done = []
        for i in range(runs):
            if left() < 30:
                break
            r = probe_run(s, args, i + 1)
            res["warmup"].append(r)
            done.append(r)
            save()
            print(f"warm-up {s.name} run {i + 1}: client {r['client_mean']:.1f} tok/s "
                  f"({r['since_start_s']:.0f} s after start)", file=sys.stderr, flush=True)
        if len(done) >= 2 and done[0].get("run_id") and done[-1].get("run_id"):
            t = warm_triage(s, done, args)
            res.setdefault("warmup_triage", []).append(t)
            save()
            print(f"triage {s.name} first vs last run: {t.get('verdict')} "
                  f"{t.get('server_notes')}", file=sys.stderr, flush=True)

    def reps(a: Server, b: Server, name: str, n: int) -> None:
        for _ in range(n):
            if left() < AB_GUARD_S:
                res["stopped"] = f"budget: {left():.0f} s left before a {name} repetition"
                return
            r = ab_rep(a, b, args)
            res["rows"][name].append(r)
            save()
            print(f"{name} {len(res['rows'][name])}: {r['verdict']} after {r['pairs']} pairs, "
                  f"{r['seconds']:.1f} s, rel {r['rel']}", file=sys.stderr, flush=True)

    def rate_of(name: str, last: int) -> float | None:
        runs = [r["client_mean"] for r in res["warmup"] if r["server"] == name][-last:]
        return statistics.fmean(runs) if runs else None

    def slow_server(a: Server, servers: list[Server]) -> Server | None:
        """The "−5 %" B: each candidate launch (--slow-args, ';'-separated) started and probed
        --warm-runs-b runs; the one whose last two runs' mean is nearest −5 % of A's last
        three is kept (one candidate: kept unscreened, as before)."""
        cands = [shlex.split(c) for c in args.slow_args.split(";") if c.strip()]
        best: tuple[float, Server] | None = None
        for k, extra in enumerate(cands):
            if left() < AB_GUARD_S + 30:
                break
            s = Server(args, f"Bslow{k + 1}", 8183 + k, extra)
            servers.append(s)
            warm(s, args.warm_runs_b)
            ra, rs = rate_of(a.name, 3), rate_of(s.name, 2)
            change = rs / ra - 1.0 if ra and rs else None
            res.setdefault("screen", []).append({"server": s.name, "extra": shlex.join(extra),
                                                 "change": change})
            save()
            print(f"screen {s.name} ({shlex.join(extra)}): "
                  f"{'n/a' if change is None else f'{100 * change:+.1f} %'}",
                  file=sys.stderr, flush=True)
            score = abs(change + 0.05) if change is not None else math.inf
            if best is None or score < best[0]:
                if best is not None:
                    best[1].stop()
                best = (score, s)
            else:
                s.stop()
        if best is not None:
            res["slow_server"] = best[1].name
        return best[1] if best is not None else None

    if args.launch:  # every repetition starts its own servers, afresh per start
        try:
            launch_reps(args, res, [("same", [], args.same),
                                    ("slow", shlex.split(args.slow_args.split(";")[0]), args.slow)],
                        left, save)
        finally:
            with contextlib.suppress(OSError):
                shutil.copy(args.store, out / f"runs_{args.tag}.sqlite")
            res["elapsed_s"] = time.monotonic() - t0
            save()
        return
    servers: list[Server] = []
    try:
        # The between-process spread of A's stack: fresh processes of A's launch, one after the
        # other (each on its own port: the port is not part of the stack), a few probe runs each.
        for k in range(args.tau_procs):
            if left() < 60:
                break
            p = Server(args, f"P{k + 1}", 8191 + k, [])
            servers.append(p)
            warm(p, args.tau_runs)
            p.stop()
        a = Server(args, "A", 8181, [])
        servers.append(a)
        warm(a, args.warm_runs)
        reps(a, a, "self", args.self_reps)
        if args.same:
            b = Server(args, "B", 8182, [])
            servers.append(b)
            warm(b, args.warm_runs_b)
            reps(a, b, "same", args.same)
            b.stop()
        if args.slow and left() >= AB_GUARD_S + 30:
            bq = slow_server(a, servers)
            if bq is not None:
                reps(a, bq, "slow", args.slow)
    finally:
        for s in servers:
            s.stop()
        logs = "".join(f"==== {s.name}: {s.log}\n" + "".join(s.log.read_text().splitlines(True)[-120:])
                       for s in servers)
        (out / f"servers_{args.tag}.log").write_text(logs)
        with contextlib.suppress(OSError):  # the stored runs, for replays of the decision
            shutil.copy(args.store, out / f"runs_{args.tag}.sqlite")
        res["elapsed_s"] = time.monotonic() - t0
        save()


def pct(x: float) -> str:
    return f"{x:+.1f} %".replace("-", "−")


def tables(files: list[str]) -> None:
    rows: dict[str, list[dict[str, Any]]] = {"self": [], "same": [], "slow": []}
    warmups: list[tuple[str, list[dict[str, Any]]]] = []
    gpus = set()
    for f in files:
        d = json.loads(Path(f).read_text())
        gpus.add(d["gpu"])
        for k in rows:
            rows[k].extend(d["rows"].get(k, []))
        by: dict[str, list[dict[str, Any]]] = {}
        for w in d["warmup"]:
            by.setdefault(w["server"], []).append(w)
        warmups.extend((f"{d['tag']}/{name}", ws) for name, ws in by.items())
    print(f"GPU: {'; '.join(sorted(gpus))}\n")
    if rows["same"] and rows["slow"]:
        print(table(summarize(rows["same"], False), summarize(rows["slow"], True)))
    if rows["self"]:
        c = summarize(rows["self"], False)
        kinds = ", ".join(f"{k} {n}" for k, n in c["verdicts"].items())
        print(f"| one server against itself (control) | {c['reps']} | NO_CHANGE within "
              f"40 pairs: {100 * c['rate']:.0f} % | {c['false_alarms']} | {kinds} | "
              f"{c['median_pairs']:g} | {c['median_s']:.1f} | {pct(100 * c['median_rel'])} | "
              f"{100 * c['median_sd']:.1f} % | {c['retaken']} |")
    for k in rows:
        for i, r in enumerate(rows[k], 1):
            rel = "—" if r["rel"] is None else pct(100 * r["rel"])
            sd = "—" if r["sd"] is None else f"{100 * r['sd']:.1f} %"
            print(f"  {k} {i}: {r['verdict']} ({r['cause']}) {r['pairs']} pairs {r['seconds']:.1f} s "
                  f"Δ {rel} sd {sd} re-taken {r['retaken']}")
    for f in files:
        for t in json.loads(Path(f).read_text()).get("warmup_triage", []):
            print(f"triage of fresh {t['server']}'s first run against its last: {t.get('verdict')} "
                  f"(exit {t.get('exit')}); " + " / ".join(t.get("server_notes") or ["no server-state note"]))
    print("\nFresh servers, runs in a row (probe --warmup 0; client steady-state decode, "
          "tok/s, mean of the run's trials; engine decode mean; change vs the last run):\n")
    print("| server | run | s after start | client decode | engine decode | vs last run |")
    print("|---|---|---|---|---|---|")
    for name, ws in warmups:
        last = ws[-1]["client_mean"]
        for w in ws:
            eng = [x for x in w["engine_decode"] if x is not None]
            e = f"{statistics.fmean(eng):.1f}" if eng else "—"
            print(f"| {name} | {w['run']} | {w['since_start_s']:.0f} | {w['client_mean']:.1f} | {e} "
                  f"| {pct(100 * (w['client_mean'] / last - 1))} |")


def eval_rates(path: str) -> list[float]:
    """Per-request decode rates (tok/s) from a `llama-server` log ("eval time = … tokens per
    second", prompt lines left out) or from a file of one number a line."""
    rates = []
    for line in Path(path).read_text().splitlines():
        if "eval time" in line and "prompt eval" not in line:
            m = re.search(r"([0-9.]+) tokens per second", line)
            if m:
                rates.append(float(m.group(1)))
        elif re.fullmatch(r"\s*[0-9.]+\s*", line):
            rates.append(float(line))
    return rates


def trace(path: str, seed: int) -> None:
    """Replay `ab`'s sequential test on one server's own per-request rates, time-ordered:
    consecutive requests paired (one process on both sides: its drift cancels), the first half
    against the second (two processes that drift apart), and the same rates shuffled (no drift
    at all). Windows of max-pairs pairs, disjoint and every 5 pairs."""
    x = eval_rates(path)
    design = Design()
    n = len(x) // 2
    shuffled = x[:]
    random.Random(seed).shuffle(shuffled)
    series = {
        "one process (consecutive requests)": [math.log(x[2 * k + 1] / x[2 * k]) for k in range(n)],
        "two processes (first half vs second)": [math.log(x[n + k] / x[k]) for k in range(n)],
        "no drift (the rates shuffled)": [math.log(shuffled[n + k] / shuffled[k])
                                          for k in range(n)],
    }
    print(f"{len(x)} requests; medians of 50 in a row: "
          + ", ".join(f"{statistics.median(x[i:i + 50]):.0f}" for i in range(0, len(x), 50)))
    print("| pairing | pairs | pair sd | mean | verdicts, disjoint windows | verdicts, every 5 |")
    print("|---|---|---|---|---|---|")
    for name, p in series.items():
        cells = []
        for step in (design.max_pairs, 5):
            kinds = [verdict_kind(lk) for s0 in range(0, len(p) - design.max_pairs + 1, step)
                     if (lk := run_sequential(p[s0:s0 + design.max_pairs], design)) is not None]
            cells.append(", ".join(f"{k} {kinds.count(k)}" for k in sorted(set(kinds))))
        print(f"| {name} | {len(p)} | {100 * statistics.stdev(p):.1f} % | "
              f"{pct(100 * statistics.fmean(p))} | {cells[0]} | {cells[1]} |")


def replay(files: list[str]) -> None:
    """Each stored A/B repetition re-decided under every method of carrying τ."""
    from bench_tau_carry import METHODS, design_for

    from decodescope.verdict.process_spread import Anova

    print("| file | scenario | rep | τ̂ (g) | recorded | " + " | ".join(METHODS) + " |")
    print("|---|---|---|---|---|" + "---|" * len(METHODS))
    tally: dict[tuple[str, str], dict[str, int]] = {}
    for f in files:
        d = json.loads(Path(f).read_text())
        for scen, rows in d["rows"].items():
            for i, r in enumerate(rows, 1):
                sp = ((r.get("processes") or {}).get("processes") or {}).get("spread") or {}
                if sp.get("ms_between") is None:
                    continue
                g = int(sp["df_between"]) + 1
                a = Anova(g, g + int(sp["df_within"]), float(sp["ms_between"]),
                          float(sp["ms_within"]), float(sp["n0"]))
                cells = []
                for m in METHODS:
                    lk = run_sequential(r["log_ratios"], design_for(a, m))
                    if lk is None:
                        cells.append("—")
                        continue
                    kind = verdict_kind(lk)
                    tally.setdefault((scen, m), {}).setdefault(kind, 0)
                    tally[(scen, m)][kind] += 1
                    cells.append(f"{kind} {lk.pairs} ({pct(100 * lk.rel_lo)} … "
                                 f"{pct(100 * lk.rel_hi)})")
                print(f"| {Path(f).name} | {scen} | {i} | {100 * math.sqrt(a.tau2):.1f} % ({g}) "
                      f"| {r['verdict']} {pct(100 * r['rel'])} | " + " | ".join(cells) + " |")
    print()
    for (scen, m), k in sorted(tally.items()):
        print(f"{scen} {m}: " + ", ".join(f"{v} {n}" for v, n in sorted(k.items())))


def main_bench() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--server", required=True)
    r.add_argument("--model", required=True)
    r.add_argument("--template", required=True)
    r.add_argument("--caliber", default="demo-code-rewrite")
    r.add_argument("--self", dest="self_reps", type=int, default=0,
                   help="repetitions of A against itself (the method's own control)")
    r.add_argument("--same", type=int, default=10)
    r.add_argument("--slow", type=int, default=10)
    r.add_argument("--warm-runs", type=int, default=8, help="probe runs of fresh server A")
    r.add_argument("--warm-runs-b", type=int, default=4, help="probe runs of fresh B servers")
    r.add_argument("--warm-trials", type=int, default=5)
    r.add_argument("--tau-procs", type=int, default=0,
                   help="fresh processes of A's launch probed first (the between-process spread)")
    r.add_argument("--slow-args", default=shlex.join(SLOW),
                   help="B's extra launch flags for the change; several ';'-separated: each "
                        "screened, the one nearest −5 %% kept")
    r.add_argument("--tau-runs", type=int, default=3, help="probe runs of each of them")
    r.add_argument("--launch", action="store_true",
                   help="`ab --launch-a/--launch-b`: fresh servers per start (the first of "
                        "--slow-args is B's change)")
    r.add_argument("--budget-s", type=float, default=540)
    r.add_argument("--tag", default="1")
    r.add_argument("--out", required=True)
    r.add_argument("--workdir", default="/tmp/gpu/work")
    r.add_argument("--store", default="/tmp/gpu/runs.sqlite")
    t = sub.add_parser("table")
    t.add_argument("files", nargs="+")
    w = sub.add_parser("rows", help="rows of one scenario from concatenated `ab --json` outputs")
    w.add_argument("file")
    w.add_argument("--scenario", choices=("self", "same", "slow"), required=True)
    w.add_argument("--tag", required=True)
    w.add_argument("--gpu", required=True)
    tr = sub.add_parser("trace", help="replay the sequential test on one server's request rates")
    tr.add_argument("file", help="llama-server log, or one rate (tok/s) a line")
    tr.add_argument("--seed", type=int, default=1)
    rp = sub.add_parser("replay", help="re-decide stored repetitions under each way of "
                        "carrying τ (bench/bench_tau_carry.py)")
    rp.add_argument("files", nargs="+")
    args = ap.parse_args()
    if args.cmd == "replay":
        replay(args.files)
    elif args.cmd == "trace":
        trace(args.file, args.seed)
    elif args.cmd == "run":
        run(args)
    elif args.cmd == "rows":
        rows_from_raw(args.file, args.scenario, args.tag, args.gpu)
    else:
        tables(args.files)


if __name__ == "__main__":
    main_bench()
