"""Derive the fixtures under derived/ from the real tools' files beside this script, editing
numbers only (README.md, "derived/"). Run from anywhere: `python tests/data/peers/derive.py`.
Deterministic: the same files every time."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
OUT = HERE / "derived"
JITTER = 1.01  # the third baseline trial: the first one 1 % slower per token
# SGLang's server_info is null against the simulator; these two are SYNTHETIC, shaped like the
# subset of SGLang's /get_server_info that bench_serving copies into its line.
SERVER_INFO = {"model_path": "google/gemma-3-270m", "served_model_name": "gemma-3-270m",
               "version": "0.5.23"}
OTHER_MODEL = {**SERVER_INFO, "model_path": "google/gemma-3-1b-it",
               "served_model_name": "gemma-3-1b-it"}


def slower(d: dict[str, Any], k: float) -> dict[str, Any]:
    """Every per-token time k× longer, every rate k× lower (vllm bench serve / SGLang keys)."""
    out = dict(d)
    for key, v in d.items():
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            if key == "latencies" and isinstance(v, list):
                out[key] = [x * k for x in v]
            continue
        if "tpot" in key or "itl" in key or "e2e" in key or key == "duration":
            out[key] = v * k
        elif "throughput" in key or key == "max_output_tokens_per_s":
            out[key] = v / k
    return out


_AIPERF_TIMES = ("inter_token_latency", "request_latency", "inter_chunk_latency",
                 "decode_duration", "benchmark_duration")
_AIPERF_RATES = ("output_token_throughput_per_user", "output_token_throughput",
                 "request_throughput", "total_token_throughput", "input_token_throughput",
                 "effective_decode_throughput_per_user", "effective_decode_throughput")


def aiperf_slower(d: dict[str, Any], k: float) -> dict[str, Any]:
    out = json.loads(json.dumps(d))
    for tag in (*_AIPERF_TIMES, *_AIPERF_RATES):
        m = out.get(tag)
        if isinstance(m, dict):
            f = k if tag in _AIPERF_TIMES else 1 / k
            for s, v in m.items():
                if s not in ("unit", "count") and isinstance(v, (int, float)):
                    m[s] = v * f
    return out


def aiperf_isl(d: dict[str, Any], isl: float) -> dict[str, Any]:
    out = json.loads(json.dumps(d))
    k = isl / out["input_config"]["datasets"][0]["prompts"]["isl"]["mean"]
    out["input_config"]["datasets"][0]["prompts"]["isl"]["mean"] = isl
    for tag in ("input_sequence_length", "total_isl", "usage_prompt_tokens"):
        m = out.get(tag)
        if isinstance(m, dict):
            for s, v in m.items():
                if s not in ("unit", "count") and isinstance(v, (int, float)):
                    m[s] = v * k
    return out


def write(path: Path, docs: list[dict[str, Any]], jsonl: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if jsonl:
        path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    else:
        path.write_text(json.dumps(docs[0], indent=2) + "\n")


def main() -> None:
    shutil.rmtree(OUT, ignore_errors=True)
    # vllm bench serve: two real runs and the first one 1 % slower per token
    v = [json.loads((HERE / f"vllm-bench-serve-{i}.json").read_text()) for i in (1, 2)]
    base = [v[0], v[1], slower(v[0], JITTER)]
    for case, k in (("base", 1.0), ("slow30", 1 / 0.70), ("slow2", 1 / 0.98)):
        for i, d in enumerate(base, 1):
            write(OUT / "vllm" / case / f"run-{i}.json", [slower(d, k)])
    for i, d in enumerate(base, 1):  # input length 8192 instead of ~135: its totals ×61
        e = dict(d)
        e["total_input_tokens"] = 8192 * d["completed"]
        e["total_token_throughput"] = d["total_token_throughput"] * (
            (8192 * d["completed"] + d["total_output_tokens"])
            / (d["total_input_tokens"] + d["total_output_tokens"]))
        write(OUT / "vllm" / "in8192" / f"run-{i}.json", [e])
    # AIPerf
    a = [json.loads((HERE / f"aiperf-c2-{i}.json").read_text()) for i in (1, 2)]
    abase = [a[0], a[1], aiperf_slower(a[0], JITTER)]
    for case, k in (("base", 1.0), ("slow30", 1 / 0.70), ("slow2", 1 / 0.98)):
        for i, d in enumerate(abase, 1):
            write(OUT / "aiperf" / case / f"run-{i}.json", [aiperf_slower(d, k)])
    for i, d in enumerate(abase, 1):
        write(OUT / "aiperf" / "in8192" / f"run-{i}.json", [aiperf_isl(d, 8192.0)])
    # SGLang bench_serving: three results appended to one file, as its --output-file does
    s = [json.loads((HERE / f"sglang-c2-{i}.jsonl").read_text()) for i in (1, 2)]
    sbase = [{**x, "server_info": SERVER_INFO} for x in (s[0], s[1], slower(s[0], JITTER))]
    for case, k in (("base", 1.0), ("slow30", 1 / 0.70), ("slow2", 1 / 0.98)):
        write(OUT / "sglang" / case / "runs.jsonl", [slower(d, k) for d in sbase], jsonl=True)
    write(OUT / "sglang" / "in1024" / "runs.jsonl",
          [{**d, "random_input_len": 1024, "total_input_tokens": 1024 * d["completed"],
            "total_input_text_tokens": 1024 * d["completed"]} for d in sbase], jsonl=True)
    write(OUT / "sglang" / "model" / "runs.jsonl",
          [{**d, "server_info": OTHER_MODEL} for d in sbase], jsonl=True)


if __name__ == "__main__":
    main()
