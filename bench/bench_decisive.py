"""Decisive comparisons: false alarms, power and cost of (a) two separate runs judged with the
learned run-to-run spread and (b) the interleaved A/B with its sequential stop.

Three servers run side by side: A, B identical to A, and B 10 % slower; the two scenarios
alternate repetition by repetition. Scenario "unchanged": A vs the identical B (every
REGRESSION / IMPROVEMENT is a false alarm). Scenario "−10 %": B is slower — on the simulator
its step rate is 10 % lower (36 vs 40 Hz); on llama.cpp either its synthetic draft length is
shorter (`--spec synth` 3.0 vs `--slower-synth`, default 2.6: measured −27 % on this host,
not −10 %; 2.9, and draft length 10 at 3.0, gave 2.46 tokens per step against 3.0's 2.91 in
the bench's caliber, 2.8 measured −21 … −29 %: no synthetic setting tried lands near −10 %) or, with `--slower-cpus C`, it is A's configuration
held to C CPUs by a CFS quota (cgroup, root; 1.87 of 2 cores measured about −10 % here): the
same stack with less compute. The measured change is printed. For each scenario and each of
R repetitions, alternately:

(a) probe A once and B once (T trials each, fingerprints on) and `triage B --baseline A`
    with the spread learned from the store (a calibration of C runs per server first, via
    `decodescope spread`; the repetitions' own runs join it as they come); runs needed =
    1 per side when decided, else the "N runs per side for ±5 %" the verdict says;
(b) `decodescope ab A B` (minimum effect 5 %, default design): pairs to its stop.

    python bench/bench_decisive.py --target sim [--reps 20]
    flock /tmp/ds-engine.lock python bench/bench_decisive.py --target llamacpp [--reps 20]
        [--slower-cpus 1.87]

The table (markdown) goes to stdout and docs/methodology.md; --out FILE keeps every rep.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import simulator  # noqa: E402

from decodescope.cli.main import main  # noqa: E402

SHORT = """name = "bench-decisive"
version = 1
description = "Short greedy rewrite for the decisive-comparison bench."
task_class = "rewrite"
thinking = false
endpoint = "chat"
concurrency = 1
[prompt]
content_class = "code"
material = "code"
material_seed = 7
blocks = 1
task = "Rewrite the code above exactly, keeping every line."
[output]
max_tokens = {tokens}
min_tokens = {tokens}
ignore_eos = true
steady_state_start = 16
[sampling]
temperature = 0.0
top_p = 1.0
seed = 7
"""
ALARM = ("REGRESSION", "IMPROVEMENT")


def cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(list(argv))
    return code, out.getvalue()


@contextlib.contextmanager
def cpu_quota(pid: int, cpus: float, name: str) -> Iterator[None]:
    """Hold the process (every thread) to `cpus` CPUs with a CFS quota over 10 ms periods
    (cgroup v1 `cpu` or v2 `cpu.max`): the same server with less compute, a real slowdown of
    the stack. Needs root; the cgroup is removed afterwards."""
    period = 10_000
    quota = int(round(cpus * period))
    v1, v2 = Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup")
    if (v1 / "cpu.cfs_quota_us").exists():
        cg = v1 / name
        cg.mkdir(exist_ok=True)
        (cg / "cpu.cfs_period_us").write_text(str(period))
        (cg / "cpu.cfs_quota_us").write_text(str(quota))
    elif (v2 / "cgroup.controllers").exists() and "cpu" in (v2 / "cgroup.controllers").read_text():
        cg = v2 / name
        cg.mkdir(exist_ok=True)
        (cg / "cpu.max").write_text(f"{quota} {period}")
    else:
        sys.exit("--slower-cpus needs a cgroup cpu controller (v1 cpu or v2 cpu.max) and root")
    (cg / "cgroup.procs").write_text(str(pid))
    try:
        yield
    finally:
        # the server has exited by now (or is moved back to the root group): drop the group
        with contextlib.suppress(OSError):
            for task in (cg / "cgroup.procs").read_text().split():
                ((cg.parent) / "cgroup.procs").write_text(task)
            cg.rmdir()


@contextlib.contextmanager
def servers(target: str, state: Path, slower_synth: float = 2.6,
            slower_cpus: float | None = None) -> Iterator[tuple[str, str, str]]:
    """A, B identical to A, and B 10 % slower: all three up at once (one is probed at a time)."""
    if target == "sim":
        base = ["--time-scale", "0.5", "--seed", "5"]
        with simulator(base, cpu=None) as sa, simulator(base, cpu=None) as sb, \
                simulator([*base, "--step-rate", "36"], cpu=None) as sc:
            yield sa.url, sb.url, sc.url
        return
    from decodescope.engines import server
    from decodescope.engines.install import find_install
    from decodescope.engines.server import EngineSettings

    install = find_install()
    if install is None:
        sys.exit("embedded engine not installed: run `decodescope engine install`")
    made = []
    synth_c = 3.0 if slower_cpus else slower_synth
    for name, synth in (("a", 3.0), ("b", 3.0), ("c", synth_c)):
        (state / name).mkdir(exist_ok=True)
        made.append((EngineSettings(port=0, threads=2, spec="synth", spec_synth_len=synth),
                     state / name))
    with server.running_engine(made[0][0], install=install, state_dir=made[0][1]) as ea, \
            server.running_engine(made[1][0], install=install, state_dir=made[1][1]) as eb, \
            server.running_engine(made[2][0], install=install, state_dir=made[2][1]) as ec, \
            (cpu_quota(ec.pid, slower_cpus, f"dsbench-{ec.pid}")
             if slower_cpus else contextlib.nullcontext()):
        yield ea.url, eb.url, ec.url


def probe(url: str, cal: str, store: str, trials: int, label: str) -> int:
    code, out = cli("probe", url, "--caliber", cal, "--trials", str(trials), "--store", store,
                    "--label", f"rep={label}", "--json")
    return int(json.loads(out)["id"])


RUNS_RE = re.compile(r"(\d+) runs per side[^;—]*?for ±5%")


def separate(a: str, b: str, cal: str, store: str, trials: int, rep: str) -> dict[str, Any]:
    t0 = time.monotonic()
    ra = probe(a, cal, store, trials, rep + "a")
    rb = probe(b, cal, store, trials, rep + "b")
    code, out = cli("triage", str(rb), "--baseline", str(ra), "--store", store,
                    "--min-effect", "5", "--json")
    v = json.loads(out)
    spread = next((n for n in v["notes"] if n.startswith("Between-run term")), "")
    need = 1
    if v["verdict"] == "INCONCLUSIVE" or (v["verdict"] == "NO_CHANGE" and any(
            n.startswith("What would decide") for n in v["notes"])):
        m = next((RUNS_RE.search(n) for n in v["notes"] if RUNS_RE.search(n)), None)
        need = int(m.group(1)) if m else 1000
    return {"verdict": v["verdict"], "rel": v["changes"]["decode"]["rel"],
            "ci": [v["changes"]["decode"]["ci_lo"], v["changes"]["decode"]["ci_hi"]],
            "runs_needed": need, "spread": spread, "seconds": time.monotonic() - t0}


def interleaved(a: str, b: str, cal: str, store: str, max_pairs: int) -> dict[str, Any]:
    t0 = time.monotonic()
    code, out = cli("ab", a, b, "--caliber", cal, "--store", store, "--min-effect", "5",
                    "--max-pairs", str(max_pairs), "--json")
    v = json.loads(out)
    return {"verdict": v["verdict"], "pairs": v["pairs"],
            "rel": v["look"]["rel"] if v["look"] else None, "stopped": v["stopped"],
            "same_host": v["same_host"], "seconds": time.monotonic() - t0}


def summarize(rows: list[dict[str, Any]], changed: bool, key: str) -> dict[str, Any]:
    kinds = [r["verdict"] for r in rows]
    alarms = sum(k in ALARM for k in kinds)
    hits = sum(k == "REGRESSION" for k in kinds)
    need = [r[key] for r in rows]
    rels = [r["rel"] for r in rows if r["rel"] is not None]
    return {
        "reps": len(rows),
        "false_alarms": None if changed else alarms,
        "power": hits / len(rows) if changed else None,
        "wrong_direction": sum(k == "IMPROVEMENT" for k in kinds) if changed else None,
        "verdicts": {k: kinds.count(k) for k in sorted(set(kinds))},
        "median_need": statistics.median(need),
        "median_rel": statistics.median(rels) if rels else None,
        "median_s": statistics.median(r["seconds"] for r in rows),
    }


def main_bench() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", choices=["sim", "llamacpp"], default="sim")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--trials", type=int, default=3, help="trials per separate run")
    ap.add_argument("--cal-runs", type=int, default=6, help="spread calibration runs per server")
    ap.add_argument("--max-pairs", type=int, default=40)
    ap.add_argument("--tokens", type=int, default=96, help="output tokens per trial")
    ap.add_argument("--scenarios", default="unchanged,minus10")
    ap.add_argument("--slower-synth", type=float, default=2.6,
                    help="llama.cpp: the slower B's --spec-synth-len (A's is 3.0); pick the "
                         "value that measures about −10 %% on this host")
    ap.add_argument("--slower-cpus", type=float, default=None,
                    help="llama.cpp: instead, B is A's configuration held to this many CPUs by "
                         "a CFS quota (cgroup; root): e.g. 1.8 of 2 cores")
    ap.add_argument("--out", default=None, help="write every repetition as JSON here")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="stop adding repetitions after this many seconds (said in the output)")
    a = ap.parse_args()
    results: dict[str, Any] = {"target": a.target, "args": vars(a), "scenarios": {}}
    t_all = time.monotonic()
    scens = a.scenarios.split(",")
    rows: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {
        s_: ([], []) for s_ in scens}
    with tempfile.TemporaryDirectory() as tmp:
        cal = str(Path(tmp) / "short.toml")
        Path(cal).write_text(SHORT.format(tokens=a.tokens))
        store = str(Path(tmp) / "runs.sqlite")
        with servers(a.target, Path(tmp), a.slower_synth, a.slower_cpus) as (ua, ub, uc):
            for u in (ua, ub, uc):
                cli("spread", u, "--caliber", cal, "--runs", str(a.cal_runs), "--trials",
                    str(a.trials), "--wait", "0", "--store", store, "--json")
            for r in range(a.reps):
                if a.budget_s and time.monotonic() - t_all > a.budget_s:
                    print(f"time budget {a.budget_s:g} s spent after {r} repetitions",
                          file=sys.stderr, flush=True)
                    break
                for scen in scens:  # the scenarios alternate: both see the same hours
                    b = ub if scen == "unchanged" else uc
                    sep, inter = rows[scen]
                    sep.append(separate(ua, b, cal, store, a.trials, f"{scen}{r}"))
                    inter.append(interleaved(ua, b, cal, store, a.max_pairs))
                    print(f"{scen} rep {r + 1}/{a.reps}: separate {sep[-1]['verdict']} "
                          f"(needs {sep[-1]['runs_needed']} runs/side), A/B "
                          f"{inter[-1]['verdict']} after {inter[-1]['pairs']} pairs",
                          file=sys.stderr, flush=True)
    for scen, (sep, inter) in rows.items():
        if not sep:
            continue
        changed = scen == "minus10"
        results["scenarios"][scen] = {
            "separate": summarize(sep, changed, "runs_needed"),
            "interleaved": summarize(inter, changed, "pairs"),
            "separate_reps": sep, "interleaved_reps": inter,
            "spread_seen": sep[-1]["spread"],
        }
    results["seconds"] = time.monotonic() - t_all
    if a.out:
        Path(a.out).write_text(json.dumps(results, indent=2))
    print(table(results))


def table(res: dict[str, Any]) -> str:
    done = min((s["separate"]["reps"] for s in res["scenarios"].values()), default=0)
    lines = [f"target: {res['target']}, {done} of {res['args']['reps']} repetitions per scenario, "
             f"{res['args']['tokens']} output tokens per trial, {res['args']['trials']} trials "
             f"per separate run, {res['args']['cal_runs']} calibration runs per server; "
             f"{res['seconds'] / 60:.1f} min", "",
             "| method | scenario | false alarms | power (−10 %) | verdicts | median runs or "
             "pairs needed | median decode Δ | median s per comparison |",
             "|---|---|---|---|---|---|---|---|"]
    for scen, s in res["scenarios"].items():
        for method, unit in (("separate", "runs/side"), ("interleaved", "pairs")):
            x = s[method]
            fa = "—" if x["false_alarms"] is None else f"{x['false_alarms']} / {x['reps']}"
            pw = "—" if x["power"] is None else f"{100 * x['power']:.0f} %"
            vs = ", ".join(f"{k} {n}" for k, n in x["verdicts"].items())
            rel = ("—" if x["median_rel"] is None
                   else f"{100 * x['median_rel']:+.1f} %".replace("-", "−"))
            name = ("(a) two separate runs, learned spread" if method == "separate"
                    else "(b) interleaved A/B, sequential")
            lines.append(f"| {name} | {scen} | {fa} | {pw} | {vs} | {x['median_need']:g} "
                         f"{unit} | {rel} | {x['median_s']:.1f} |")
    for scen, s in res["scenarios"].items():
        if s.get("spread_seen"):
            lines.append(f"\n{scen}: {s['spread_seen']}")
    return "\n".join(lines)


if __name__ == "__main__":
    main_bench()
