"""`decodescope ab` both ways on the real embedded llama.cpp (llama-server + Gemma 3 270M,
CPU): how often two identical servers are called NO_CHANGE within 40 pairs (and never an
alarm), and how often a ≈ −5 % launch change is called REGRESSION within 60 s; median pairs
and seconds of each. The simulator's twin is bench/bench_ab.py (same table).

Three llama-server processes run side by side, each on its own loopback port:

    A  the reference launch (n-gram drafts, -t THREADS)
    B  the very same launch (a second process: "identical servers", issue 36)
    C  A's launch plus --change (default: a q8_0 KV cache, `--cache-type-k q8_0
       --cache-type-v q8_0`)

Why separate processes with all the threads each: `ab` is closed-loop and alternates A and B
one trial at a time, so only one server decodes at any moment (an idle llama-server takes no
CPU); each side gets the whole host as a production server would, and B is a different
process from A (its own warm-up, its own allocations), which is what "identical servers"
means. One process used as both A and B would hide exactly the between-process differences
the equivalence decision has to absorb; halving the threads of each would measure a
different stack from the one users run.

Repetitions alternate the scenarios: A vs B ("identical": every REGRESSION / IMPROVEMENT is a
false alarm) and A vs C ("change"). Each repetition is one `decodescope ab A X --caliber
<short code rewrite>` with the default design (3 % minimum effect, α = 5 %, Pocock-type
spending, looks after 6 … 40 pairs), scraping on, fingerprints off. Trials are a 96-token
greedy code rewrite: n-gram drafts accept ≈ 6 tokens a step, so a trial takes seconds.

    python bench/bench_ab_llamacpp.py [--reps 20] [--threads 2]
        [--change "--cache-type-k q8_0 --cache-type-v q8_0"] [--out FILE]

Needs `decodescope engine install`. Run it on a quiet machine: every other process on the
host is noise in the pairs. Prints one markdown table (bench_ab.table).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_ab import WITHIN_PAIRS, WITHIN_S, ab, ab_launch, summarize, table  # noqa: E402

from decodescope.engines import server  # noqa: E402
from decodescope.engines.install import find_install  # noqa: E402
from decodescope.engines.server import EngineSettings  # noqa: E402

DEFAULT_CHANGE = "--cache-type-k q8_0 --cache-type-v q8_0"
CALIBER = """name = "bench-ab-llamacpp"
version = 1
description = "Short greedy code rewrite for the llama.cpp A/B bench (n-gram drafts accept)."
task_class = "rewrite"
thinking = false
endpoint = "chat"
concurrency = 1
[prompt]
content_class = "code"
material = "code"
material_seed = 7
blocks = 2
task = "Rewrite the code above exactly, keeping every line, and add the comment `# reviewed` at the top."
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


def launch_command(install: Any, template: Path, settings: EngineSettings) -> str:
    """The llama-server command line of `settings` with `{port}` where its port goes (for
    `ab --launch-a/--launch-b`)."""
    argv = server.build_args(install.binary, install.model, template, settings, 0)
    i = argv.index("--port")
    argv[i + 1] = "{port}"
    return shlex.join(argv).replace("'{port}'", "{port}")


def main_bench() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20, help="repetitions per scenario")
    ap.add_argument("--threads", type=int, default=None,
                    help="llama-server -t for every server (default: physical cores)")
    ap.add_argument("--spec", choices=["ngram", "none"], default="ngram",
                    help="speculative decoding of every server")
    ap.add_argument("--change", default=DEFAULT_CHANGE,
                    help="extra llama-server arguments of the changed server C")
    ap.add_argument("--scenarios", default="same,slow",
                    help="which scenarios to run: same, slow or both")
    ap.add_argument("--tokens", type=int, default=96,
                    help="tokens per trial (the caliber's max = min tokens)")
    ap.add_argument("--launch", action="store_true",
                    help="`ab --launch-a/--launch-b`: fresh servers for every start of every "
                         "repetition (the unit is a start's mean change) instead of three "
                         "servers kept running")
    ap.add_argument("--pairs-per-start", type=int, default=None,
                    help="with --launch: pairs per start (default: ab's)")
    ap.add_argument("--out", default=None,
                    help="write every repetition here (JSON, rewritten after each one)")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="start no repetition after this many seconds (the table says so)")
    args = ap.parse_args()
    install = find_install()
    if install is None:
        raise SystemExit("the embedded engine is not installed: run `decodescope engine install`")
    wanted = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    base = EngineSettings(port=0, threads=args.threads, spec=args.spec)
    change = tuple(shlex.split(args.change))
    rows: dict[str, list[dict[str, Any]]] = {"same": [], "slow": []}
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-ab-llamacpp-") as tmp, ExitStack() as stack:
        cal = str(Path(tmp) / "short.toml")
        Path(cal).write_text(CALIBER.replace("{tokens}", str(args.tokens)))
        store = str(Path(tmp) / "runs.sqlite")
        state = Path(tmp) / "engines"

        def start(settings: EngineSettings) -> str:
            eng = stack.enter_context(server.running_engine(settings, install=install,
                                                            state_dir=state))
            print(f"started {' '.join(eng.cmdline[1:])}", file=sys.stderr)
            return eng.url

        if args.launch:
            template = server.write_template(Path(tmp))
            a = launch_command(install, template, base)
            b = a if "same" in wanted else None
            c = launch_command(install, template, EngineSettings(
                port=0, threads=args.threads, spec=args.spec, extra=change)
            ) if "slow" in wanted else None
            extra = (["--pairs-per-start", str(args.pairs_per_start)]
                     if args.pairs_per_start else [])
        else:
            a = start(base)
            b = start(base) if "same" in wanted else None
            c = start(EngineSettings(port=0, threads=args.threads, spec=args.spec, extra=change)
                      ) if "slow" in wanted else None
        for rep in range(args.reps):
            if args.budget_s is not None and time.monotonic() - t0 > args.budget_s:
                print(f"budget: stopped before repetition {rep + 1}", file=sys.stderr)
                break
            for name, other in (("same", b), ("slow", c)):
                if other is None:
                    continue
                r = (ab_launch(a, other, cal, store, *extra) if args.launch
                     else ab(a, other, cal, store))
                rows[name].append(r)
                if args.out:
                    Path(args.out).write_text(json.dumps({"rows": rows}, indent=1))
                print(f"rep {rep + 1} {name}: {r['verdict']} after {r['pairs']} pairs, "
                      f"{r['seconds']:.1f} s, decode {r['rel']:+.3f}"
                      if r["rel"] is not None else
                      f"rep {rep + 1} {name}: {r['verdict']} after {r['pairs']} pairs",
                      file=sys.stderr)
    s_same = summarize(rows["same"], False) if rows["same"] else None
    s_slow = summarize(rows["slow"], True) if rows["slow"] else None
    if args.out:
        Path(args.out).write_text(json.dumps({"same": s_same, "slow": s_slow, "rows": rows},
                                             indent=1))
    if s_same and s_slow:
        print(table(s_same, s_slow))
    else:
        print(json.dumps(s_same or s_slow, indent=1))
    print(f"\n{len(rows['same'] or rows['slow'])} repetitions per scenario, {time.monotonic() - t0:.0f} s in all; "
          f"real llama.cpp {install.engine_version or ''}, -t {args.threads or server.default_threads()}, spec {args.spec}, change "
          f"`{args.change}`; {args.tokens}-token trials"
          f"{'; ab --launch (fresh servers per start, seconds include the starts)' if args.launch else ''}; targets: NO_CHANGE within {WITHIN_PAIRS} pairs, "
          f"REGRESSION within {WITHIN_S:.0f} s.")


if __name__ == "__main__":
    main_bench()
