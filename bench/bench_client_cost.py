"""decodescope's client CPU per million tokens against the replay emitter, for before/after
comparisons of client changes (bench_client.py measures everything, this one number only).

    PYTHONPATH=src .venv/bin/python bench/bench_client_cost.py [--rate 500] [--reps 3]

Each repetition runs bench/_ds_worker.py (c32, one wave) twice, on a short and a 4x longer
stream, and takes the slope of the whole process's CPU (user + system) between the two, so
start-up costs drop out; prints every slope and the median. Run it with PYTHONPATH pointing
at the source tree under test (the import path is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import _common as C  # noqa: E402
import bench_client as B  # noqa: E402


def one(rate: float, conc: int, seconds: float) -> tuple[int, float, float | None]:
    """(tokens, CPU seconds of the whole worker, p99 receipt lag) of one wave."""
    b = B.body(int(rate * B.MAL_GUESS * seconds))
    with C.emitter(b, rate, [C.SIM_CPU]) as em:
        cmd = [sys.executable, str(Path(__file__).parent / "_ds_worker.py"), "--url", em.url,
               "--body", json.dumps(b), "--concurrency", str(conc), "--requests", str(conc)]
        out, cpu = C.run_client(cmd, B.CLIENT_TIMEOUT_S)
        reqs: list[dict[str, Any]] = json.loads(out)["requests"]
        lags: list[float] = []
        for r in reqs:
            lags += C.lags_s(r["t_recv_s"], em.truth(r["request_id"]))
    return sum(int(r["tokens"] or 0) for r in reqs), cpu, C.percentile(lags, 99)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=500.0, help="steps per second per stream")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=4.0, help="length of the long run")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args(argv)
    B.set_sched("fifo")
    import decodescope

    print(f"# decodescope from {Path(decodescope.__file__).parent}; load {os.getloadavg()[0]:.2f}")
    slopes = []
    for _ in range(args.reps):
        n0, c0, _ = one(args.rate, args.concurrency, args.seconds / 4)
        n1, c1, lag = one(args.rate, args.concurrency, args.seconds)
        slopes.append((c1 - c0) / (n1 - n0) * 1e6)
        print(f"  {slopes[-1]:.2f} CPU s per Mtok (start-up {c0 - slopes[-1] * n0 / 1e6:.2f} s; "
              f"p99 lag {(lag or 0) * 1e3:.3f} ms)", flush=True)
    print(f"median {statistics.median(slopes):.2f} CPU s per Mtok over {args.reps} "
          f"(c{args.concurrency}, {args.rate:g} steps/s); load {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
