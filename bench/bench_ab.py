"""`decodescope ab` both ways on the simulator: how often identical stacks are called
NO_CHANGE within 40 pairs (and never an alarm), and how often a −5 % change is called
REGRESSION within 60 s; median pairs and seconds of each.

Three `decodescope sim` processes run side by side: A, B identical to A (same configuration
and seed), and C at a 5 % lower step rate (38 vs 40 Hz: −5 % decode). Repetitions alternate
the two scenarios: A vs B ("identical": every REGRESSION / IMPROVEMENT is a false alarm) and
A vs C ("−5 %"). Each repetition is one `decodescope ab A X --caliber short` with the default
design (3 % minimum effect, α = 5 %, Pocock-type spending, looks after 6 … 40 pairs),
scraping on (per-pair contamination checks), fingerprints off. Trials are short (96-token
greedy rewrite at time scale TS) to keep the bench light.

    python bench/bench_ab.py [--reps 20] [--time-scale 0.25] [--out FILE]

Prints one markdown table.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import simulator  # noqa: E402

from decodescope.cli.main import main  # noqa: E402

SHORT = """name = "bench-ab"
version = 1
description = "Short greedy rewrite for the A/B bench."
task_class = "rewrite"
thinking = false
endpoint = "chat"
concurrency = 1
[prompt]
content_class = "code"
material = "code"
material_seed = 7
blocks = 1
task = "Rewrite the code above exactly."
[output]
max_tokens = 96
min_tokens = 96
ignore_eos = true
steady_state_start = 16
[sampling]
temperature = 0.0
top_p = 1.0
seed = 7
"""

ALARM = ("REGRESSION", "IMPROVEMENT")
WITHIN_PAIRS = 40
WITHIN_S = 60.0


def ab(a: str, b: str, cal: str, store: str) -> dict[str, Any]:
    """One `decodescope ab A B` of two running servers."""
    return _ab([a, b], cal, store)


def ab_launch(cmd_a: str, cmd_b: str, cal: str, store: str, *extra: str) -> dict[str, Any]:
    """One `decodescope ab --launch-a CMD_A --launch-b CMD_B`: fresh servers per start. Its
    seconds are the command's whole wall time (every server start included), and its pairs
    every pair it took."""
    r = _ab(["--launch-a", cmd_a, "--launch-b", cmd_b, *extra], cal, store)
    r["seconds"] = r["wall_s"]
    return r


def _ab(sides: list[str], cal: str, store: str) -> dict[str, Any]:
    out, err = io.StringIO(), io.StringIO()
    t0 = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["ab", *sides, "--caliber", cal, "--store", store, "--no-fingerprint",
                     "--json"])
    wall = time.monotonic() - t0
    if not out.getvalue().strip():
        raise SystemExit(f"ab gave no verdict (exit {code}): {err.getvalue()[-2000:]}")
    v = json.loads(out.getvalue())
    return {"verdict": v["verdict"], "cause": v["cause"], "exit": code, "pairs": v["pairs"],
            "retaken": len(v["retaken"]), "seconds": v["seconds"], "wall_s": wall,
            "rel": v["look"]["rel"] if v["look"] else None,
            "sd": v["look"]["sd"] if v["look"] else None, "headline": v["headline"],
            "unit": v.get("unit", "pairs"), "starts": len(v.get("starts") or []),
            "log_ratios": v.get("pair_log_ratios") or v.get("log_ratios")}


def summarize(rows: list[dict[str, Any]], changed: bool) -> dict[str, Any]:
    kinds = [r["verdict"] for r in rows]
    if changed:
        hit = sum(r["verdict"] == "REGRESSION" and r["seconds"] <= WITHIN_S for r in rows)
    else:
        hit = sum(r["verdict"] == "NO_CHANGE" and r["pairs"] <= WITHIN_PAIRS for r in rows)
    return {
        "reps": len(rows), "rate": hit / len(rows),
        "false_alarms": None if changed else sum(k in ALARM for k in kinds),
        "wrong_direction": sum(k == "IMPROVEMENT" for k in kinds) if changed else None,
        "verdicts": {k: kinds.count(k) for k in sorted(set(kinds))},
        "median_pairs": statistics.median(r["pairs"] for r in rows),
        "median_s": statistics.median(r["seconds"] for r in rows),
        "median_rel": statistics.median(r["rel"] for r in rows if r["rel"] is not None),
        "median_sd": statistics.median(r["sd"] for r in rows if r["sd"] is not None),
        "retaken": sum(r["retaken"] for r in rows),
    }


def table(s_same: dict[str, Any], s_slow: dict[str, Any]) -> str:
    def verdicts(s: dict[str, Any]) -> str:
        return ", ".join(f"{k} {n}" for k, n in s["verdicts"].items())

    def pc(x: float) -> str:
        return f"{100 * x:+.1f} %".replace("-", "−") if round(100 * x, 1) != 0 else "0.0 %"

    return "\n".join([
        "| scenario | reps | decided right (target ≥ 90 %) | false alarms (target 0) | verdicts "
        "| median pairs | median s | median decode Δ | median pair sd | pairs re-taken |",
        "|---|---|---|---|---|---|---|---|---|---|",
        f"| identical stacks | {s_same['reps']} | NO_CHANGE within {WITHIN_PAIRS} pairs: "
        f"{100 * s_same['rate']:.0f} % | {s_same['false_alarms']} | {verdicts(s_same)} | "
        f"{s_same['median_pairs']:g} | {s_same['median_s']:.1f} | {pc(s_same['median_rel'])} | "
        f"{100 * s_same['median_sd']:.1f} % | {s_same['retaken']} |",
        f"| −5 % change | {s_slow['reps']} | REGRESSION within {WITHIN_S:.0f} s: "
        f"{100 * s_slow['rate']:.0f} % | — | {verdicts(s_slow)} | {s_slow['median_pairs']:g} | "
        f"{s_slow['median_s']:.1f} | {pc(s_slow['median_rel'])} | "
        f"{100 * s_slow['median_sd']:.1f} % | {s_slow['retaken']} |",
    ])


def main_bench() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20, help="repetitions per scenario")
    ap.add_argument("--time-scale", type=float, default=0.25)
    ap.add_argument("--out", default=None, help="write every repetition here (JSON)")
    args = ap.parse_args()
    base = ["--time-scale", str(args.time_scale), "--seed", "5"]
    rows: dict[str, list[dict[str, Any]]] = {"same": [], "slow": []}
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-ab-") as tmp:
        cal = str(Path(tmp) / "short.toml")
        Path(cal).write_text(SHORT)
        store = str(Path(tmp) / "runs.sqlite")
        with simulator(base, cpu=None) as sa, simulator(base, cpu=None) as sb, \
                simulator([*base, "--step-rate", "38"], cpu=None) as sc:
            for rep in range(args.reps):
                for name, other in (("same", sb.url), ("slow", sc.url)):
                    r = ab(sa.url, other, cal, store)
                    rows[name].append(r)
                    print(f"rep {rep + 1} {name}: {r['verdict']} after {r['pairs']} pairs, "
                          f"{r['seconds']:.1f} s", file=sys.stderr)
    s_same, s_slow = summarize(rows["same"], False), summarize(rows["slow"], True)
    if args.out:
        Path(args.out).write_text(json.dumps({"same": s_same, "slow": s_slow, "rows": rows},
                                             indent=1))
    print(table(s_same, s_slow))
    print(f"\n{args.reps} repetitions per scenario, {time.monotonic() - t0:.0f} s in all; "
          f"time scale {args.time_scale}; 96-token trials.")


if __name__ == "__main__":
    main_bench()
