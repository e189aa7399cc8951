"""The whole summary of big logs, read three ways in one process: the bulk read with its
compiled parts (_linescan.c), the bulk read with numpy alone (DECODESCOPE_PURE_NUMPY's path)
and, with --per-line, the per-line read; each compared with the first (==, repr and the JSON of
to_dict()), with its CPU seconds.

    python bench/bulk_same.py /tmp/ds22/vllm-1024mb.log /tmp/ds22/sglang-1024mb.log
    python bench/bulk_same.py --per-line /tmp/ds22/llamacpp-1024mb.log   # ~100 s per GiB
"""

from __future__ import annotations

import argparse
import json
import resource
from typing import Any

from decodescope.telemetry.logs import accumulate, analyze_log, linescan


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run(path: str, mode: str) -> tuple[Any, float]:
    real = accumulate._bulk_summary
    linescan._PURE = mode == "numpy"
    if mode == "per-line":
        accumulate._bulk_summary = lambda *a: None  # type: ignore[assignment]
    t = cpu()
    s = analyze_log(path, parallel=False)
    accumulate._bulk_summary = real
    linescan._PURE = False
    return s, cpu() - t



def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--per-line", action="store_true", help="also the per-line read (slow)")
    args = ap.parse_args()
    if linescan.compiled() is None:
        print("note: the compiled module is not built (or DECODESCOPE_PURE_NUMPY is set): "
              "both bulk rows run numpy")
    differ = 0
    for path in args.logs:
        modes = ["compiled", "numpy"] + (["per-line"] if args.per_line else [])
        got = {m: run(path, m) for m in modes}
        a = got["compiled"][0]
        for m in modes:
            s, c = got[m]
            same = s == a and repr(s) == repr(a) and json.dumps(
                s.to_dict(), default=str) == json.dumps(a.to_dict(), default=str)
            differ += not same
            print(f"{path}: {m:9s} {c:6.2f} s CPU, identical to the first: {same}", flush=True)
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
