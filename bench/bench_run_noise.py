"""Between-run spread: how far apart back-to-back runs of an unchanged server land.

The trials of one run share the machine's state of that moment, so a run's own interval
cannot show how much the next run will differ. This bench measures that component on the host
at hand: R runs of T trials each, one after the other, against one unchanged server (the
embedded llama.cpp engine, or --url). It prints one table: each run's mean decode and step
rate and within-run sd, the between-run sd estimated from the run means (minus what the
within-run spread explains), and the verdicts of every adjacent pair of runs with no
between-run term and with the default one (th.RUN_TO_RUN_SD) — each REGRESSION / IMPROVEMENT
there is a false alarm. The result is what `triage --run-spread` should be on this host.

    python bench/bench_run_noise.py [--runs 6] [--trials 5] [--url URL]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import statistics
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from decodescope.cli.main import main
from decodescope.store.connect import open_store
from decodescope.verdict import thresholds as th
from decodescope.verdict.side import Side
from decodescope.verdict.side_resolve import resolve_side
from decodescope.verdict.triage import triage

CAL = "demo-code-rewrite"


def probe(url: str, store: str, label: str, trials: int) -> int:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return main(["probe", url, "--caliber", CAL, "--trials", str(trials), "--store", store,
                     "--label", f"run={label}", "--no-fingerprint", "--json"])


@contextlib.contextmanager
def engine(url: str | None, state: Path) -> Iterator[str]:
    if url:
        yield url
        return
    from decodescope.engines import server
    from decodescope.engines.install import find_install
    from decodescope.engines.server import EngineSettings

    install = find_install()
    if install is None:
        sys.exit("embedded engine not installed: run `decodescope engine install` (or --url)")
    with server.running_engine(EngineSettings(port=0, threads=2, spec="ngram"), install=install,
                               state_dir=state) as eng:
        yield eng.url


def logs(side: Side, key: str) -> list[float]:
    return [math.log(v) for v in side.values(key) if v is not None and v > 0]


def between_sd(sides: list[Side], key: str) -> float | None:
    """sd of the run means of log values, minus the share the within-run spread explains
    (one-way random-effects ANOVA, method of moments); None when a run lacks values."""
    per = [logs(s, key) for s in sides]
    if any(len(x) < 2 for x in per) or len(per) < 2:
        return None
    means = [statistics.fmean(x) for x in per]
    within = statistics.fmean([statistics.variance(x) / len(x) for x in per])
    return math.sqrt(max(0.0, statistics.variance(means) - within))


def main_bench() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--url", default=None, help="an unchanged server (default: start llama.cpp)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = str(Path(tmp) / "runs.sqlite")
        with engine(a.url, Path(tmp)) as url:
            probe(url, store, "warmup", 1)
            for r in range(a.runs):
                code = probe(url, store, f"r{r}", a.trials)
                print(f"run {r}: probe exit {code}", file=sys.stderr)
        st = open_store(store, read_only=True)
        try:
            sides = [resolve_side(f"run=r{r}", store=st) for r in range(a.runs)]
        finally:
            st.close()
    key = "engine_decode_rate" if all(len(s.values("engine_decode_rate")) >= 2 for s in sides) \
        else "decode_rate"
    print(f"\nBetween-run spread: {a.runs} runs × {a.trials} trials, caliber {CAL}, "
          f"decode source {key}\n")
    print(f"{'run':>4} {'decode tok/s':>13} {'within sd':>10} {'step/s':>8} {'within sd':>10}")
    for r, s in enumerate(sides):
        d, p = logs(s, key), logs(s, "step_rate")
        print(f"{r:>4} {math.exp(statistics.fmean(d)):>13.1f} "
              f"{100 * statistics.stdev(d):>9.1f}% "
              f"{math.exp(statistics.fmean(p)) if p else float('nan'):>8.1f} "
              f"{100 * statistics.stdev(p) if len(p) > 1 else float('nan'):>9.1f}%")
    for label, k in (("decode rate", key), ("step rate", "step_rate")):
        b = between_sd(sides, k)
        print(f"between-run sd of the {label}: "
              + ("n/a" if b is None else f"{100 * b:.1f}% (log scale)"))
    print(f"\n{'pair':>6} {'decode Δ':>9}  {'run_sd = 0':<24} {'run_sd = default':<24}")
    alarms = {0.0: 0, th.RUN_TO_RUN_SD: 0}
    for r in range(1, a.runs):
        row = []
        for sd in alarms:
            v = triage(sides[r - 1], sides[r], run_spread=sd)
            alarms[sd] += v.kind in ("REGRESSION", "IMPROVEMENT")
            row.append((f"{v.kind} ({v.cause})" if v.cause else v.kind)[:24])
        rel = v.changes["decode"].rel
        print(f"{r - 1:>2}→{r:<3} {100 * (rel or 0.0):>+8.1f}%  {row[0]:<24} {row[1]:<24}")
    print(f"\nfalse alarms among {a.runs - 1} adjacent pairs: run_sd = 0: {alarms[0.0]}; "
          f"run_sd = {100 * th.RUN_TO_RUN_SD:.0f}% (default): {alarms[th.RUN_TO_RUN_SD]}")


if __name__ == "__main__":
    main_bench()
