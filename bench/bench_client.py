"""Client benchmarks: how accurately and how cheaply decodescope's streaming client measures,
side by side with AIPerf, against the simulator's ground truth. Prints one table.

    .venv/bin/python bench/bench_client.py [--aiperf PATH] [--quick] [--json FILE]
                                           [--load N | --compare-load N] [--emitters N]

1. Accuracy: per-request decode-rate and mean-ITL error, |measured - true| / true, at
   concurrency 1, 16 and 64, against the simulator; code prompt with thinking on (MAL ~3.1
   reasoning, ~4.5 code).
2. Capacity: offered load (step rate x concurrency) goes up until the client's p99 timestamp
   lag (receipt - true emit, both CLOCK_MONOTONIC) exceeds 2 ms; the capacity is the highest
   token rate ingested within it, on one core. The load comes from the replay emitter
   (bench/_emitter.py: the simulator's bytes, pre-rendered, one send per stream per tick),
   whose own ceiling is measured first and printed, so the client decides the capacity.
3. Overhead: client CPU seconds per million tokens (client and child processes, user + system),
   the slope of CPU over tokens across the capacity runs, so start-up costs drop out.
`decodescope/httpx` is the same client forced onto its httpx path (https, proxies).

The simulator (or emitter) runs on core 1 and the client on core 0 (taskset); by default both
run SCHED_FIFO (as root), so other work on a shared machine cannot preempt them. `--load N`
runs N busy loops (normal priority, any core) for the whole run; `--compare-load N` runs the
bench twice, quiet and then with N busy loops, and prints both tables side by side. The load
average is printed before and after each pass. docs/performance.md has the caveats.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import _aiperf  # noqa: E402
import _common as C  # noqa: E402

MODEL = "sim-vllm/decodescope-sim"
PROMPT = "def rewrite(x): return x  # rewrite this function"  # "def " -> code class
MAX_TOKENS = 400  # thinking: 200 reasoning tokens, then 200 code tokens
LAG_LIMIT_S = 0.002  # the capacity criterion: p99 receipt lag within 2 ms
MAL_GUESS = 4.2  # tokens per chunk of a long stream at T=0 with thinking, to size capacity runs
CAPACITY_CONCURRENCY = 32
CAPACITY_RUN_S = 3.0  # length of one capacity level, in real seconds
# Offered step rates per stream, capacity sweep (x 32 streams x ~4.2 tokens: ~34,000 to
# ~540,000 tok/s); the emitter's ceiling run says how far it can go on this machine.
STEP_RATES_HZ = (250, 500, 750, 1000, 1500, 2000, 3000, 4000)
CEILING_TOKENS = 20000  # per stream, in the emitter's flat-out ceiling run
ACCURACY = ((1, 5), (16, 2), (64, 1))  # (concurrency, runs): 5, 32 and 64 requests
CLIENT_TIMEOUT_S = 300.0  # a client run that takes longer is killed (and the bench stops)
TARGETS = {  # metric -> (max allowed, label)
    "decode_err_c1": (0.005, "<= 0.5%"), "decode_err_c16": (0.01, "<= 1%"),
    "decode_err_c64": (0.01, "<= 1%"), "itl_err_c1": (0.005, "<= 0.5%"),
    "itl_err_c16": (0.01, "<= 1%"), "itl_err_c64": (0.01, "<= 1%"),
}
CAPACITY_RATIO_TARGET = 3.0  # decodescope's capacity per core vs AIPerf's
HTTPX = "decodescope/httpx"  # the same client forced onto httpx (https, proxies; before h1.py)


@dataclass
class Level:
    """One load level: `runs` client invocations, one after another, each one wave of
    `concurrency` requests (AIPerf deadlocks under SCHED_FIFO when it waits for a request to
    finish before sending the next: its timing manager spins on the worker's core)."""

    step_rate_hz: float
    concurrency: int
    max_tokens: int
    runs: int = 1
    batch_slowdown: float = 0.0
    replay: bool = False  # served by the replay emitter (capacity), not the simulator

    def sim_args(self) -> list[str]:
        return ["--step-rate", str(self.step_rate_hz), "--batch-slowdown", str(self.batch_slowdown)]


@dataclass
class Outcome:
    client: str
    level: Level
    tokens: int
    ingest_tps: float | None
    decode_err: list[float]
    itl_err: list[float]
    lag_p50_s: float | None
    lag_p99_s: float | None
    cpu_s: float
    sim_late_p99_s: float | None
    errors: int
    offered_tps: float | None = None  # tokens the server emitted / its emit span
    emitter: list[dict[str, Any]] | None = None  # the emitter's counters (replay levels)


def body(max_tokens: int) -> dict[str, Any]:
    return {"model": MODEL, "stream": True, "max_tokens": max_tokens, "ignore_eos": True,
            "temperature": 0.0, "messages": [{"role": "user", "content": PROMPT}],
            "chat_template_kwargs": {"enable_thinking": True},
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}


def run_decodescope(sim: C.Sim | C.Replay, lv: Level, path: str) -> tuple[list[dict[str, Any]], float]:
    """One wave; CPU as the whole process used it (getrusage of the finished child)."""
    cmd = [sys.executable, str(Path(__file__).parent / "_ds_worker.py"),
           "--url", sim.url, "--body", json.dumps(body(lv.max_tokens)),
           "--concurrency", str(lv.concurrency), "--requests", str(lv.concurrency), "--path", path]
    out, cpu = C.run_client(cmd, CLIENT_TIMEOUT_S)
    return json.loads(out)["requests"], cpu


def run_aiperf(ap: _aiperf.AIPerf, sim: C.Sim | C.Replay, lv: Level) -> tuple[list[dict[str, Any]], float]:
    outdir = ap.new_outdir()
    b = body(lv.max_tokens)
    extra = {k: b[k] for k in ("ignore_eos", "temperature", "chat_template_kwargs")}
    cmd = ap.command(sim.url, MODEL, PROMPT, lv.max_tokens, lv.concurrency, lv.concurrency,
                     extra, outdir)
    _, cpu = C.run_client(cmd, CLIENT_TIMEOUT_S)
    return _aiperf.read_results(outdir), cpu


EMITTER_CPUS: list[int] = [C.SIM_CPU]  # cores of the replay emitter (--emitters)


def measure(client: str, lv: Level, ap: _aiperf.AIPerf | None) -> Outcome:
    reqs: list[dict[str, Any]] = []
    cpu = 0.0
    source: contextlib.AbstractContextManager[C.Sim | C.Replay] = (
        C.emitter(body(lv.max_tokens), lv.step_rate_hz, EMITTER_CPUS) if lv.replay
        else C.simulator(lv.sim_args()))
    emitted: list[dict[str, Any]] | None = None
    with source as sim:
        for _ in range(lv.runs):
            if client.startswith("decodescope"):
                got, used = run_decodescope(sim, lv, "httpx" if client == HTTPX else "h1")
            else:
                assert ap is not None
                got, used = run_aiperf(ap, sim, lv)
            reqs += got
            cpu += used
        truths = {r["request_id"]: sim.truth(r["request_id"]) for r in reqs if r["request_id"]}
        if isinstance(sim, C.Replay):
            emitted = sim.stats()
    lags: list[float] = []
    decode_err: list[float] = []
    itl_err: list[float] = []
    late: list[float] = []
    tokens, t_first, t_last, errors = 0, float("inf"), float("-inf"), 0
    e_first, e_last, e_tokens = float("inf"), float("-inf"), 0
    for r in reqs:
        truth = truths.get(r["request_id"])
        if r.get("error") or truth is None:
            errors += 1
            continue
        lags += C.lags_s(r["t_recv_s"], truth)
        late += [c["t_emit_monotonic_s"] - c["t_deadline_monotonic_s"] for c in truth["chunks"]]
        if truth["chunks"]:
            e_first = min(e_first, truth["chunks"][0]["t_emit_monotonic_s"])
            e_last = max(e_last, truth["chunks"][-1]["t_emit_monotonic_s"])
            e_tokens += sum(c["tokens"] for c in truth["chunks"])
        tokens += int(r["tokens"] or 0)
        t_first, t_last = min(t_first, r["t_recv_s"][0]), max(t_last, r["t_recv_s"][-1])
        for errs, got, want in ((decode_err, r["decode_rate_tps"], C.true_decode_rate(truth)),
                                (itl_err, r["itl_mean_s"], C.true_itl_mean(truth))):
            e = C.rel_error(got, want)
            if e is not None:
                errs.append(e)
    span, e_span = t_last - t_first, e_last - e_first
    return Outcome(client, lv, tokens, tokens / span if span > 0 else None, decode_err, itl_err,
                   C.percentile(lags, 50), C.percentile(lags, 99), cpu,
                   C.percentile(late, 99), errors, e_tokens / e_span if e_span > 0 else None,
                   emitted)


def capacity_levels(quick: bool) -> list[Level]:
    rates = STEP_RATES_HZ[1::2] if quick else STEP_RATES_HZ
    c = CAPACITY_CONCURRENCY
    return [Level(r, c, int(r * MAL_GUESS * CAPACITY_RUN_S), replay=True) for r in rates]


def sweep(client: str, ap: _aiperf.AIPerf | None, quick: bool) -> list[Outcome]:
    """Offered load goes up until the p99 lag fails twice in a row at one level."""
    done: list[Outcome] = []
    for lv in capacity_levels(quick):
        o = measure(client, lv, ap)
        if not _lag_ok(o):
            o = measure(client, lv, ap)  # one retry: a stray stall must not end the sweep
        done.append(o)
        _progress(o)
        if not _lag_ok(o):
            break
    return done


def _lag_ok(o: Outcome) -> bool:
    return o.errors == 0 and o.lag_p99_s is not None and o.lag_p99_s <= LAG_LIMIT_S


def _progress(o: Outcome) -> None:
    ms = lambda v: "-" if v is None else f"{v * 1e3:.3f}"  # noqa: E731
    who = "emitter" if o.level.replay else "sim"
    offered = f"  offered {o.offered_tps:8.0f} tok/s" if o.offered_tps else ""
    print(f"  {o.client:11s} c{o.level.concurrency:<3d} step {o.level.step_rate_hz:>4g} Hz: "
          f"{(o.ingest_tps or 0):8.0f} tok/s{offered}  lag p50 {ms(o.lag_p50_s)} p99 {ms(o.lag_p99_s)} ms"
          f"  cpu {o.cpu_s:.2f} s  {who} late p99 {ms(o.sim_late_p99_s)} ms", file=sys.stderr, flush=True)


# ---- summary ----------------------------------------------------------------------------
def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.4f}%"


def _rows(client: str, acc: list[Outcome], cap: list[Outcome]) -> tuple[list[list[str]], dict[str, Any]]:
    rows: list[list[str]] = []
    facts: dict[str, Any] = {}
    for o in acc:
        c = o.level.concurrency
        for name, errs in (("decode", o.decode_err), ("itl", o.itl_err)):
            key = f"{name}_err_c{c}"
            limit, label = TARGETS[key]
            worst = max(errs) if errs else None
            ok = worst is not None and worst <= limit and o.errors == 0
            label_m = "decode-rate error" if name == "decode" else "ITL error"
            rows.append([client, f"{label_m} c{c} (median / max, n={len(errs)})",
                         f"{_pct(C.percentile(errs, 50))} / {_pct(worst)}", f"max {label}",
                         "PASS" if ok else "FAIL"])
            facts[key] = {"median": C.percentile(errs, 50), "max": worst, "n": len(errs)}
        rows.append([client, f"receipt lag c{c} p50 / p99", f"{_ms(o.lag_p50_s)} / {_ms(o.lag_p99_s)}",
                     "-", "-"])
    passed = [o for o in cap if _lag_ok(o)]
    best = max(passed, key=lambda o: o.ingest_tps or 0.0) if passed else None
    bound = bool(cap) and _lag_ok(cap[-1])  # never failed: the sweep's top level was the limit
    facts["capacity_tps"] = best.ingest_tps if best else None
    facts["capacity_sim_bound"] = bound
    cap_text = "-" if best is None else f"{'>= ' if bound else ''}{best.ingest_tps:,.0f} tok/s"
    if best is not None:
        cap_text += f" (c{best.level.concurrency}, step {best.level.step_rate_hz:g} Hz)"
    if best is not None and not bound:
        cap_text += f"; fails at {cap[-1].ingest_tps or 0:,.0f} tok/s offered {cap[-1].offered_tps or 0:,.0f}"
    rows.append([client, "capacity, 1 core (p99 lag <= 2 ms)", cap_text, "see ratio", "-"])
    return rows, facts


def overhead(cap: list[Outcome]) -> dict[str, Any]:
    """CPU per token without start-up costs: the slope of a least-squares line through
    (tokens, CPU seconds) of the capacity runs (each run pays start-up once)."""
    pts = [(float(o.tokens), o.cpu_s) for o in cap if o.tokens]
    n = len(pts)
    mx = sum(x for x, _ in pts) / n if n else 0.0
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    if n < 2 or sxx == 0:
        return {"cpu_s_per_mtok": None, "projected_tps_per_core": None, "levels": n}
    my = sum(y for _, y in pts) / n
    slope = sum((x - mx) * (y - my) for x, y in pts) / sxx
    per_m = slope * 1e6
    return {"cpu_s_per_mtok": per_m, "startup_cpu_s": my - slope * mx, "levels": n,
            "projected_tps_per_core": 1e6 / per_m if per_m > 0 else None}


def _cpu_rows(client: str, ov: dict[str, Any]) -> list[list[str]]:
    per_m, proj = ov.get("cpu_s_per_mtok"), ov.get("projected_tps_per_core")
    return [[client, "CPU s per Mtok (slope over the capacity runs)",
             "-" if per_m is None else f"{per_m:.1f} ({ov['levels']} runs)", "-", "-"],
            [client, "tokens/s per busy core (1e6 / CPU s per Mtok)",
             "-" if proj is None else f"{proj:,.0f}", "-", "-"]]


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1e3:.3f} ms"


def _ratio_rows(ds: dict[str, Any], ap: dict[str, Any]) -> list[list[str]]:
    rows = []
    a, b = ds.get("capacity_tps"), ap.get("capacity_tps")
    if a and b:
        r = a / b
        if ds["capacity_sim_bound"] and ap["capacity_sim_bound"]:
            text, ok = f"{r:.2f}x (neither failed within the sweep: undecided)", "-"
        elif ap["capacity_sim_bound"]:  # AIPerf never failed: its capacity is only a floor
            text, ok = f"<= {r:.2f}x", "FAIL" if r < CAPACITY_RATIO_TARGET else "-"
        else:
            text = f"{'>= ' if ds['capacity_sim_bound'] else ''}{r:.2f}x"
            text += " (undecided: decodescope never failed)" if ds["capacity_sim_bound"] else " (decided: both failed)"
            ok = "PASS" if r >= CAPACITY_RATIO_TARGET else ("-" if ds["capacity_sim_bound"] else "FAIL")
        rows.append(["decodescope", "capacity vs AIPerf, measured", text, f">= {CAPACITY_RATIO_TARGET:g}x", ok])
    a, b = ds.get("projected_tps_per_core"), ap.get("projected_tps_per_core")
    if a and b:
        rows.append(["decodescope", "capacity vs AIPerf, per busy core (CPU)", f"{a / b:.2f}x",
                     f">= {CAPACITY_RATIO_TARGET:g}x", "PASS" if a / b >= CAPACITY_RATIO_TARGET else "FAIL"])
    return rows


def print_table(rows: list[list[str]], head: list[str] | None = None) -> None:
    head = head or ["client", "metric", "value", "target", "pass"]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    line = lambda r: " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True))  # noqa: E731
    print(line(head))
    print("-+-".join("-" * w for w in widths))
    for r in rows:
        print(line(r))


def side_by_side(quiet: list[list[str]], loaded: list[list[str]], n_load: int) -> None:
    """One table of two passes: value and pass of each row, quiet and under load."""
    by_key = {(r[0], r[1]): r for r in loaded}
    rows = []
    for r in quiet:
        o = by_key.get((r[0], r[1]), ["", "", "-", "", "-"])
        rows.append([r[0], r[1], r[2], o[2], r[3], r[4], o[4]])
    print_table(rows, ["client", "metric", "quiet", f"load {n_load}", "target", "pass quiet",
                       f"pass load {n_load}"])


def set_sched(mode: str) -> str:
    """fifo: simulator and clients run SCHED_FIFO on their own cores, so nothing else on a
    shared machine can preempt them (every client run is then one wave: see Level). nice:
    simulator SCHED_FIFO, clients nice -20. Both need root; normal changes nothing."""
    if mode == "normal" or os.geteuid() != 0:
        return "as started (no priority change)"
    C.SIM_PRIORITY[:] = ["chrt", "-f", "10"]
    if mode == "fifo":
        C.CLIENT_PRIORITY[:] = ["chrt", "-f", "10"]
        return "simulator and clients SCHED_FIFO 10"
    C.CLIENT_PRIORITY[:] = ["nice", "-n", "-20"]
    return "simulator SCHED_FIFO 10, clients nice -20"


def emitter_ceiling() -> dict[str, Any]:
    """The replay emitter flat out (no waiting between ticks) to a sink client that reads
    without parsing (bench/_drain.py, on the client core): tokens per second it emits, and
    its CPU seconds per million tokens."""
    b = body(CEILING_TOKENS)
    with C.emitter(b, 0, EMITTER_CPUS) as em:
        cmd = [sys.executable, str(Path(__file__).parent / "_drain.py"), "--url", em.url,
               "--body", json.dumps(b), "--concurrency", str(CAPACITY_CONCURRENCY)]
        out, _ = C.run_client(cmd, CLIENT_TIMEOUT_S)
        n = int(json.loads(out)["streams"])
        ids = [p.stem for p in em.truth_dir.glob("chatcmpl-*.json")]
        for _ in range(200):  # the last truth files are written after the last tick
            if len(ids) >= n:
                break
            time.sleep(0.05)
            ids = [p.stem for p in em.truth_dir.glob("chatcmpl-*.json")]
        truths = [em.truth(i) for i in ids]
        stats = em.stats()
    emits = [c["t_emit_monotonic_s"] for t in truths for c in t["chunks"]]
    tokens = sum(c["tokens"] for t in truths for c in t["chunks"])
    span = max(emits) - min(emits) if emits else 0.0
    cpu = sum(s["emit_cpu_s"] for s in stats)
    return {"tps": tokens / span if span > 0 else None, "tokens": tokens, "streams": len(truths),
            "cpu_s_per_mtok": cpu / tokens * 1e6 if tokens else None, "procs": len(stats)}


def _ceiling_row(ceil: dict[str, Any]) -> list[str]:
    tps, per_m = ceil.get("tps"), ceil.get("cpu_s_per_mtok")
    text = "-" if tps is None else f"{tps:,.0f} tok/s"
    if per_m is not None:
        text += f" ({per_m:.2f} CPU s per Mtok)"
    return ["emitter", f"ceiling, {ceil.get('procs', 1)} process(es), flat out (c{CAPACITY_CONCURRENCY}, drain client)",
            text, "> client capacities", "-"]


@contextlib.contextmanager
def busy_loops(n: int) -> Iterator[None]:
    """`n` processes spinning on any core at normal priority: a loaded machine on demand."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def bench_pass(args: argparse.Namespace, ap: _aiperf.AIPerf | None, n_load: int
               ) -> tuple[list[list[str]], dict[str, Any]]:
    """Everything once: the emitter's ceiling, then every client's accuracy and capacity."""
    clients = ["decodescope", HTTPX] + (["aiperf"] if ap else [])
    if args.no_httpx:
        clients.remove(HTTPX)
    accuracy = ACCURACY if not args.quick else ((1, 2), (16, 1), (64, 1))
    rows: list[list[str]] = []
    facts: dict[str, dict[str, Any]] = {}
    results: dict[str, Any] = {"clients": {}, "load": n_load}
    with busy_loops(n_load):
        time.sleep(2.0 if n_load else 0.0)  # let the load average see them
        t0, load0 = time.monotonic(), os.getloadavg()
        print(f"# pass with {n_load} busy loops: load average {load0[0]:.2f} {load0[1]:.2f} "
              f"{load0[2]:.2f}", file=sys.stderr, flush=True)
        ceil = emitter_ceiling()
        results["emitter_ceiling"] = ceil
        print(f"  emitter ceiling: {ceil['tps'] or 0:,.0f} tok/s flat out", file=sys.stderr, flush=True)
        for client in clients:
            acc = []
            for c, runs in accuracy:
                acc.append(measure(client, Level(40, c, MAX_TOKENS, runs, batch_slowdown=0.01), ap))
                _progress(acc[-1])
            cap = sweep(client, ap, args.quick)
            r, facts[client] = _rows(client, acc, cap)
            ov = overhead(cap)
            facts[client].update({k: ov[k] for k in ("cpu_s_per_mtok", "projected_tps_per_core")})
            rows += r + _cpu_rows(client, ov)
            results["clients"][client] = {"facts": facts[client], "overhead": ov,
                                          "accuracy": [asdict(o) for o in acc],
                                          "capacity": [asdict(o) for o in cap]}
        load1 = os.getloadavg()
    rows.sort(key=lambda row: clients.index(row[0]))  # stable: each client's rows together
    rows.insert(0, _ceiling_row(ceil))
    if "aiperf" in facts:
        rows += _ratio_rows(facts["decodescope"], facts["aiperf"])
    rows.append(["machine", "load average (1 min) before / after",
                 f"{load0[0]:.2f} / {load1[0]:.2f} ({n_load} busy loops)", "-", "-"])
    results.update({"load_before": load0, "load_after": load1, "seconds": time.monotonic() - t0,
                    "rows": rows})
    return rows, results


def main(argv: list[str] | None = None) -> int:
    ap_ = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap_.add_argument("--aiperf", help="the aiperf executable (default: bench/.venv-aiperf/bin/aiperf)")
    ap_.add_argument("--no-aiperf", action="store_true", help="decodescope only")
    ap_.add_argument("--no-httpx", action="store_true", help="leave out decodescope's httpx path")
    ap_.add_argument("--quick", action="store_true", help="fewer levels, c1 with 2 requests")
    ap_.add_argument("--sched", choices=["fifo", "nice", "normal"], default="fifo",
                     help="priorities (default: simulator and clients SCHED_FIFO; needs root)")
    ap_.add_argument("--load", type=int, default=0, metavar="N",
                     help="run N busy loops (normal priority) during the whole bench")
    ap_.add_argument("--compare-load", type=int, default=0, metavar="N",
                     help="two passes, quiet and with N busy loops; both tables side by side")
    ap_.add_argument("--emitters", type=int, default=1, metavar="N",
                     help="replay emitter processes, on cores 1..N (default 1)")
    ap_.add_argument("--json", type=Path, help="also write every result here")
    args = ap_.parse_args(argv)
    C.check_clocks()
    if C.cpus() < 1 + args.emitters:
        raise SystemExit(f"bench needs {1 + args.emitters} cores: one for the client, "
                         f"{args.emitters} for the simulator / emitter")
    EMITTER_CPUS[:] = list(range(C.SIM_CPU, C.SIM_CPU + args.emitters))
    sched = set_sched(args.sched)
    exe = None if args.no_aiperf else _aiperf.find_aiperf(args.aiperf)
    if not args.no_aiperf and exe is None:
        raise SystemExit("aiperf not found: install it into bench/.venv-aiperf (see docs/performance.md) "
                         "or pass --aiperf PATH / --no-aiperf")
    ap = _aiperf.AIPerf(exe, _aiperf.tempdir()) if exe else None
    t0 = time.monotonic()
    print(f"# {platform.processor() or platform.machine()}, {C.cpus()} cores, python "
          f"{platform.python_version()}, scheduling: {sched}, load {os.getloadavg()[0]:.2f}; "
          f"AIPerf: {ap.version if ap else 'skipped'}", file=sys.stderr, flush=True)
    results: dict[str, Any] = {"sched": sched, "passes": []}
    if args.compare_load:
        quiet, r0 = bench_pass(args, ap, 0)
        loaded, r1 = bench_pass(args, ap, args.compare_load)
        results["passes"] = [r0, r1]
        side_by_side(quiet, loaded, args.compare_load)
    else:
        rows, r = bench_pass(args, ap, args.load)
        results["passes"] = [r]
        print_table(rows)
    print(f"# {time.monotonic() - t0:.0f} s; scheduling: {sched}", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
