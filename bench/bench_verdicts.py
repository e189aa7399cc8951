"""Verdict truth bench: simulator scenarios with known truth → the verdict decodescope gives.

Prints one table: scenario, expected, got, and the numbers against the simulator's truth.
The repeated same-caliber pairs on an unchanged server measure two things at once: false
alarms (any REGRESSION / IMPROVEMENT is one; the target is zero) and the power to say
NO_CHANGE (the share of pairs that are not INCONCLUSIVE). Timing-dependent, so it lives here
and not in the tests (tests/test_verdict_truth.py asserts what always holds).

    python bench/bench_verdicts.py [--pairs 20] [--time-scale 0.25] [--trials 4]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from decodescope.cli.main import main
from decodescope.records.stored_run import StoredRun
from decodescope.sim import ACCEPTANCE_PROFILES, FaultSpec, SimConfig, SimServer
from decodescope.sim.config import expected_mal
from decodescope.store import runs as sr
from decodescope.store.connect import open_store

CAL = "demo-code-rewrite"
PROSE = "demo-varied-prose"


@contextlib.contextmanager
def sim(ts: float, **kw: Any) -> Iterator[Any]:
    h = SimServer(SimConfig(time_scale=ts, seed=7, **kw)).start_in_thread()
    try:
        yield h
    finally:
        h.stop()


def cli(*argv: str) -> tuple[int, Any]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    try:
        return code, json.loads(out.getvalue())
    except ValueError:
        return code, {"error": err.getvalue().strip()[-200:]}


def probe(url: str, store: str, label: str, trials: int, cal: str = CAL, *extra: str) -> int:
    code, _ = cli("probe", url, "--caliber", cal, "--trials", str(trials), "--store", store,
                  "--label", f"side={label}", "--no-fingerprint", "--json", *extra)
    return code


def triage(store: str, *extra: str) -> dict[str, Any]:
    code, out = cli("triage", "side=current", "--baseline", "side=baseline", "--store", store,
                    "--json", *extra)
    out["exit"] = code
    return out


def last_run(store: str) -> StoredRun:
    st = open_store(store)
    try:
        return sr.get_run(st, sr.resolve_run_id(st, "last"))
    finally:
        st.close()


def truth_rate(url: str) -> float | None:
    reqs = httpx.get(url + "/sim/truth", timeout=5.0).json()["requests"]
    rates = [r["decode_rate_real_tps"] for r in reqs if r.get("decode_rate_real_tps")]
    return statistics.median(rates) if rates else None


def label(v: dict[str, Any]) -> str:
    return str(v.get("label") or v.get("verdict") or v.get("error") or "?")


def pair(tmp: str, name: str, base: dict[str, Any], cur: dict[str, Any], args: argparse.Namespace,
         cal: tuple[str, str] = (CAL, CAL)) -> dict[str, Any]:
    store = str(Path(tmp) / f"{name}.sqlite")
    for side, kw, c in (("baseline", base, cal[0]), ("current", cur, cal[1])):
        with sim(args.time_scale, **kw) as h:
            probe(h.url, store, side, args.trials, c)
    return triage(store)


def row(rows: list[list[str]], scenario: str, expected: str, got: str, ok: bool,
        numbers: str) -> None:
    rows.append([scenario, expected, got, "yes" if ok else "NO", numbers])


def engine_vs_truth(tmp: str, ts: float, args: argparse.Namespace) -> tuple[str, bool]:
    store = str(Path(tmp) / f"short-{ts}.sqlite")
    with sim(ts) as h:
        probe(h.url, store, "x", args.trials, CAL, "--scrape-interval", "1")
        truth = truth_rate(h.url)
    run = last_run(store)
    rates = [t.get("engine_decode_rate") for t in run.result["trials"]]
    got = [r for r in rates if r is not None]
    withheld = len(rates) - len(got)
    if not got or not truth:
        return f"{withheld}/{len(rates)} trials withheld (too coarse)", True
    err = max(abs(r / truth - 1) for r in got)
    return (f"max |engine − truth| {err:.1%} over {len(got)} trials"
            f"{f', {withheld} withheld' if withheld else ''}", err <= 0.03)


def log_sides(tmp: str, args: argparse.Namespace) -> tuple[str, str]:
    """Two sim vLLM logs (k=3): code rewrite, then varied prose."""
    paths = []
    for name, cal in (("code", CAL), ("chat", PROSE)):
        log = Path(tmp) / f"{name}.log"
        store = str(Path(tmp) / f"log-{name}.sqlite")
        # time scale 1: the simulated log's rates and its wall-clock stamps agree
        with sim(1.0, k=3, log_path=str(log), log_interval_s=1.0) as h:
            probe(h.url, store, name, 6, cal, "--no-scrape")
        paths.append(str(log))
    return paths[0], paths[1]


def duplicated(path: str) -> str:
    """The same log with every stats line written twice (a log shipper's duplicates)."""
    out = Path(path).with_suffix(".dup.log")
    lines = Path(path).read_text().splitlines(keepends=True)
    out.write_text("".join(x + x if ("throughput" in x or "SpecDecoding" in x) else x
                           for x in lines))
    return str(out)


def main_bench() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--time-scale", type=float, default=0.25)
    ap.add_argument("--trials", type=int, default=4)
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows: list[list[str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        # unchanged server: false alarms and power
        verdicts = []
        for i in range(args.pairs):
            verdicts.append(pair(tmp, f"same{i}", {}, {}, args))
        kinds = [v.get("verdict") for v in verdicts]
        alarms = sum(k in ("REGRESSION", "IMPROVEMENT") for k in kinds)
        nochange = sum(k == "NO_CHANGE" for k in kinds)
        row(rows, f"unchanged server × {args.pairs} pairs", "no REGRESSION/IMPROVEMENT",
            f"{alarms} alarms, {nochange} NO_CHANGE, {args.pairs - alarms - nochange} other",
            alarms == 0, f"power (NO_CHANGE share) {nochange / args.pairs:.0%}")
        v = pair(tmp, "step", {"step_rate_hz": 40.0}, {"step_rate_hz": 28.0}, args)
        d = (v.get("changes") or {}).get("decode", {}).get("rel")
        row(rows, "step rate 40 → 28 Hz", "REGRESSION (step rate)", label(v),
            label(v) == "REGRESSION (step rate)", f"decode {d:+.1%} (truth −30%)" if d else "")
        weak = (0.75, 0.6, 0.5, 0.4)
        v = pair(tmp, "acc", {}, {"acceptance": {**ACCEPTANCE_PROFILES, "code": weak}}, args)
        m = (v.get("changes") or {}).get("mal", {}).get("rel")
        true_m = expected_mal(weak) / expected_mal(ACCEPTANCE_PROFILES["code"]) - 1
        row(rows, "weaker draft (code MAL 4.5 → 2.5)", "REGRESSION (acceptance)", label(v),
            label(v) == "REGRESSION (acceptance)",
            f"MAL {m:+.1%} (truth {true_m:+.1%} at T=0)" if m else "")
        try:
            v = pair(tmp, "specoff", {}, {"k": 0, "step_rate_hz": 60.0}, args)
            got = label(v)
        except Exception as exc:  # an older simulator without k=0
            v, got = {}, f"n/a ({type(exc).__name__})"
        row(rows, "speculative decoding off (step rate 40 → 60)",
            "REGRESSION (speculative decoding off)", got,
            got == "REGRESSION (speculative decoding off)", "")
        v = pair(tmp, "mal-only", {}, {"acceptance": {**ACCEPTANCE_PROFILES,
                                                        "code": (0.985, 0.97, 0.95, 0.94)},
                                       "step_rate_hz": 40.0 / 1.04}, args)
        row(rows, "MAL +4%, step rate −4% (decode unchanged)", "NO_CHANGE (or INCONCLUSIVE)",
            label(v), v.get("verdict") in ("NO_CHANGE", "INCONCLUSIVE"),
            f"decode {((v.get('changes') or {}).get('decode') or {}).get('rel') or 0:+.1%}")
        v = pair(tmp, "stall", {}, {"faults": FaultSpec.parse("stall=2,stall_after=100")}, args)
        row(rows, "a 2 s stall inside every output", "not REGRESSION (step rate); stalls named",
            label(v), v.get("cause") != "step rate" and "stall" in str(v.get("headline")).lower(),
            "")
        store = str(Path(tmp) / "nousage.sqlite")
        with sim(args.time_scale, faults=FaultSpec.parse("no_usage")) as h:
            probe(h.url, store, "x", args.trials)
            truth = truth_rate(h.url)
        run = last_run(store)
        rates = [t.get("decode_rate") for t in run.result["trials"]]
        got_rate = statistics.median([r for r in rates if r]) if any(rates) else None
        src = run.result["trials"][0].get("tokens_per_chunk_source")
        ok = got_rate is None or (truth is not None and abs(got_rate / truth - 1) <= 0.03)
        row(rows, "no usage in the stream", "exact count or unknown",
            f"{src}: {got_rate:.1f} tok/s" if got_rate else f"{src}: unknown", ok,
            f"truth {truth:.1f} tok/s" if truth else "")
        for ts in (0.05, 0.25, 1.0):
            text, ok = engine_vs_truth(tmp, ts, args)
            row(rows, f"per-trial engine decode, 1-s scrapes, time scale {ts}",
                "within 3% of truth or withheld", "ok" if ok else "off", ok, text)
        code_log, chat_log = log_sides(tmp, args)
        c, v = cli("triage", f"{chat_log}@..", "--baseline", f"{code_log}@..", "--json")
        row(rows, "log windows, k=3 n-gram-like: code → chat", "not REGRESSION / IMPROVEMENT",
            label(v), v.get("verdict") not in ("REGRESSION", "IMPROVEMENT"), f"exit {c}")
        dup_code = duplicated(code_log)
        _, plain = cli("logs", code_log, "--json")
        _, dup = cli("logs", dup_code, "--json")
        pn, dn = _numbers(plain), _numbers(dup)
        row(rows, "duplicated stats lines (log shipper)", "same numbers as without",
            f"{dn[0]} windows, {dn[1]} tokens vs {pn[0]}, {pn[1]}",
            pn[0] is not None and pn == dn, f"{(dup.get('lines') or {}).get('duplicates')} "
            "duplicates dropped")
    widths = [max(len(r[i]) for r in [HEAD, *rows]) for i in range(len(HEAD))]
    for r in [HEAD, ["-" * w for w in widths], *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    passed = sum(r[3] == "yes" for r in rows)
    print(f"\n{passed}/{len(rows)} scenarios as expected · {time.perf_counter() - t0:.0f} s · "
          f"load average {os.getloadavg()[0]:.2f}")
    return 0


HEAD = ["scenario", "expected", "got", "right?", "numbers vs truth"]


def _numbers(doc: Any) -> tuple[Any, Any]:
    """(windows, generation tokens) as `logs --json` reports them."""
    if not isinstance(doc, dict):
        return None, None
    return doc.get("windows_total"), doc.get("generation_tokens")


if __name__ == "__main__":
    sys.exit(main_bench())
