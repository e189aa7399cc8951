"""SGLang `python -m sglang.bench_serving --output-file F`: a JSONL file, one result a line
(bench_serving appends: each run of one workload adds a line, each line is one trial).
"""

from __future__ import annotations

from typing import Any

from decodescope.peers.common import Fields, Parsed, Source, as_dict, doc_has, fmt, rate_of

TOOL = "sglang bench_serving"
DECODE_FROM = "1 / median TPOT"
FILES = "an SGLang `bench_serving --output-file` JSONL"


def parse(src: Source) -> list[Parsed] | None:
    rows = [src.doc] if src.doc is not None else (src.rows or [])
    if not rows or not all(isinstance(r, dict) and is_sglang(r) for r in rows):
        return None
    return [parse_sglang(Fields(r, src.path, i + 1 if src.doc is None else None))
            for i, r in enumerate(rows)]


def is_sglang(d: dict[str, Any]) -> bool:
    return "median_itl_ms" in d and "total_output_tokens_retokenized" in d


_SGLANG_ENDPOINT = {"vllm": "completions", "sglang-oai": "completions", "lmdeploy": "completions",
                    "sglang": "sglang /generate", "sglang-native": "sglang /generate"}


def parse_sglang(f: Fields) -> Parsed:
    """One result line of `python -m sglang.bench_serving --output-file F` (SGLang 0.5.23:
    backend, dataset_name, request_rate (JSON `Infinity` when inf), max_concurrency,
    random_input_len, random_output_len, random_range_ratio, completed, total_*_tokens, *_ms,
    and `server_info`: the server's /get_server_info when the server is SGLang (its
    `model_path`, `served_model_name`, `version`), null otherwise). It records neither the
    number of prompts asked for, the sampling nor --disable-ignore-eos / --extra-request-body:
    those stay unknown."""
    d = f.doc
    notes: list[str] = []
    completed = f.count("completed")
    tin, tout = f.count("total_input_tokens"), f.count("total_output_tokens")
    backend = str(d.get("backend") or "")
    rate = "inf" if rate_of(d.get("request_rate")) == "inf" else fmt(
        f.amount("request_rate", positive=True))
    maxc = f.count("max_concurrency")
    ds = d.get("dataset_name")
    ratio = f.amount("random_range_ratio", limit=1.0)
    dist_in = max_tokens = None
    if ds in ("random", "random-ids") and ratio is not None:
        # each request's lengths drawn as integers in [int(ratio × len), len]; its max_tokens
        # is its drawn output length
        ri, ro = f.count("random_input_len"), f.count("random_output_len")
        dist_in = (f"uniform {int(ratio * ri)}–{ri:g}" if ratio < 1 else f"fixed {ri:g}") if ri else None
        max_tokens = (f"uniform {int(ratio * ro)}–{ro:g}" if ratio < 1 else f"{ro:g}") if ro else None
    elif ds == "sharegpt":
        max_tokens = fmt(f.count("sharegpt_output_len"))
    maxc_s = fmt(maxc) if maxc is not None else None if doc_has(f, "max_concurrency") else (
        "all requests at once" if rate == "inf" else ("no cap" if rate is not None else None))
    info = as_dict(d.get("server_info"))
    model = (d.get("model_id") or d.get("model") or info.get("model_path")
             or info.get("served_model_name"))
    n_prompts = f.count("num_prompts")
    elements: dict[str, str | None] = {
        "model": fmt(model) if isinstance(model, str) and model else None,
        "endpoint": ("chat" if backend.endswith("-chat") else _SGLANG_ENDPOINT.get(backend)),
        "dataset": fmt(ds),
        "dataset sha256": None,
        "input tokens (mean)": fmt(round(tin / completed, 1)) if (tin and completed) else None,
        "input length distribution": dist_in,
        "output max_tokens": max_tokens,
        "output tokens (mean)": fmt(round(tout / completed, 1)) if (tout and completed) else None,
        "output length distribution": None,  # only totals in the file
        "ignore_eos": None, "temperature": None, "top_p": None, "top_k": None,
        "concurrency": maxc_s,
        "request rate": rate,
        # finite rates are a Poisson process (its --help): burstiness 1
        "burstiness": "-" if rate == "inf" else ("1" if rate is not None else None),
        "requests per trial": fmt(n_prompts) if n_prompts else None,
    }
    # The decode rate from the median TPOT; from the median ITL only where the file has no
    # TPOT at all (a bad TPOT is withheld, not replaced).
    tpot_key = "median_tpot_ms" if d.get("median_tpot_ms") is not None else "median_itl_ms"
    if tpot_key == "median_itl_ms":
        notes.append("no median TPOT in the file: decode rate from the median ITL")
    ttft = f.seconds("median_ttft_ms", scale=1e-3)
    trial = {"idx": 0, "status": "ok", "requests": completed or None,
             "decode_rate": f.rate_per_token(tpot_key),
             "ttft_s": ttft,
             "output_tokens": tout / completed if (tout and completed) else None,
             "prompt_tokens": tin / completed if (tin and completed) else None,
             "wall_rate": f.amount("output_throughput"),
             "aggregate_rate": f.amount("output_throughput"),
             "request_throughput": f.amount("request_throughput"),
             "engine_mal": f.amount("accept_length")}
    if info.get("version"):
        notes.append(f"server: SGLang {info['version']} (its server_info)")
    missing = [k for k, v in (("the model (no server_info: the server is not SGLang)",
                               elements["model"]),
                              ("the number of prompts", elements["requests per trial"])) if v is None]
    notes = [*f.withheld, *notes, "not in bench_serving's file, so unknown: " + ", ".join(missing + [
        "ignore_eos (--disable-ignore-eos)", "the sampling (--temperature, "
        "--extra-request-body)"])]
    return Parsed(TOOL, None, elements, trial, notes)
