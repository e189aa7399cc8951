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

from decodescope.peers.common import Fields, Parsed, Source, dist, doc_has, fmt, num, rate_of

TOOL = "vllm bench serve"
DECODE_FROM = "1 / median TPOT"
FILES = "a `vllm bench serve --save-result` JSON (or its --append-result JSONL)"


def parse(src: Source) -> list[Parsed] | None:
    docs = [src.doc] if src.doc is not None else (src.rows or [])
    if not docs or not all(is_vllm_bench(d) for d in docs):
        return None
    out = []
    for i, d in enumerate(docs):
        f = Fields(d, src.path, i + 1 if src.doc is None else None)
        elements, trial, notes = parse_vllm_bench(f)
        out.append(Parsed(TOOL, _version(d), elements, trial, [*f.withheld, *notes],
                          started_at=_date(d.get("date")),
                          realized=("input length distribution", "output length distribution")))
    return out


def is_vllm_bench(doc: Any) -> bool:
    return isinstance(doc, dict) and "median_tpot_ms" in doc and (
        "model_id" in doc or "num_prompts" in doc)


def parse_vllm_bench(f: Fields) -> tuple[dict[str, str | None], dict[str, Any], list[str]]:
    """Elements, the trial and notes of one `vllm bench serve --save-result` result."""
    doc = f.doc
    notes: list[str] = []
    completed = f.count("completed")
    ins = [float(x) for x in doc.get("input_lens") or [] if num(x) is not None and x >= 0]
    outs = [float(x) for x in doc.get("output_lens") or [] if num(x) is not None and x >= 0]
    tin, tout = f.count("total_input_tokens"), f.count("total_output_tokens")
    endpoint_type = str(doc.get("endpoint_type") or doc.get("backend") or "")
    endpoint = None
    ep = str(doc.get("endpoint") or "")
    if "chat" in endpoint_type or ep.endswith("/chat/completions"):
        endpoint = "chat"
    elif endpoint_type in ("openai", "vllm") or ep.endswith("/completions"):
        endpoint = "completions"
    rr = doc.get("request_rate")
    rate_s = "inf" if rate_of(rr) == "inf" else fmt(f.amount("request_rate", positive=True))
    maxc = f.count("max_concurrency")
    conc = fmt(maxc) if maxc is not None else None if doc_has(f, "max_concurrency") else (
        "all requests at once" if rate_s == "inf" else ("no cap" if rate_s is not None else None))
    sp = doc.get("sampling_params")
    sampling: dict[str, Any] = sp if isinstance(sp, dict) else {}
    n_prompts = f.count("num_prompts")
    burst = f.amount("burstiness", positive=True)
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
        "burstiness": fmt(burst) if rate_s not in (None, "inf") else
        ("-" if rate_s == "inf" else None),
        "requests per trial": fmt(n_prompts) if n_prompts else None,
    }
    declared = [k for k in ("dataset_name", "ignore_eos", "temperature", "top_p", "top_k")
                if k in doc]
    if declared:
        notes.append("declared with --metadata (not measured by the tool): " + ", ".join(declared))
    if not ins:
        notes.append("no per-request lengths in the file (saved without --save-detailed): "
                     "their distribution is unknown")
    ttft = f.seconds("median_ttft_ms", scale=1e-3)
    itl = f.seconds("median_itl_ms", scale=1e-3)
    trial = {
        "idx": 0, "status": "ok", "requests": completed or None,
        # per request: 1 / median TPOT (first token excluded)
        "decode_rate": f.rate_per_token("median_tpot_ms"),
        "ttft_s": ttft,
        "itl_median_s": itl,
        "output_tokens": tout / completed if (tout and completed) else None,
        "prompt_tokens": tin / completed if (tin and completed) else None,
        "wall_rate": f.amount("output_throughput"),
        "aggregate_rate": f.amount("output_throughput"),
        "request_throughput": f.amount("request_throughput"),
        "failed": f.count("failed"),
        # vllm bench serve ≥ 0.11 reads the server's spec-decode counters around the run:
        # MAL = 1 + accepted / drafts (bonus included), the engine's own count.
        "engine_mal": f.amount("spec_decode_acceptance_length"),
        "engine_drafts": f.count("spec_decode_num_drafts"),
        "engine_accepted_tokens": f.count("spec_decode_accepted_tokens"),
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
