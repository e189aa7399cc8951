"""Peers' result files as stored runs: `vllm bench serve --save-result` JSON, AIPerf
`profile_export_aiperf.json` (or its CSV), SGLang `bench_serving` JSONL and inference-perf's
`*_lifecycle_metrics.json` reports (docs/peers.md, "Importing their results"). This module reads
vLLM's; `peer_formats` the others.

Each file is one load period, stored as one trial; several files of the same workload are one
run with several trials (the unit of statistics). Every caliber element a file carries is kept
with its value; every element it does not carry is kept as unknown (None) — never a default
passed off as known (vLLM's `--temperature` default, for one, is not in its file). Elements
use the names of the caliber diff (`caliber.spec.element_table`) where one exists.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from decodescope.errors import UsageError
from decodescope.store import runs as store_runs
from decodescope.store.db import Store

MAX_FILE_BYTES = 256 * 1024 * 1024  # a --save-detailed file of 100k requests is ~100 MB
# The caliber elements an imported run is compared on, in this order.
ELEMENTS = ("model", "endpoint", "dataset", "dataset sha256", "input tokens (mean)",
            "input length distribution", "output max_tokens", "output tokens (mean)",
            "output length distribution", "ignore_eos", "temperature", "top_p", "top_k",
            "concurrency", "request rate", "burstiness", "requests per trial")


# Formats and checks that decodescope.peers registers when imported (issue 35: GuideLLM, the
# llm-d report, the audit of what a file claims); the store layer does not import peers.
EXTRA_PARSERS: list[Callable[[bytes, Any, str, int | None], Parsed | None]] = []
FILE_AUDITS: list[Callable[[Any, str], list[dict[str, Any]]]] = []


@dataclass
class PeerResult:
    tool: str  # "vllm bench serve" | "aiperf" | "sglang bench_serving" | "inference-perf"
    tool_version: str | None
    path: str
    sha256: str
    elements: dict[str, str | None]
    trial: dict[str, Any]  # one trial's numbers as analysis.run_result writes them
    started_at: float | None = None
    url: str | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class Parsed:
    """What a format's parser read from one file (peer_formats, peer_inference_perf)."""

    tool: str
    version: str | None
    elements: dict[str, str | None]
    trial: dict[str, Any]
    notes: list[str]
    started_at: float | None = None
    url: str | None = None


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(float(v)) else None


def _fmt(v: Any) -> str | None:
    """An element's value as the caliber diff prints it (None: unknown)."""
    if v is None:
        return None
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        if math.isinf(v):
            return "inf"
        return f"{v:g}"
    return str(v)


def _dist(xs: list[float]) -> str | None:
    if not xs:
        return None
    return _span(min(xs), max(xs), statistics.median(xs))


def _span(lo: float | None, hi: float | None, median: float | None) -> str | None:
    """Realized lengths as the caliber diff prints them: "fixed 256", "53–69 (median 66.5)"."""
    if lo is None or hi is None:
        return None
    if lo == hi:
        return f"fixed {lo:g}"
    return f"{lo:g}–{hi:g}" + (f" (median {median:g})" if median is not None else "")


def _rate(v: Any) -> str | None:
    if isinstance(v, str) and v.strip().lower() in ("inf", "infinity"):
        return "inf"
    if isinstance(v, float) and v == math.inf:  # JSON `Infinity` (SGLang writes it)
        return "inf"
    n = _num(v)
    return _fmt(n) if n is not None else None


def _ms_to_rate(ms: Any) -> float | None:
    n = _num(ms)
    return 1000.0 / n if n else None


# -- vllm bench serve ------------------------------------------------------------------------
def is_vllm_bench(doc: Any) -> bool:
    return isinstance(doc, dict) and "median_tpot_ms" in doc and (
        "model_id" in doc or "num_prompts" in doc)


def parse_vllm_bench(doc: dict[str, Any]) -> tuple[dict[str, str | None], dict[str, Any], list[str]]:
    """Elements, the trial and notes of one `vllm bench serve --save-result` file."""
    notes: list[str] = []
    completed = _num(doc.get("completed"))
    ins = [float(x) for x in doc.get("input_lens") or [] if _num(x) is not None]
    outs = [float(x) for x in doc.get("output_lens") or [] if _num(x) is not None]
    tin, tout = _num(doc.get("total_input_tokens")), _num(doc.get("total_output_tokens"))
    endpoint_type = str(doc.get("endpoint_type") or doc.get("backend") or "")
    endpoint = None
    ep = str(doc.get("endpoint") or "")
    if "chat" in endpoint_type or ep.endswith("/chat/completions"):
        endpoint = "chat"
    elif endpoint_type in ("openai", "vllm") or ep.endswith("/completions"):
        endpoint = "completions"
    rate = _rate(doc.get("request_rate"))
    maxc = _num(doc.get("max_concurrency"))
    conc = _fmt(int(maxc)) if maxc is not None else (
        "all requests at once" if rate == "inf" else ("no cap" if rate is not None else None))
    sp = doc.get("sampling_params")
    sampling: dict[str, Any] = sp if isinstance(sp, dict) else {}
    elements: dict[str, str | None] = {
        "model": _fmt(doc.get("model_id") or doc.get("model")),
        "endpoint": endpoint,
        "dataset": _fmt(doc.get("dataset_name") or doc.get("dataset")),
        "dataset sha256": None,  # vllm bench serve does not record one
        "input tokens (mean)": _fmt(round(tin / completed, 1)) if (tin and completed) else None,
        "input length distribution": _dist(ins),
        "output max_tokens": _fmt(sampling.get("max_tokens")),
        "output tokens (mean)": _fmt(round(tout / completed, 1)) if (tout and completed) else None,
        "output length distribution": _dist(outs),
        "ignore_eos": _fmt(doc.get("ignore_eos", sampling.get("ignore_eos"))),
        "temperature": _fmt(sampling.get("temperature", doc.get("temperature"))),
        "top_p": _fmt(sampling.get("top_p", doc.get("top_p"))),
        "top_k": _fmt(sampling.get("top_k", doc.get("top_k"))),
        "concurrency": conc,
        "request rate": rate,
        "burstiness": _fmt(_num(doc.get("burstiness"))) if rate not in (None, "inf") else
        ("-" if rate == "inf" else None),
        "requests per trial": _fmt(int(n)) if (n := _num(doc.get("num_prompts"))) else None,
    }
    declared = [k for k in ("dataset_name", "ignore_eos", "temperature", "top_p", "top_k")
                if k in doc]
    if declared:
        notes.append("declared with --metadata (not measured by the tool): " + ", ".join(declared))
    if not ins:
        notes.append("no per-request lengths in the file (saved without --save-detailed): "
                     "their distribution is unknown")
    decode = _ms_to_rate(doc.get("median_tpot_ms"))
    trial = {
        "idx": 0, "status": "ok", "requests": int(completed) if completed else None,
        "decode_rate": decode,  # per request: 1 / median TPOT (first token excluded)
        "ttft_s": (_num(doc.get("median_ttft_ms")) or 0) / 1000.0
        if _num(doc.get("median_ttft_ms")) is not None else None,
        "itl_median_s": (_num(doc.get("median_itl_ms")) or 0) / 1000.0
        if _num(doc.get("median_itl_ms")) is not None else None,
        "output_tokens": tout / completed if (tout and completed) else None,
        "prompt_tokens": tin / completed if (tin and completed) else None,
        "wall_rate": _num(doc.get("output_throughput")),
        "aggregate_rate": _num(doc.get("output_throughput")),
        "request_throughput": _num(doc.get("request_throughput")),
        "failed": _num(doc.get("failed")),
        # vllm bench serve ≥ 0.11 reads the server's spec-decode counters around the run:
        # MAL = 1 + accepted / drafts (bonus included), the engine's own count.
        "engine_mal": _num(doc.get("spec_decode_acceptance_length")),
        "engine_drafts": _num(doc.get("spec_decode_num_drafts")),
        "engine_accepted_tokens": _num(doc.get("spec_decode_accepted_tokens")),
    }
    return elements, trial, notes


# -- reading files ---------------------------------------------------------------------------
def read_peer_file(path: str, benchmark: int | None = None) -> PeerResult:
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"no such file: {path}", where="import", remedy="Give a result file")
    size = p.stat().st_size
    if size > MAX_FILE_BYTES:
        raise UsageError(f"{path} is {size / 1e6:.0f} MB (at most {MAX_FILE_BYTES // 1_000_000} MB)",
                         where="import", remedy="Import the tool's summary file, not its raw export")
    raw = p.read_bytes()
    sha = hashlib.sha256(raw).hexdigest()
    try:
        doc = json.loads(raw)
    except ValueError:
        doc = None
    appended: list[str] = []
    if doc is None:  # `vllm bench serve --append-result`: one JSON object per line
        rows = []
        for ln in raw.decode("utf-8", "replace").splitlines():
            if not ln.strip():
                continue
            try:
                rows.append(json.loads(ln))
            except ValueError:
                rows = []
                break
        if rows and is_vllm_bench(rows[-1]):
            doc = rows[-1]
            if len(rows) > 1:
                appended.append(f"{len(rows)} results appended in the file: the last one is "
                                "imported")
    if is_vllm_bench(doc):
        elements, trial, notes = parse_vllm_bench(doc)
        return PeerResult("vllm bench serve", _version(doc), path, sha, elements, trial,
                          started_at=_date(doc.get("date")), notes=[*appended, *notes])
    from decodescope.store import peer_formats

    found = next((f for parser in EXTRA_PARSERS
                  if (f := parser(raw, doc, path, benchmark)) is not None), None)
    found = found or peer_formats.parse(raw, doc, path)
    if found is None:
        raise UsageError(f"{path} is not a result file decodescope can import",
                         where="import", remedy="Give a `vllm bench serve --save-result` JSON, "
                                                "an AIPerf profile_export_aiperf.json (or .csv), "
                                                "an SGLang bench_serving JSONL or an "
                                                "inference-perf *_lifecycle_metrics.json")
    return PeerResult(found.tool, found.version, path, sha, found.elements, found.trial,
                      started_at=found.started_at, url=found.url, notes=found.notes)


def _version(doc: dict[str, Any]) -> str | None:
    v = doc.get("vllm_version") or doc.get("version")
    return str(v) if v else None


def _date(v: Any) -> float | None:
    from datetime import datetime

    if not isinstance(v, str):
        return None
    for fmt in ("%Y%m%d-%H%M%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S"):
        try:
            return datetime.strptime(v, fmt).timestamp()
        except ValueError:
            continue
    return None


def import_files(store: Store, paths: list[str], *, labels: dict[str, str] | None = None,
                 tool_version: str | None = None, benchmark: int | None = None
                 ) -> tuple[int, list[PeerResult], dict[str, Any]]:
    """Store the files as one run (one trial per file); give its id, the files read and the
    run's `imported` record (tool, version, the run's elements, unknown ones, notes). Files of
    different workloads (an element known in both and different) are refused: import them
    separately."""
    if not paths:
        raise UsageError("no files", where="import", remedy="Give one or more result files")
    results = [read_peer_file(p, benchmark) for p in paths]
    first = results[0]
    for r in results[1:]:
        if r.tool != first.tool:
            raise UsageError(f"{r.path} is from {r.tool}, {first.path} from {first.tool}",
                             where="import", remedy="Import each tool's files separately")
        diff = [k for k in ELEMENTS if first.elements.get(k) is not None
                and r.elements.get(k) is not None and first.elements[k] != r.elements[k]
                and k not in ("input tokens (mean)", "output tokens (mean)",
                              "input length distribution", "output length distribution")]
        if diff:
            raise UsageError(f"{r.path} and {first.path} ran different workloads ("
                             + ", ".join(f"{k}: {first.elements[k]} vs {r.elements[k]}"
                                         for k in diff) + ")",
                             where="import", remedy="Import them as separate runs")
    elements = dict(first.elements)
    for k in ("input tokens (mean)", "output tokens (mean)"):
        vs = [float(v) for r in results if (v := r.elements.get(k)) is not None]
        elements[k] = _fmt(round(statistics.fmean(vs), 1)) if len(vs) == len(results) else None
    for k in ("input length distribution", "output length distribution"):
        vs2 = {r.elements.get(k) for r in results}
        elements[k] = vs2.pop() if len(vs2) == 1 else None
    version = tool_version or first.tool_version
    imported = {"tool": first.tool, "tool_version": version,
                "files": [{"path": r.path, "sha256": r.sha256} for r in results],
                "elements": elements, "unknown": [k for k in ELEMENTS if elements.get(k) is None],
                "notes": sorted({n for r in results for n in r.notes})}
    findings = [f for r in results for audit in FILE_AUDITS
                for f in audit(r.trial.get("work"), r.path)]
    if findings:
        imported["audit"] = findings
    identity = "imported-" + hashlib.sha256(
        json.dumps({"tool": first.tool, "elements": elements}, sort_keys=True).encode()
    ).hexdigest()[:12]
    model = elements.get("model")
    run_id = store_runs.create_run(
        store, url=first.url, model=model, engine=None, caliber=None,
        caliber_ref=f"imported from {first.tool}", caliber_identity=identity,
        labels=labels or {}, kind="import", meta={"imported": imported})
    trials = []
    for i, r in enumerate(results):
        t = {**r.trial, "idx": i}
        trials.append(t)
        store_runs.add_trial(store, run_id, i, status="ok", started_at=r.started_at or 0.0,
                             wall_anchor_s=0.0, result=t, requests=[])
    ok = [t for t in trials if t.get("decode_rate") is not None]
    result = {"trials": trials, "imported": imported,
              "client": {"decode_rate": {"median": statistics.median(
                  [t["decode_rate"] for t in ok])} if ok else None},
              "caliber_status": "unknown"}
    store_runs.update_run(store, run_id, status="complete", result=result)
    return run_id, results, imported
