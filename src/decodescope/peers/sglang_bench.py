"""SGLang `python -m sglang.bench_serving --output-file F`: a JSONL file, one result a line
(bench_serving appends: each run of one workload adds a line, each line is one trial).
"""

from __future__ import annotations

from typing import Any

from decodescope.peers.common import Parsed, Source, fmt, ms_to_rate, num, rate_of

TOOL = "sglang bench_serving"
DECODE_FROM = "1 / median TPOT"
FILES = "an SGLang `bench_serving --output-file` JSONL"


def parse(src: Source) -> list[Parsed] | None:
    rows = [src.doc] if src.doc is not None else (src.rows or [])
    if not rows or not all(isinstance(r, dict) and is_sglang(r) for r in rows):
        return None
    return [parse_sglang(r, []) for r in rows]


def is_sglang(d: dict[str, Any]) -> bool:
    return "median_itl_ms" in d and "total_output_tokens_retokenized" in d


_SGLANG_ENDPOINT = {"vllm": "completions", "sglang-oai": "completions", "lmdeploy": "completions",
                    "sglang": "sglang /generate", "sglang-native": "sglang /generate"}


def parse_sglang(d: dict[str, Any], notes: list[str]) -> Parsed:
    """One result line of `python -m sglang.bench_serving --output-file F` (SGLang 0.5.23:
    backend, dataset_name, request_rate (JSON `Infinity` when inf), max_concurrency,
    random_input_len, random_output_len, random_range_ratio, completed, total_*_tokens, *_ms).
    It records neither the model, the number of prompts asked for, the sampling nor
    --disable-ignore-eos / --extra-request-body: those stay unknown."""
    completed = num(d.get("completed"))
    tin, tout = num(d.get("total_input_tokens")), num(d.get("total_output_tokens"))
    backend = str(d.get("backend") or "")
    rate = rate_of(d.get("request_rate"))
    maxc = num(d.get("max_concurrency"))
    ds = d.get("dataset_name")
    ratio = num(d.get("random_range_ratio"))
    dist_in = max_tokens = None
    if ds in ("random", "random-ids") and ratio is not None:
        # each request's lengths drawn as integers in [int(ratio × len), len]; its max_tokens
        # is its drawn output length
        ri, ro = num(d.get("random_input_len")), num(d.get("random_output_len"))
        dist_in = (f"uniform {int(ratio * ri)}–{ri:g}" if ratio < 1 else f"fixed {ri:g}") if ri else None
        max_tokens = (f"uniform {int(ratio * ro)}–{ro:g}" if ratio < 1 else f"{ro:g}") if ro else None
    elif ds == "sharegpt":
        max_tokens = fmt(d.get("sharegpt_output_len"))
    maxc_s = fmt(int(maxc)) if maxc is not None else (
        "all requests at once" if rate == "inf" else ("no cap" if rate is not None else None))
    elements: dict[str, str | None] = {
        "model": fmt(d.get("model_id") or d.get("model")),
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
        "requests per trial": fmt(int(n)) if (n := num(d.get("num_prompts"))) else None,
    }
    trial = {"idx": 0, "status": "ok", "requests": int(completed) if completed else None,
             "decode_rate": ms_to_rate(d.get("median_tpot_ms") or d.get("median_itl_ms")),
             "ttft_s": (num(d.get("median_ttft_ms")) or 0) / 1000.0
             if num(d.get("median_ttft_ms")) is not None else None,
             "output_tokens": tout / completed if (tout and completed) else None,
             "prompt_tokens": tin / completed if (tin and completed) else None,
             "wall_rate": num(d.get("output_throughput")),
             "aggregate_rate": num(d.get("output_throughput")),
             "request_throughput": num(d.get("request_throughput")),
             "engine_mal": num(d.get("accept_length"))}
    if d.get("median_tpot_ms") is None:
        notes = [*notes, "no median TPOT in the file: decode rate from the median ITL"]
    missing = [k for k, v in (("the model", elements["model"]),
                              ("the number of prompts", elements["requests per trial"])) if v is None]
    notes = [*notes, "not in bench_serving's file, so unknown: " + ", ".join(missing + [
        "ignore_eos (--disable-ignore-eos)", "the sampling (--temperature, "
        "--extra-request-body)"])]
    return Parsed("sglang bench_serving", None, elements, trial, notes)
