"""AIPerf `profile_export_aiperf.json` (metrics by tag and the `input_config` it ran under) and
its `profile_export_aiperf.csv` (metrics only: no configuration).
"""

from __future__ import annotations

import csv
import io
from datetime import datetime
from typing import Any

from decodescope.peers.common import (
    ELEMENTS,
    MAX_DECODE_RATE,
    Fields,
    Parsed,
    Source,
    as_dict,
    fmt,
    num,
    rate_of,
    span,
)

TOOL = "aiperf"
DECODE_FROM = "median output token throughput per user"
FILES = "an AIPerf profile_export_aiperf.json (or .csv)"


def parse(src: Source) -> list[Parsed] | None:
    if src.doc is None:
        text = src.text
        if text.lstrip("\ufeff").startswith("Metric,avg,"):
            got = parse_aiperf_csv(text, src.path)
            return [got] if got is not None else None
        return None
    if isinstance(src.doc, dict) and is_aiperf(src.doc):
        return [parse_aiperf(src.doc, src.path)]
    return None


def is_aiperf(d: dict[str, Any]) -> bool:
    return ("input_config" in d or "records" in d or "aiperf_version" in d) and any(
        k in d for k in ("output_token_throughput_per_user", "inter_token_latency", "records"))


def _tag(d: dict[str, Any], name: str) -> tuple[str, ...]:
    """Where a metric's stats are: at the top (0.13) or under `records` (older)."""
    if d.get(name) is None and isinstance(d.get("records"), dict):
        return ("records", name)
    return (name,)


def _get(d: Any, *path: str) -> Any:
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


def _normal(dist: dict[str, Any]) -> str | None:
    """AIPerf's --isl / --osl: a normal distribution; stddev 0 (its default, left out of the
    file) is one length."""
    mean, sd = num(dist.get("mean")), num(dist.get("stddev")) or 0.0
    if mean is None:
        return None
    return f"fixed {mean:g}" if sd == 0 else f"normal mean {mean:g}, sd {sd:g}"


def parse_aiperf(d: dict[str, Any], path: str = "-") -> Parsed:
    """`profile_export_aiperf.json`: metrics by tag ({"avg", "p50", ..., "unit"}) and the
    `input_config` it ran under. AIPerf 0.13 (schema 1.4): `models.items[].name`,
    `endpoint.{type, urls, streaming, extra}`, `datasets[].prompts.{isl, osl}`, `phases[]` (type
    concurrency | poisson | gamma | constant, `requests`, `concurrency`, `rate`, `smoothness`);
    keys at their default are left out. Older layouts (`endpoint.model_names`,
    `input.prompt.*_tokens`, `loadgen`) are read where 0.13's keys are absent."""
    cfg = as_dict(d.get("input_config"))
    ep = as_dict(cfg.get("endpoint"))
    notes: list[str] = []
    f = Fields(d, path)

    def metric(name: str, stat: str = "avg") -> float | None:
        return f.amount(*_tag(d, name), stat)

    items = _get(cfg, "models", "items")
    models = ([m.get("name") for m in items if isinstance(m, dict)] if isinstance(items, list)
              else ep.get("model_names") or [])
    datasets = [x for x in cfg.get("datasets") or [] if isinstance(x, dict)]
    ds = next((x for x in datasets if x.get("name") == "main"), datasets[0] if datasets else {})
    phases = [x for x in cfg.get("phases") or [] if isinstance(x, dict)]
    phase = next((x for x in phases if x.get("kind") == "profiling" or x.get("name") == "profiling"),
                 {})
    loadgen = as_dict(cfg.get("loadgen"))
    prompt = as_dict(_get(cfg, "input", "prompt"))
    isl = as_dict(_get(ds, "prompts", "isl")) or as_dict(prompt.get("input_tokens"))
    osl = as_dict(_get(ds, "prompts", "osl")) or as_dict(prompt.get("output_tokens"))
    extra = ep.get("extra") if isinstance(ep.get("extra"), dict) else _get(cfg, "input", "extra")
    if isinstance(extra, list):  # older: [[key, value], ...]
        extra = {str(x[0]): x[1] for x in extra if isinstance(x, (list, tuple)) and len(x) == 2}
    extra = as_dict(extra)
    etype = str(ep.get("type") or "")
    dtype = ds.get("type") or ("synthetic" if isl else None)
    dataset = fmt(ds.get("path") or ds.get("file") or _get(cfg, "input", "file")
                   or _get(cfg, "input", "public_dataset") or dtype)

    ptype = phase.get("type") or ("concurrency" if loadgen.get("concurrency") is not None
                                  and loadgen.get("request_rate") is None else None)
    conc = f.count_of(phase.get("concurrency", loadgen.get("concurrency")),
                      "input_config.phases[profiling].concurrency")
    rate_v = phase.get("rate", loadgen.get("request_rate"))
    if rate_of(rate_v) != "inf":
        rate_v = f.amount_of(rate_v, "input_config.phases[profiling].rate", positive=True)
    rate: str | None
    burst: str | None
    if ptype == "concurrency":  # a new request as soon as one ends: no arrival rate
        rate, burst = "inf", "-"
    else:
        rate = rate_of(rate_v)
        mode = ptype or loadgen.get("request_rate_mode")
        burst = ("1" if mode == "poisson" else "constant" if mode == "constant" else
                 fmt(num(phase.get("smoothness"))) if mode == "gamma" else None)
        if mode == "gamma" and burst is None:
            notes.append("gamma arrivals without a smoothness in the file: burstiness unknown")
    osl_desc = _normal(osl)
    requests = f.count_of(phase.get("requests", loadgen.get("request_count")),
                          "input_config.phases[profiling].requests")
    elements: dict[str, str | None] = {
        "model": fmt(models[0]) if models else None,
        "endpoint": "chat" if etype == "chat" else "completions" if etype == "completions" else None,
        "dataset": dataset,
        "dataset sha256": None,
        "input tokens (mean)": fmt(metric("input_sequence_length")),
        # synthetic: the lengths asked for (one workload across files); else what was sent
        "input length distribution": _normal(isl) if dtype == "synthetic" else span(
            metric("input_sequence_length", "min"), metric("input_sequence_length", "max"),
            metric("input_sequence_length", "p50")),
        # AIPerf sends --osl as max_completion_tokens, drawn per request when it has a stddev
        "output max_tokens": (osl_desc.removeprefix("fixed ") if osl_desc else None),
        "output tokens (mean)": fmt(metric("output_sequence_length")),
        "output length distribution": span(metric("output_sequence_length", "min"),
                                            metric("output_sequence_length", "max"),
                                            metric("output_sequence_length", "p50")),
        "ignore_eos": fmt(extra["ignore_eos"]) if "ignore_eos" in extra else None,
        "temperature": fmt(extra["temperature"]) if "temperature" in extra else None,
        "top_p": fmt(extra["top_p"]) if "top_p" in extra else None,
        "top_k": fmt(extra["top_k"]) if "top_k" in extra else None,
        "concurrency": (fmt(conc) if conc is not None else
                        "no cap" if rate not in (None, "inf") else None),
        "request rate": rate,
        "burstiness": burst,
        "requests per trial": fmt(requests) if requests else None,
    }
    if ep.get("streaming") is False:
        notes.append("AIPerf ran without --streaming: no per-token timing, no decode rate")
    if cfg and not ep.get("use_server_token_count"):
        notes.append("token counts are AIPerf's own tokenizer's (run without "
                     "--use-server-token-count), not the server's")
    per_user = (*_tag(d, "output_token_throughput_per_user"), "p50")
    decode = (f.amount(*per_user, positive=True, limit=MAX_DECODE_RATE)
              if f.raw(*per_user) is not None else
              f.rate_per_token(*_tag(d, "inter_token_latency"), "p50"))
    trial = _aiperf_trial(metric, decode)
    notes = [*f.withheld, *notes]
    errors = d.get("error_summary")
    if isinstance(errors, list):
        trial["failed"] = float(sum(num(e.get("count")) or 0 for e in errors
                                    if isinstance(e, dict)))
    version = d.get("aiperf_version") or d.get("version")
    url = next(iter(ep.get("urls") or []), None) or ep.get("url")
    realized = (("output length distribution",) if dtype == "synthetic" else
                ("input length distribution", "output length distribution"))
    return Parsed(TOOL, str(version) if version else None, elements, trial, notes,
                  realized=realized,
                  started_at=_iso(d.get("start_time")), url=str(url) if url else None)


def _aiperf_trial(metric: Any, decode: float | None) -> dict[str, Any]:
    """The trial's numbers from AIPerf's metrics, JSON tags or CSV rows alike; `decode`: the
    decode rate, read once by the caller."""
    ttft = metric("time_to_first_token", "p50")
    done = metric("completed_request_count") or metric("request_count")
    return {"idx": 0, "status": "ok", "requests": int(done) if done else None,
            # per request: AIPerf's (OSL − 1) / (latency − TTFT), its median over requests
            "decode_rate": decode,
            "ttft_s": ttft / 1000.0 if ttft is not None else None,
            "output_tokens": metric("output_sequence_length"),
            "prompt_tokens": metric("input_sequence_length"),
            "wall_rate": metric("output_token_throughput"),
            "aggregate_rate": metric("output_token_throughput"),
            "request_throughput": metric("request_throughput")}


# CSV rows (display names) → the JSON's tags
_CSV_TAGS = {
    "Output Token Throughput Per User (tokens/sec/user)": "output_token_throughput_per_user",
    "Time to First Token (ms)": "time_to_first_token",
    "Inter Token Latency (ms)": "inter_token_latency",
    "Output Sequence Length (tokens)": "output_sequence_length",
    "Input Sequence Length (tokens)": "input_sequence_length",
    "Output Token Throughput (tokens/sec)": "output_token_throughput",
    "Request Throughput (requests/sec)": "request_throughput",
    "Request Count": "request_count",
    "Completed Requests (Success + Error)": "completed_request_count",
}


def parse_aiperf_csv(text: str, path: str = "-") -> Parsed | None:
    """`profile_export_aiperf.csv`: a table of metrics (Metric, avg, min, max, …, p50, …), then
    a Metric,Value table. It records no configuration: only the realized lengths are known.
    Its cells pass the same checks as the JSON's numbers (named by the JSON's tags)."""
    metrics: dict[str, dict[str, Any]] = {}
    header: list[str] = []
    for row in csv.reader(io.StringIO(text)):
        if not row:
            continue
        if row[0] == "Metric":
            header = ["avg" if h == "Value" else h for h in row]
            continue
        tag = _CSV_TAGS.get(row[0])
        if tag and header:
            metrics[tag] = {h: _csvnum(v) for h, v in zip(header[1:], row[1:], strict=False)}
    if "output_sequence_length" not in metrics and "output_token_throughput_per_user" not in metrics:
        return None

    f = Fields(metrics, path)

    def metric(name: str, stat: str = "avg") -> float | None:
        return f.amount(name, stat)

    elements: dict[str, str | None] = dict.fromkeys(ELEMENTS)
    elements |= {
        "input tokens (mean)": fmt(metric("input_sequence_length")),
        "output tokens (mean)": fmt(metric("output_sequence_length")),
        "output length distribution": span(metric("output_sequence_length", "min"),
                                            metric("output_sequence_length", "max"),
                                            metric("output_sequence_length", "p50")),
    }
    notes = ["AIPerf's CSV records no configuration (model, endpoint, load, lengths asked for, "
             "--extra-inputs): import the profile_export_aiperf.json beside it to know them"]
    per_user = ("output_token_throughput_per_user", "p50")
    decode = (f.amount(*per_user, positive=True, limit=MAX_DECODE_RATE)
              if f.raw(*per_user) is not None else
              f.rate_per_token("inter_token_latency", "p50"))
    trial = _aiperf_trial(metric, decode)
    return Parsed(TOOL, None, elements, trial, [*f.withheld, *notes])


def _csvnum(v: str) -> Any:
    """A cell as a number where it reads as one (NaN and inf included: the checks withhold
    them), else the text itself (withheld where a number belongs); empty: None."""
    if not v.strip():
        return None
    try:
        return float(v.replace(",", ""))
    except ValueError:
        return v


def _iso(v: Any) -> float | None:
    if not isinstance(v, str):
        return None
    try:
        return datetime.fromisoformat(v).timestamp()
    except ValueError:
        return None
