"""Per-request latency distributions and throughput of a run (pure), from its stored traces:
the numbers `vllm bench serve`, AIPerf and guidellm print, in the glossary's words.

- TTFT, TTFOT, e2e latency: one value per request (send -> first token, first output token,
  last byte).
- ITL: every token gap of every request, pooled (a chunk of n tokens after a gap g gives n
  samples of g/n, as records/request_metrics.py defines it).
- TPOT: per request, (e2e − TTFT) / (output tokens − 1) (vLLM's definition).
- throughput, **per request**: the decode rate of one stream (tokens/s after the steady-state
  start), the number the verdict uses; **all requests**: output tokens of all requests of a
  trial divided by the trial's wall time (first send -> last byte), and requests/s likewise.

Latencies cover the ok requests of ok trials (the requests the client numbers cover);
throughputs are per trial, summarized by the median over trials like every other per-trial
number. Each distribution is the one Summary type (records/summary.py) plus p50 (= its
median) and p90, which the peers print and Summary does not hold.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from decodescope.records.request_metrics import compute, token_points
from decodescope.records.stored_run import StoredRun
from decodescope.records.summary import Summary, percentile
from decodescope.records.trace import RequestTrace

LATENCIES = (("ttft_s", "TTFT"), ("ttfot_s", "TTFOT"), ("itl_s", "ITL"), ("tpot_s", "TPOT"),
             ("e2e_s", "e2e latency"))
THROUGHPUTS = (("decode_rate_per_request", "decode rate (per request)", "tok/s"),
               ("output_throughput_all", "output throughput (all requests)", "tok/s"),
               ("request_throughput_all", "request throughput (all requests)", "req/s"))


def distribution(values: Iterable[float | None]) -> dict[str, Any] | None:
    """Summary of the values plus p50 and p90; None when there is none ("no data")."""
    xs = sorted(float(v) for v in values if v is not None)
    s = Summary.of(xs)
    if s is None:
        return None
    return {**s.to_dict(), "p50": s.median, "p90": percentile(xs, 90)}


def itl_samples(trace: RequestTrace) -> list[float]:
    pts, source = token_points(trace)
    if source == "unknown" or not pts:
        return []
    out = [0.0] * (pts[0][1] - 1)
    for (t0, _, _), (t1, n, _) in zip(pts, pts[1:], strict=False):
        out.extend([(t1 - t0) / n] * n)
    return out


def run_distributions(run: StoredRun) -> dict[str, Any]:
    """Latency distributions over requests and throughputs over trials (traces needed)."""
    steady = int(((run.caliber or {}).get("output") or {}).get("steady_state_start") or 0)
    ok_trials = [t for t in run.trials if t.status == "ok"]
    lat: dict[str, list[float | None]] = {k: [] for k, _ in LATENCIES}
    per_trial: list[dict[str, Any]] = []
    for t in ok_trials:
        reqs = [r for r in t.requests if r.ok]
        ms = [compute(r, steady) for r in reqs]
        for r, m in zip(reqs, ms, strict=True):
            lat["ttft_s"].append(m.ttft_s)
            lat["ttfot_s"].append(m.ttfot_s)
            lat["e2e_s"].append(m.e2e_s)
            lat["itl_s"].extend(itl_samples(r))
            lat["tpot_s"].append(_tpot(m.e2e_s, m.ttft_s, m.output_tokens))
        per_trial.append({"idx": t.idx, **trial_throughput(t.requests, ms)})
    trial_rates = {tv["idx"]: tv.get("decode_rate")
                   for tv in ((run.result or {}).get("trials") or [])}
    for pt in per_trial:
        pt["decode_rate_per_request"] = trial_rates.get(pt["idx"])
    return {
        "requests": sum(1 for t in ok_trials for r in t.requests if r.ok),
        "trials": len(ok_trials),
        "latency": {k: distribution(v) for k, v in lat.items()},
        "throughput": {k: distribution(pt.get(k) for pt in per_trial) for k, _, _ in THROUGHPUTS},
        "per_trial": per_trial,
    }


def trial_throughput(requests: Sequence[RequestTrace], ms: Sequence[Any]) -> dict[str, Any]:
    """All-requests throughput of one trial: output tokens and ok requests over its wall time."""
    sends = [r.t_send_s for r in requests]
    dones = [r.t_done_s for r in requests if r.t_done_s is not None]
    wall = (max(dones) - min(sends)) if (sends and dones) else None
    toks = [m.output_tokens for m in ms]
    known = None if (not toks or any(x is None for x in toks)) else sum(toks)
    return {
        "wall_s": wall,
        "output_tokens": known,
        "output_throughput_all": (known / wall) if (known is not None and wall) else None,
        "request_throughput_all": (len(ms) / wall) if (ms and wall) else None,
    }


def _tpot(e2e: float | None, ttft: float | None, out: int | None) -> float | None:
    if e2e is None or ttft is None or out is None or out < 2:
        return None
    return (e2e - ttft) / (out - 1)


def latency_rows(dist: dict[str, Any]) -> list[list[str]]:
    """Text rows: metric, n, mean, min, p50, p90, p99, max (milliseconds)."""
    rows = []
    for key, name in LATENCIES:
        d = (dist.get("latency") or {}).get(key)
        if d is None:
            rows.append([name, "0", *(["—"] * 6)])
            continue
        rows.append([name, str(d["n"]), *(f"{1000 * d[k]:.1f}" for k in
                                          ("mean", "min", "p50", "p90", "p99", "max"))])
    return rows
