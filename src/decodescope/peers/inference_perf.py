"""inference-perf's reports: `summary_lifecycle_metrics.json` (all stages) and
`stage_N_lifecycle_metrics.json` (one load stage), read with the `config.yaml` the tool writes
beside them (the run's resolved configuration; the reports carry no configuration).

A report's metrics are in seconds: `successes.latency.{time_to_first_token,
time_per_output_token, …}.{mean, median, p90, …}`, `successes.{prompt_tokens, output_tokens}`
(the server's usage counts, the client's where the server gave none), `successes.throughput`,
`failures.count`. Without its config.yaml only the realized elements are known.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from decodescope.peers.common import (
    ELEMENTS,
    Fields,
    Parsed,
    Source,
    as_dict,
    fmt,
    num,
    span,
)

CONFIG_NAME = "config.yaml"
MAX_CONFIG_BYTES = 1024 * 1024  # a resolved config is a few KB
_STAGE_FILE = re.compile(r"stage_(\d+)_lifecycle_metrics\.json$")


TOOL = "inference-perf"
DECODE_FROM = "1 / median time per output token"
FILES = "an inference-perf *_lifecycle_metrics.json (with its config.yaml beside it)"


def parse(src: Source) -> list[Parsed] | None:
    if isinstance(src.doc, dict) and is_lifecycle_report(src.doc):
        return [parse_report(src.doc, src.path)]
    return None


def is_lifecycle_report(d: dict[str, Any]) -> bool:
    return isinstance(d.get("successes"), dict) and isinstance(d.get("load_summary"), dict)


def _distribution(dist: dict[str, Any]) -> str | None:
    """`data.input_distribution` / `output_distribution`: type, mean, std_dev, min, max."""
    lo, hi, mean = num(dist.get("min")), num(dist.get("max")), num(dist.get("mean"))
    if lo is not None and lo == hi:
        return f"fixed {lo:g}"
    if mean is None:
        return None
    kind = str(dist.get("type") or "normal")
    if kind == "fixed":
        return f"fixed {mean:g}"
    sd = num(dist.get("std_dev"))
    return (f"{kind} mean {mean:g}" + (f", sd {sd:g}" if sd is not None else "")
            + (f", {lo:g}–{hi:g}" if lo is not None and hi is not None else ""))


def parse_report(doc: dict[str, Any], path: str) -> Parsed:
    ok = as_dict(doc.get("successes"))
    prompt, output = as_dict(ok.get("prompt_tokens")), as_dict(ok.get("output_tokens"))
    notes: list[str] = []
    cfg, why = read_config(Path(path).parent / CONFIG_NAME)
    if why:
        notes.append(why)
    elements: dict[str, str | None] = {k: None for k in ELEMENTS}
    elements.update({
        "input tokens (mean)": fmt(num(prompt.get("mean"))),
        "output tokens (mean)": fmt(num(output.get("mean"))),
        "output length distribution": span(num(output.get("min")), num(output.get("max")),
                                            num(output.get("median"))),
    })
    url = None
    realized: tuple[str, ...] = ("output length distribution",)
    if cfg:
        elements.update(_config_elements(cfg, doc, path, notes))
        if elements["input length distribution"] is None:  # not synthetic: what was sent
            realized = ("input length distribution", "output length distribution")
            elements["input length distribution"] = span(
                num(prompt.get("min")), num(prompt.get("max")), num(prompt.get("median")))
        url = fmt(as_dict(cfg.get("server")).get("base_url"))
        notes.append("inference-perf sends no temperature / top_p / top_k: the server's "
                     "defaults applied, unknown here")
    f = Fields(doc, path)
    lat = ("successes", "latency")
    ttft = f.seconds(*lat, "time_to_first_token", "median")
    count = f.count("successes", "count")
    trial = {"idx": 0, "status": "ok", "requests": int(count) if count is not None else None,
             # per request: 1 / median TPOT ((latency − TTFT) / (output tokens − 1))
             "decode_rate": f.rate_per_token(*lat, "time_per_output_token", "median", scale=1.0),
             "ttft_s": ttft,
             "output_tokens": num(output.get("mean")),
             "prompt_tokens": num(prompt.get("mean")),
             "wall_rate": f.amount("successes", "throughput", "output_tokens_per_sec"),
             "aggregate_rate": f.amount("successes", "throughput", "output_tokens_per_sec"),
             "request_throughput": f.amount("successes", "throughput", "requests_per_sec"),
             "failed": f.count("failures", "count")}
    notes = [*f.withheld, *notes]
    return Parsed(TOOL, None, elements, trial, notes, url=url, realized=realized)


def _config_elements(cfg: dict[str, Any], doc: dict[str, Any], path: str,
                     notes: list[str]) -> dict[str, str | None]:
    api, data = as_dict(cfg.get("api")), as_dict(cfg.get("data"))
    server, load = as_dict(cfg.get("server")), as_dict(cfg.get("load"))
    cf = Fields(cfg, str(Path(path).parent / CONFIG_NAME))
    etype = str(api.get("type") or "")
    dtype = data.get("type")
    synthetic = dtype in ("synthetic", "random", "shared_prefix")
    out_asked = _distribution(as_dict(data.get("output_distribution"))) if synthetic else None
    e: dict[str, str | None] = {
        "model": fmt(server.get("model_name")),
        "endpoint": {"completion": "completions", "chat": "chat"}.get(etype, fmt(etype or None)),
        "dataset": fmt(f"{dtype} ({data['path']})" if data.get("path") else dtype),
        "input length distribution": (_distribution(as_dict(data.get("input_distribution")))
                                      if synthetic else None),
        # the output distribution is the max_tokens each request asks for
        "output max_tokens": out_asked.removeprefix("fixed ") if out_asked else None,
        "ignore_eos": fmt(server.get("ignore_eos")) if isinstance(server.get("ignore_eos"), bool)
        else None,
    }
    stages = [s for s in load.get("stages") or [] if isinstance(s, dict)]
    m = _STAGE_FILE.search(Path(path).name)
    stage = None
    if m and int(m.group(1)) < len(stages):
        stage = stages[int(m.group(1))]
    elif len(stages) == 1:
        stage = stages[0]
    elif stages:
        notes.append(f"the summary spans {len(stages)} load stages: import one "
                     "stage_N_lifecycle_metrics.json for one load (concurrency, rate)")
    if load.get("sweep"):
        notes.append("a sweep: its stages were chosen at run time")
    kind = load.get("type")
    if stage is not None and kind == "concurrent":  # a new request as soon as one ends
        e.update({"concurrency": fmt(cf.count_of(stage.get("concurrency_level"),
                                                 "load.stages[].concurrency_level")),
                  "request rate": "inf", "burstiness": "-",
                  "requests per trial": fmt(cf.count_of(stage.get("num_requests"),
                                                        "load.stages[].num_requests"))})
    elif stage is not None and kind in ("constant", "poisson"):
        workers = cf.count_of(load.get("num_workers"), "load.num_workers")
        per_worker = cf.count_of(load.get("worker_max_concurrency"), "load.worker_max_concurrency")
        cap = int(workers * per_worker) if workers and per_worker else None
        e.update({"concurrency": fmt(cap),
                  "request rate": fmt(cf.amount_of(stage.get("rate"), "load.stages[].rate",
                                                   positive=True)),
                  "burstiness": "1" if kind == "poisson" else "constant"})
        if cap is not None:
            notes.append("concurrency: the cap on requests in flight (num_workers × "
                         "worker_max_concurrency)")
    notes.extend(cf.withheld)
    return e


def read_config(p: Path) -> tuple[dict[str, Any] | None, str | None]:
    """The config.yaml beside a report, or (None, why not)."""
    if not p.is_file():
        return None, (f"no {CONFIG_NAME} beside the report: the workload (model, endpoint, "
                      "load, lengths asked for, ignore_eos) is unknown")
    if p.stat().st_size > MAX_CONFIG_BYTES:
        return None, f"{p} is larger than {MAX_CONFIG_BYTES // 1024} KB: not read"
    import yaml  # PyYAML: the library inference-perf itself writes this file with

    try:
        cfg = yaml.safe_load(p.read_text(encoding="utf-8", errors="replace"))
    except yaml.YAMLError as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return None, f"{p} could not be read ({why}): the workload is unknown"
    if not isinstance(cfg, dict):
        return None, f"{p} is not a mapping: the workload is unknown"
    return cfg, None
