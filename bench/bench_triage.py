"""How long `decodescope triage RUN --baseline RUN` takes between two stored runs.

Target: under one second. Two stored runs of `trials` trials each, every trial with one request
of `tokens` token-carrying chunks (raw traces stored, as a real probe stores them) and an engine
window per trial; results derived by the real analysis. Timed: the command in-process (library
+ rendering, store open included) and as a fresh process (Python start-up and imports too).

    python bench/bench_triage.py [--trials 10] [--tokens 4000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from decodescope.analysis.run_result import analyze_run
from decodescope.caliber.resolve import resolve
from decodescope.cli.main import main
from decodescope.records.trace import Chunk, RequestTrace
from decodescope.records.window import EngineWindow
from decodescope.store import runs as sr
from decodescope.store.connect import open_store
from decodescope.store.db import Store


def make_run(store: Store, step_rate: float, mal: float, trials: int, tokens: int) -> int:
    cal = resolve("demo-code-rewrite")
    rid = sr.create_run(store, url="http://127.0.0.1:8000", model="m", engine="vllm",
                        caliber=cal.to_dict(), caliber_ref=cal.ref, caliber_identity=cal.identity,
                        labels={}, simulated=False)
    rate = step_rate * mal
    for i in range(trials):
        jitter = 1 + 0.01 * ((i * 7919) % 5 - 2)
        t0 = 1000.0 * i
        dt = 1 / (rate * jitter)
        chunks = tuple(Chunk(t0 + 0.2 + k * dt, content="x", tokens=1) for k in range(tokens))
        trace = RequestTrace(t_send_s=t0, t_headers_s=t0 + 0.01, chunks=chunks, status_code=200,
                             prompt_tokens=900, completion_tokens=tokens, reasoning_tokens=None,
                             finish_reason="length", t_done_s=chunks[-1].t_recv_s)
        dur = tokens * dt
        drafts = round(tokens / mal)
        w = EngineWindow("prometheus", "vllm", t0 + 0.2, t0 + 0.2 + dur,
                         generation_tokens=tokens, drafts=drafts, draft_tokens=drafts * 4,
                         accepted_tokens=tokens - drafts, running=1, waiting=0, flags=("trial",))
        sr.add_trial(store, rid, i, status="ok", started_at=time.time(), wall_anchor_s=0.0,
                     result={"requests": [], "findings": []}, requests=[trace], windows=[w])
    run = sr.get_run(store, rid)
    sr.update_run(store, rid, status="complete", result=analyze_run(run))
    return rid


def main_() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--tokens", type=int, default=4000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "runs.sqlite")
        with open_store(path) as st:
            base = make_run(st, 40.0, 4.5, args.trials, args.tokens)
            cur = make_run(st, 30.0, 4.5, args.trials, args.tokens)
        size_mb = os.path.getsize(path) / 1e6
        argv = ["triage", str(cur), "--baseline", str(base), "--store", path, "--json"]
        inproc = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()):
                code = main(argv)
            inproc.append(time.perf_counter() - t)
        assert code == 1, f"expected REGRESSION (exit 1), got {code}"
        fresh = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "decodescope.cli.main", *argv],
                                  capture_output=True, text=True, check=False)
            fresh.append(time.perf_counter() - t)
            assert proc.returncode == 1, proc.stderr
    print(f"bench_triage: 2 runs × {args.trials} trials × {args.tokens} chunks "
          f"(store {size_mb:.1f} MB), {args.repeat} repeats")
    print(f"  in-process triage     median {statistics.median(inproc) * 1000:7.1f} ms   "
          f"max {max(inproc) * 1000:7.1f} ms")
    print(f"  fresh process triage  median {statistics.median(fresh) * 1000:7.1f} ms   "
          f"max {max(fresh) * 1000:7.1f} ms   (includes Python start-up and imports)")
    verdict = "OK" if statistics.median(fresh) < 1.0 else "SLOW"
    print(f"  target < 1 s per triage: {verdict}")


if __name__ == "__main__":
    main_()
