"""`vllm bench serve --save-result` JSON (and `--append-result`: one JSON object a line, each
line one result).

The file records the model, the endpoint, the dataset's name, the realized lengths (per request
with --save-detailed), the concurrency cap, the request rate and burstiness, and the sampling
only where `--metadata` or `sampling_params` put it; the lengths asked for
(--random-input-len / --random-output-len), ignore_eos and the sampling are otherwise not in it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from decodescope.peers.common import Parsed, Source, dist, fmt, ms_to_rate, num, rate_of

TOOL = "vllm bench serve"
DECODE_FROM = "1 / median TPOT"
FILES = "a `vllm bench serve --save-result` JSON (or its --append-result JSONL)"


def parse(src: Source) -> list[Parsed] | None:
    docs = [src.doc] if src.doc is not None else (src.rows or [])
    if not docs or not all(is_vllm_bench(d) for d in docs):
        return None
    out = []
    for d in docs:
        elements, trial, notes = parse_vllm_bench(d)
        out.append(Parsed(TOOL, _version(d), elements, trial, notes, started_at=_date(d.get("date"))))
    return out


def is_vllm_bench(doc: Any) -> bool:
    return isinstance(doc, dict) and "median_tpot_ms" in doc and (
        "model_id" in doc or "num_prompts" in doc)


def parse_vllm_bench(doc: dict[str, Any]) -> tuple[dict[str, str | None], dict[str, Any], list[str]]:
    """Elements, the trial and notes of one `vllm bench serve --save-result` file."""
    notes: list[str] = []
    completed = num(doc.get("completed"))
    ins = [float(x) for x in doc.get("input_lens") or [] if num(x) is not None]
    outs = [float(x) for x in doc.get("output_lens") or [] if num(x) is not None]
    tin, tout = num(doc.get("total_input_tokens")), num(doc.get("total_output_tokens"))
    endpoint_type = str(doc.get("endpoint_type") or doc.get("backend") or "")
    endpoint = None
    ep = str(doc.get("endpoint") or "")
    if "chat" in endpoint_type or ep.endswith("/chat/completions"):
        endpoint = "chat"
    elif endpoint_type in ("openai", "vllm") or ep.endswith("/completions"):
        endpoint = "completions"
    rate_s = rate_of(doc.get("request_rate"))
    maxc = num(doc.get("max_concurrency"))
    conc = fmt(int(maxc)) if maxc is not None else (
        "all requests at once" if rate_s == "inf" else ("no cap" if rate_s is not None else None))
    sp = doc.get("sampling_params")
    sampling: dict[str, Any] = sp if isinstance(sp, dict) else {}
    elements: dict[str, str | None] = {
        "model": fmt(doc.get("model_id") or doc.get("model")),
        "endpoint": endpoint,
        "dataset": fmt(doc.get("dataset_name") or doc.get("dataset")),
        "dataset sha256": None,  # vllm bench serve does not record one
        "input tokens (mean)": fmt(round(tin / completed, 1)) if (tin and completed) else None,
        "input length distribution": dist(ins),
        "output max_tokens": fmt(sampling.get("max_tokens")),
        "output tokens (mean)": fmt(round(tout / completed, 1)) if (tout and completed) else None,
        "output length distribution": dist(outs),
        "ignore_eos": fmt(doc.get("ignore_eos", sampling.get("ignore_eos"))),
        "temperature": fmt(sampling.get("temperature", doc.get("temperature"))),
        "top_p": fmt(sampling.get("top_p", doc.get("top_p"))),
        "top_k": fmt(sampling.get("top_k", doc.get("top_k"))),
        "concurrency": conc,
        "request rate": rate_s,
        "burstiness": fmt(num(doc.get("burstiness"))) if rate_s not in (None, "inf") else
        ("-" if rate_s == "inf" else None),
        "requests per trial": fmt(int(n)) if (n := num(doc.get("num_prompts"))) else None,
    }
    declared = [k for k in ("dataset_name", "ignore_eos", "temperature", "top_p", "top_k")
                if k in doc]
    if declared:
        notes.append("declared with --metadata (not measured by the tool): " + ", ".join(declared))
    if not ins:
        notes.append("no per-request lengths in the file (saved without --save-detailed): "
                     "their distribution is unknown")
    decode = ms_to_rate(doc.get("median_tpot_ms"))
    trial = {
        "idx": 0, "status": "ok", "requests": int(completed) if completed else None,
        "decode_rate": decode,  # per request: 1 / median TPOT (first token excluded)
        "ttft_s": (num(doc.get("median_ttft_ms")) or 0) / 1000.0
        if num(doc.get("median_ttft_ms")) is not None else None,
        "itl_median_s": (num(doc.get("median_itl_ms")) or 0) / 1000.0
        if num(doc.get("median_itl_ms")) is not None else None,
        "output_tokens": tout / completed if (tout and completed) else None,
        "prompt_tokens": tin / completed if (tin and completed) else None,
        "wall_rate": num(doc.get("output_throughput")),
        "aggregate_rate": num(doc.get("output_throughput")),
        "request_throughput": num(doc.get("request_throughput")),
        "failed": num(doc.get("failed")),
        # vllm bench serve ≥ 0.11 reads the server's spec-decode counters around the run:
        # MAL = 1 + accepted / drafts (bonus included), the engine's own count.
        "engine_mal": num(doc.get("spec_decode_acceptance_length")),
        "engine_drafts": num(doc.get("spec_decode_num_drafts")),
        "engine_accepted_tokens": num(doc.get("spec_decode_accepted_tokens")),
    }
    return elements, trial, notes


def _version(doc: dict[str, Any]) -> str | None:
    v = doc.get("vllm_version") or doc.get("version")
    return str(v) if v else None


def _date(v: Any) -> float | None:
    if not isinstance(v, str):
        return None
    for form in ("%Y%m%d-%H%M%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S"):
        try:
            return datetime.strptime(v, form).timestamp()
        except ValueError:
            continue
    return None
