"""Where an A/B's pair noise comes from (issue 36): two identical llama-servers, one
`decodescope ab` of N pairs for each trial length, then per trial length the sd of the pair
log ratios of the client's steady-state rates and of the engine's own rates (llama.cpp's
per-request `timings.predicted_per_second`), and each trial's step intervals (the gaps
between streamed chunks longer than half the mean time per token: median and 90th
percentile). If the client's timing made the noise,
the engine's pairs would be tighter; if stalls made it, the 90th percentile would jump in the
slow trials; if it averages out over a trial, longer trials would be tighter.

Here (the embedded engine, `decodescope engine install`):

    flock /tmp/ds-engine.lock python bench/bench_pair_noise.py --tokens 96,256 --pairs 16

On a GPU host (llama.cpp built with CUDA, see bench/bench_ab_gpu.py for the device chain;
`--pin` puts A and B on CPUs 4-7 and 8-11 with taskset, the client on 0-3 by the caller):

    python bench/bench_pair_noise.py --server BIN --model GGUF --template JINJA \
        --tokens 96,384,1024,2048 --pairs 24 --out $OUT/noise.json

Prints a line per trial length; `--out` keeps every trial's numbers (JSON).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ab_gpu import cli  # noqa: E402
from bench_ab_llamacpp import CALIBER  # noqa: E402

from decodescope.store.connect import open_store  # noqa: E402
from decodescope.store.runs import get_run  # noqa: E402

PIN = {"A": "4-7", "B": "8-11"}


def trials(store_path: str, run_id: int) -> list[dict[str, Any]]:
    """A run's clean trials in order: client rate, engine rate, step-interval figures."""
    with open_store(store_path) as st:
        run = get_run(st, run_id)
    out = []
    for t in run.trials:
        if t.status != "ok" or not t.requests or not t.result:
            continue
        tr, m = t.requests[0], t.result["requests"][0]
        ts = [c.t_recv_s for c in tr.chunks]
        # a step's tokens arrive together: a gap of over half the mean time per token
        # between two chunks is a step boundary
        per_token = (ts[-1] - ts[0]) / max(len(ts) - 1, 1) if ts else 0.0
        gaps = sorted(b - a for a, b in zip(ts, ts[1:], strict=False) if b - a > 0.5 * per_token)
        out.append({"client": m.get("decode_rate"),
                    "engine": (tr.timings or {}).get("predicted_per_second"),
                    "steps": len(gaps),
                    "gap_median_ms": 1e3 * statistics.median(gaps) if gaps else None,
                    "gap_p90_ms": 1e3 * gaps[int(0.9 * len(gaps))] if gaps else None})
    return out


def pair_sd(a: list[dict[str, Any]], b: list[dict[str, Any]], key: str) -> dict[str, Any]:
    d = [math.log(y[key] / x[key]) for x, y in zip(a, b, strict=False) if x[key] and y[key]]
    if len(d) < 3:
        return {"pairs": len(d), "sd_pct": None, "mean_pct": None}
    return {"pairs": len(d), "sd_pct": 100 * statistics.stdev(d),
            "mean_pct": 100 * statistics.fmean(d)}


def start_servers(args: argparse.Namespace, stack: ExitStack, tmp: Path) -> list[str]:
    if args.server is None:
        from decodescope.engines import server
        from decodescope.engines.install import find_install
        from decodescope.engines.server import EngineSettings
        install = find_install()
        if install is None:
            raise SystemExit("the embedded engine is not installed: run "
                             "`decodescope engine install`, or give --server/--model")
        return [stack.enter_context(server.running_engine(
            EngineSettings(port=0, threads=args.threads, spec="ngram"), install=install,
            state_dir=tmp / "engines")).url for _ in range(2)]
    from bench_ab_gpu import Server
    ns = argparse.Namespace(server=args.server, model=args.model, template=args.template,
                            workdir=str(tmp))
    urls = []
    for name, port in (("A", 8101), ("B", 8102)):
        s = Server(ns, name, port, [], wrap=["taskset", "-c", PIN[name]] if args.pin else None)
        stack.callback(s.stop)
        urls.append(s.url)
    return urls


def main_bench() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", default="96,256", help="trial lengths (tokens), comma-separated")
    ap.add_argument("--pairs", type=int, default=16)
    ap.add_argument("--threads", type=int, default=None, help="embedded engine: -t")
    ap.add_argument("--server", help="a llama-server binary (GPU host); default: embedded")
    ap.add_argument("--model")
    ap.add_argument("--template")
    ap.add_argument("--pin", action="store_true", help="taskset A and B to CPUs 4-7 / 8-11")
    ap.add_argument("--budget-s", type=float, default=None)
    ap.add_argument("--out", help="JSON of every trial")
    args = ap.parse_args()
    t0 = time.monotonic()
    res: dict[str, Any] = {"args": vars(args), "rows": []}
    with tempfile.TemporaryDirectory(prefix="pair-noise-") as td, ExitStack() as stack:
        tmp = Path(td)
        urls = start_servers(args, stack, tmp)
        for tok in (int(x) for x in args.tokens.split(",")):
            if args.budget_s is not None and time.monotonic() - t0 > args.budget_s:
                res["stopped"] = f"budget: before {tok}-token trials"
                break
            cal, store = tmp / f"c{tok}.toml", str(tmp / f"r{tok}.sqlite")
            cal.write_text(CALIBER.replace("{tokens}", str(tok)))
            t1 = time.monotonic()
            _, v, _ = cli(["ab", *urls, "--caliber", str(cal), "--store", store,
                           "--no-fingerprint", "--min-pairs", str(args.pairs), "--max-pairs",
                           str(args.pairs), "--looks", "1", "--json"])
            a, b = trials(store, v["run_a"]), trials(store, v["run_b"])
            row: dict[str, Any] = {"tokens": tok, "wall_s": time.monotonic() - t1,
                   "client": pair_sd(a, b, "client"), "engine": pair_sd(a, b, "engine"),
                   "A": a, "B": b}
            res["rows"].append(row)
            meds = [x["gap_median_ms"] for x in a if x["gap_median_ms"]]
            print(f"{tok} tokens, {row['client']['pairs']} pairs, {row['wall_s']:.0f} s: pair "
                  f"sd client {row['client']['sd_pct']:.1f} %, engine "
                  f"{row['engine']['sd_pct']:.1f} %; A's step interval median "
                  f"{min(meds):.1f}-{max(meds):.1f} ms over its trials", flush=True)
            if args.out:
                Path(args.out).write_text(json.dumps(res, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main_bench()
