"""Flat tables of stored runs for CSV (pure): one row per run, per trial or per request.

Column names carry their units (`_s`, `_ms`, `tok_s`); times are ISO-8601 with the UTC offset;
an empty cell is "no data", never 0. Throughput columns say whether they are per request (one
stream's decode rate) or all requests (a trial's output tokens over its wall time).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from typing import Any

from decodescope.analysis.run_quantities import quantities_of
from decodescope.records.quantity import Quantity
from decodescope.records.request_metrics import compute
from decodescope.records.stored_run import StoredRun
from decodescope.report.distributions import _tpot, run_distributions
from decodescope.report.headline import headline, median_or_none, output_throughput_all
from decodescope.report.iso import iso

TABLES = ("runs", "trials", "requests")
PCTS = ("p50", "p90", "p99")


def load_columns(run: StoredRun) -> dict[str, Any]:
    cal = run.caliber or {}
    load = cal.get("load") or {}
    ds = cal.get("dataset") or {}
    return {"concurrency": cal.get("concurrency"), "request_rate": load.get("request_rate"),
            "burstiness": load.get("burstiness"), "num_requests": load.get("num_requests"),
            "duration_s": load.get("duration_s"), "dataset_sha256": ds.get("sha256")}


def run_row(run: StoredRun, dist: dict[str, Any] | None = None) -> dict[str, Any]:
    """One run's summary row; `dist` from run_distributions (computed when None)."""
    res = run.result or {}
    dist = dist if dist is not None else run_distributions(run)
    head = headline(res)
    qs = quantities_of(res)  # the records `runs list`, `runs show` and the reports render
    ok = [t for t in res.get("trials") or [] if t.get("status") == "ok"]
    row: dict[str, Any] = {
        "run_id": run.id, "created_at": iso(run.created_at), "status": run.status,
        "caliber": run.caliber_ref, "caliber_identity": run.caliber_identity,
        "engine": run.engine, "simulated": run.simulated, "model": run.model,
        **load_columns(run),
        "trials_ok": len(ok), "requests_ok": dist.get("requests"),
        "decode_rate_tok_s": head.decode_rate, "decode_rate_source": head.source,
        "decode_rate_statistic": qs["decode_rate"].basis_text(),
        "decode_rate_client_tok_s": qs["client_decode_rate"].value,
        "decode_rate_engine_tok_s": qs["engine_decode_rate"].value,
        "decode_rate_engine_statistic": _statistic(qs["engine_decode_rate"]),
        "output_throughput_all_tok_s": median_or_none([output_throughput_all(t) for t in ok]),
        "request_throughput_all_req_s": _median((dist.get("throughput") or {}).get(
            "request_throughput_all")),
        "mal": qs["mal"].value, "mal_statistic": _statistic(qs["mal"]),
        "tokens_per_step": qs["tokens_per_step"].value,
        "tokens_per_step_statistic": _statistic(qs["tokens_per_step"]),
        "step_rate": qs["step_rate"].value, "step_rate_statistic": _statistic(qs["step_rate"]),
    }
    lat = dist.get("latency") or {}
    for key in ("ttft_s", "ttfot_s", "itl_s", "tpot_s", "e2e_s"):
        d = lat.get(key)
        name = key[:-2]
        row[f"{name}_mean_ms"] = 1000 * d["mean"] if d else None
        for p in PCTS:
            row[f"{name}_{p}_ms"] = 1000 * d[p] if d else None
    row["caliber_status"] = res.get("caliber_status")
    row["labels"] = json.dumps(run.labels, sort_keys=True) if run.labels else None
    return row


def _statistic(q: Quantity) -> str | None:
    """The statistic and basis of a quantity that has a value ('median over 3 trials',
    'pooled counts of 6 engine windows'); empty beside an empty value."""
    return q.basis_text() if q.value is not None else None


def _median(d: dict[str, Any] | None) -> float | None:
    return d.get("median") if d else None


def trial_rows(run: StoredRun) -> list[dict[str, Any]]:
    by_idx = {t.idx: t for t in run.trials}
    out = []
    for t in (run.result or {}).get("trials") or []:
        stored = by_idx.get(t["idx"])
        out.append({
            "run_id": run.id, "trial": t["idx"] + 1, "status": t["status"],
            "started_at": iso(stored.started_at) if stored else None,
            "requests": t.get("requests"),
            "decode_rate_per_request_tok_s": t.get("decode_rate"),
            "engine_decode_rate_per_request_tok_s": t.get("engine_decode_rate"),
            "engine_source": t.get("engine_source"),
            "output_throughput_all_tok_s": output_throughput_all(t),
            "mal": t.get("engine_mal"), "step_rate": t.get("engine_step_rate"),
            "ttft_mean_s": t.get("ttft_s"), "output_tokens_mean": t.get("output_tokens"),
            "prompt_tokens_mean": t.get("prompt_tokens"),
            "stall_count": t.get("stall_count"),
        })
    return out


def request_rows(run: StoredRun) -> list[dict[str, Any]]:
    steady = int(((run.caliber or {}).get("output") or {}).get("steady_state_start") or 0)
    out = []
    for t in run.trials:
        for i, r in enumerate(t.requests):
            m = compute(r, steady)
            out.append({
                "run_id": run.id, "trial": t.idx + 1, "request": i + 1, "ok": r.ok,
                "error": r.error, "sent_at": iso(r.t_send_s + t.wall_anchor_s),
                "ttft_s": m.ttft_s, "ttfot_s": m.ttfot_s, "e2e_s": m.e2e_s,
                "tpot_s": _tpot(m.e2e_s, m.ttft_s, m.output_tokens),
                "itl_median_s": m.itl_median_s, "itl_p99_s": m.itl_p99_s,
                "decode_rate_tok_s": m.decode_rate, "output_tokens": m.output_tokens,
                "prompt_tokens": m.prompt_tokens, "reasoning_tokens": m.reasoning_tokens,
                "stall_count": len(m.stalls), "finish_reason": m.finish_reason,
            })
    return out


def rows(runs: Sequence[StoredRun], table: str) -> list[dict[str, Any]]:
    if table == "runs":
        return [run_row(r) for r in runs]
    if table == "trials":
        return [row for r in runs for row in trial_rows(r)]
    return [row for r in runs for row in request_rows(r)]


def to_csv(records: Sequence[dict[str, Any]], header: Sequence[str] | None = None) -> str:
    """CSV with a header row; None is an empty cell; floats keep full precision."""
    cols = list(header or (records[0].keys() if records else ()))
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    for rec in records:
        w.writerow(["" if rec.get(c) is None else rec.get(c) for c in cols])
    return buf.getvalue()
