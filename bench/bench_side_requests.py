"""Misbehaving servers against two source trees side by side: exit code, wall time and peak
RSS of `decodescope probe` (and `doctor`) under a 1 GiB address-space limit (issue 22).

    .venv/bin/python bench/bench_side_requests.py [--before DIR] [--after DIR]

DIR is a source tree's `src` folder (default for --after: this checkout's). Make a "before"
tree with `git archive COMMIT src | tar -x -C /tmp/before` and pass `--before /tmp/before/src`.
Each case runs in a fresh process; the servers are tests/sidefaults.py. A case is stopped
after --limit seconds (shown as "> N s").
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from sidefaults import CHUNKS, SideFaultServer, healthy_usage  # noqa: E402

CALIBER = ('name = "side"\nversion = 1\n[prompt]\ntask = "Say hi."\n[output]\nmax_tokens = 32\n'
           'min_tokens = 32\nsteady_state_start = 4\n')
AS_LIMIT = 1 << 30


def _bad_usage(value: Any) -> Callable[[int], dict[str, Any]]:
    def usage(i: int) -> dict[str, Any]:
        u: dict[str, Any] = healthy_usage(i)
        if i == 1:
            u["completion_tokens"] = value
        return u
    return usage


def _series(n: int) -> str:
    return "".join(f'vllm:num_requests_running{{engine="{i}"}} 1\n' for i in range(n))


# (name, command, server keyword arguments, extra options)
CASES: list[tuple[str, str, dict[str, Any], list[str]]] = [
    ("healthy server", "probe", {}, []),
    ("/v1/models endless", "probe", {"faults": {"/v1/models": "endless"}}, []),
    ("/props 10 GiB Content-Length", "probe", {"faults": {"/props": "huge"}}, []),
    ("/version chunked endless", "probe", {"faults": {"/version": "chunked"}}, []),
    ("/tokenize endless", "probe", {"faults": {"/tokenize": "endless"}}, []),
    ("/tokenize trickle, --timeout 5 --deadline 10", "probe", {"faults": {"/tokenize": "trickle"}},
     ["--timeout", "5", "--deadline", "10"]),
    ("/tokenize answers [1,2,3]", "probe", {"faults": {"/tokenize": [1, 2, 3]}}, []),
    ("/metrics endless", "probe+scrape", {"faults": {"/metrics": "endless"}}, []),
    ("/metrics 2 million series", "probe+scrape", {"metrics": _series(2_000_000)}, []),
    ('/metrics position="1000000000"', "probe+scrape", {"metrics": (
        "vllm:generation_tokens_total 1\n"
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="1000000000"} 5\n')}, []),
    ("usage.completion_tokens 10**18 (trial 2)", "probe", {"usage": _bad_usage(10**18)}, []),
    ('usage.completion_tokens "96" (trial 2)', "probe", {"usage": _bad_usage("96")}, []),
    ("usage.completion_tokens -1e6 (trial 2)", "probe", {"usage": _bad_usage(-1_000_000)}, []),
    ("timings.predicted_n NaN (trial 2)", "probe", {"timings": lambda i: {
        "predicted_n": math.nan if i == 1 else CHUNKS, "predicted_ms": 100.0}}, []),
    ("doctor: /health endless", "doctor", {"faults": {"/health": "endless"}}, []),
]


def _cap() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


def run_case(src: str, command: str, server: dict[str, Any], extra: list[str],
             limit_s: float) -> tuple[str, float, float]:
    """(outcome, wall seconds, peak RSS MB) of one case in a fresh process."""
    with tempfile.TemporaryDirectory() as tmp:
        cal = Path(tmp) / "side.toml"
        cal.write_text(CALIBER, encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": src}
        with SideFaultServer(**server) as srv:
            if command == "doctor":
                args = ["doctor", srv.url]
            else:
                args = ["probe", srv.url, "--caliber", str(cal), "--store", f"{tmp}/s.sqlite",
                        "--trials", "3", "--warmup", "0", "--no-fingerprint", *extra]
                if command == "probe":
                    args.append("--no-scrape")
            code = ("import resource, sys\nfrom decodescope.cli.main import main\nrc = main(sys.argv[1:])\n"
                    "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
                    "sys.exit(rc)\n")
            t0 = time.monotonic()
            try:
                p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                                   text=True, timeout=limit_s, env=env, preexec_fn=_cap)
            except subprocess.TimeoutExpired:
                return f"still running at {limit_s:g} s", time.monotonic() - t0, math.nan
            took = time.monotonic() - t0
    lines = p.stderr.strip().splitlines()
    rss = float(lines[-1]) / 1024 if lines and lines[-1].isdigit() else math.nan
    tb = " +traceback" if "Traceback" in p.stderr else ""
    err = next((ln for ln in lines if ln.startswith(("error:", "internal error:"))), "")
    return f"exit {p.returncode}{tb} {err[:60]}".strip(), took, rss


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", default=None, help="the 'before' tree's src folder")
    ap.add_argument("--after", default=str(ROOT / "src"), help="the 'after' tree's src folder")
    ap.add_argument("--limit", type=float, default=60.0, help="seconds before a case is stopped")
    a = ap.parse_args()
    trees = [("before", a.before)] if a.before else []
    trees.append(("after", a.after))
    print(f"1 GiB address-space limit; case stopped after {a.limit:g} s; python {sys.version.split()[0]}")
    for label, src in trees:
        print(f"{label}: {src}")
    print()
    head = f"{'case':46} " + " ".join(f"{label + ': outcome':70} {'wall s':>7} {'RSS MB':>7}"
                                      for label, _ in trees)
    print(head)
    print("-" * len(head))
    for name, command, server, extra in CASES:
        cells = []
        for _, src in trees:
            outcome, took, rss = run_case(src, command, server, extra, a.limit)
            cells.append(f"{outcome[:70]:70} {took:7.1f} {rss:7.0f}")
        print(f"{name:46} " + " ".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
