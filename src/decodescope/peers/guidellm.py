"""GuideLLM's result file (`guidellm run --output kind=json,path=F`; 0.7's
`guidellm benchmark --output-path F.json`): a report of one or more benchmarks (a sweep's
rates, a list of concurrencies), each with its strategy, constraints, per-request statistics
and summary metrics.

One benchmark is one trial. A file of several is imported one benchmark at a time
(`decodescope import --benchmark N`, 1-based; `--benchmark all`: each its own run).

Read from the file (GuideLLM 0.8.1, report `metadata.version` 2): the tool's version, the
backend's target, model and request format (endpoint), the data spec (`synthetic_text`:
prompt / output tokens with their stdev, min, max; a file or dataset by name), the profile
(synchronous, concurrent streams, throughput, constant / poisson rate, sweep), the
constraints (max_requests, max_duration, ...), what each request's body carried
(`request_args`: max_completion_tokens, ignore_eos, sampling) and every request's numbers.
GuideLLM 0.7.4 writes the same layout (report version 2; its fixture is read by the same
code). Reports of 0.6 and before (`args` instead of `config.spec`, `scheduler.strategy`) are
read where 0.7's keys are absent, untested against a real file. Elements the file does not
carry stay unknown.
"""

from __future__ import annotations

import json
import statistics
from typing import Any

from decodescope.errors import UsageError
from decodescope.peers.common import ELEMENTS, Fields, Parsed, Source
from decodescope.peers.common import fmt as _fmt
from decodescope.peers.common import num as _num
from decodescope.peers.common import span as _span

TOOL = "guidellm"
# GuideLLM's ITL is (latency − TTFT) / (output tokens − 1): vLLM's TPOT
DECODE_FROM = "1 / median ITL (GuideLLM's ITL is vLLM's TPOT)"
FILES = "a GuideLLM result JSON (`guidellm run --output kind=json`)"
SELECTS = True  # a file of several benchmarks: `import --benchmark N` chooses one


def parse(src: Source) -> list[Parsed] | None:
    """The benchmark `src.benchmark` chooses (the only one, when the file holds one)."""
    if not is_guidellm(src.doc):
        return None
    return [read(src.doc, src.path, src.benchmark)]


def _d(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _l(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def is_guidellm(doc: Any) -> bool:
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        return False
    first = _d(next(iter(doc["benchmarks"]), None))
    return ("guidellm_version" in _d(doc.get("metadata"))
            or first.get("type_") == "generative_benchmark")


def benchmark_names(doc: dict[str, Any]) -> list[str]:
    """"concurrent@2", "poisson@4" ... for each benchmark of the file, in order."""
    return [_strategy_name(_strategy(_d(b))) for b in _l(doc.get("benchmarks"))]


def _strategy(b: dict[str, Any]) -> dict[str, Any]:
    return _d(_d(b.get("config")).get("strategy")) or _d(_d(b.get("scheduler")).get("strategy")) \
        or _d(b.get("strategy"))


def _strategy_name(s: dict[str, Any]) -> str:
    kind = str(s.get("type_") or "?")
    if kind == "concurrent":
        return f"concurrent@{s.get('streams')}"
    if kind in ("constant", "poisson", "async"):
        return f"{kind}@{_fmt(_num(s.get('rate')))}"
    return kind


def select(doc: dict[str, Any], path: str, benchmark: int | None) -> tuple[dict[str, Any], int]:
    """The benchmark to import (0-based index), or a usage error naming the choices."""
    benches = _l(doc.get("benchmarks"))
    if not benches:
        raise UsageError(f"{path} has no benchmarks (GuideLLM ended before the first)",
                         where="import", remedy="Import a file of a run that completed")
    names = ", ".join(f"{i + 1}: {n}" for i, n in enumerate(benchmark_names(doc)))
    if benchmark is None:
        if len(benches) == 1:
            return _d(benches[0]), 0
        raise UsageError(f"{path} holds {len(benches)} benchmarks ({names})", where="import",
                         remedy="Choose one with --benchmark N, or --benchmark all to import "
                                "each as its own run")
    if not 1 <= benchmark <= len(benches):
        raise UsageError(f"{path} has no benchmark {benchmark} ({names})", where="--benchmark",
                         remedy=f"Give 1..{len(benches)}")
    return _d(benches[benchmark - 1]), benchmark - 1


def _stat_keys(b: dict[str, Any], name: str, key: str = "median",
               group: str = "successful") -> tuple[str, ...] | None:
    """Where a metric's statistic lies in the benchmark (its successful group where there is
    one), for common.Fields; None when the group is empty (GuideLLM writes zeros: no data)."""
    m = _d(_d(b.get("metrics")).get(name))
    keys: tuple[str, ...] = ("metrics", name)
    if group in m and isinstance(m[group], dict):
        m, keys = m[group], (*keys, group)
    if _num(m.get("count")) == 0:
        return None
    return (*keys, key)


def _body(req: dict[str, Any]) -> dict[str, Any]:
    args = req.get("request_args")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return {}
    return _d(_d(args).get("body")) or _d(_d(args).get("payload"))


def _lengths(spec: dict[str, Any], prefix: str) -> str | None:
    """A synthetic data spec's lengths: "fixed 128" or "normal mean 64, sd 8, 48–80"."""
    mean = _num(spec.get(f"{prefix}_tokens"))
    if mean is None:
        return None
    sd = _num(spec.get(f"{prefix}_tokens_stdev"))
    lo, hi = _num(spec.get(f"{prefix}_tokens_min")), _num(spec.get(f"{prefix}_tokens_max"))
    if not sd and lo is None and hi is None:
        return f"fixed {mean:g}"
    out = f"normal mean {mean:g}" + (f", sd {sd:g}" if sd else "")
    if lo is not None or hi is not None:
        out += f", {_fmt(lo) or '-'}–{_fmt(hi) or '-'}"
    return out


def _data_spec(doc: dict[str, Any], b: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The data spec as a dict (0.8: `config.spec.data[0]`; 0.7: `args.data`, a string of
    key=value pairs or a path) and the dataset's name."""
    spec = _d(_d(doc.get("config")).get("spec"))
    data = _l(spec.get("data")) or _l(_d(b.get("config")).get("data"))
    if data and isinstance(data[0], dict):
        d0 = data[0]
        kind = d0.get("kind")
        name = d0.get("path") or d0.get("data_file") or d0.get("source") or kind
        return d0, str(name) if name else None
    args = _d(b.get("args")) or _d(doc.get("args"))
    raw = args.get("data") if args else (data[0] if data else None)
    if isinstance(raw, list):
        raw = raw[0] if raw else None
    if isinstance(raw, str):
        if raw.lstrip().startswith("{"):
            try:
                return _d(json.loads(raw)), "synthetic"
            except ValueError:
                return {}, raw
        pairs = [p.split("=", 1) for p in raw.split(",")]
        if pairs and all(len(p) == 2 for p in pairs):
            return {k.strip(): _maybe_num(v.strip()) for k, v in pairs}, "synthetic"
        return {}, raw
    if isinstance(raw, dict):
        return raw, "synthetic"
    return {}, None


def _maybe_num(v: str) -> Any:
    try:
        return int(v)
    except ValueError:
        try:
            return float(v)
        except ValueError:
            return v


def _constraints(doc: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """{name: value} of the benchmark's limits (max_requests, max_duration, ...)."""
    out: dict[str, Any] = {}
    for name, c in _d(_d(b.get("config")).get("constraints")).items():
        a = _d(_d(c).get("args"))
        v = next((a[k] for k in ("count", "duration", "max_num", "max_duration", "max_errors",
                                 "max_error_rate", "value") if k in a), None)
        out[name] = v
    if not out:  # 0.7: args.max_requests / max_seconds
        args = _d(b.get("args")) or _d(doc.get("args"))
        for k in ("max_requests", "max_seconds", "max_duration", "max_errors", "max_error_rate"):
            if args.get(k) is not None:
                out[k] = args[k]
    return out


def _requests(b: dict[str, Any], group: str) -> list[dict[str, Any]]:
    return [r for r in _l(_d(b.get("requests")).get(group)) if isinstance(r, dict)]


def read(doc: dict[str, Any], path: str = "", benchmark: int | None = None) -> Parsed:
    """One benchmark of a GuideLLM report as an imported trial (`benchmark`: 1-based)."""
    b, idx = select(doc, path, benchmark)
    notes: list[str] = []
    n_bench = len(_l(doc.get("benchmarks")))
    if n_bench > 1:
        notes.append(f"benchmark {idx + 1} of {n_bench} in the file "
                     f"({benchmark_names(doc)[idx]})")
    cfg = _d(b.get("config"))
    spec = _d(_d(doc.get("config")).get("spec"))
    backend = _d(cfg.get("backend")) or _d(spec.get("backend"))
    args = _d(b.get("args")) or _d(doc.get("args"))
    strat = _strategy(b)
    ok, errored = _requests(b, "successful"), _requests(b, "errored")
    incomplete = _requests(b, "incomplete")
    data, dataset = _data_spec(doc, b)
    fmt = str(backend.get("request_format") or args.get("request_type") or "")
    endpoint = ("chat" if "chat" in fmt else "completions" if "completions" in fmt or
                fmt == "text_completions" else None)
    body = _body(ok[0]) if ok else (_body(errored[0]) if errored else {})
    kind = str(strat.get("type_") or "")
    rate_v = _num(strat.get("rate"))
    rate: str | None
    burst: str | None
    if kind in ("synchronous", "concurrent", "throughput"):
        rate, burst = "inf", "-"  # closed loop, or all at once: no arrival rate
    elif kind == "poisson":
        rate, burst = _fmt(rate_v), "1"
    elif kind in ("constant", "async"):
        rate, burst = _fmt(rate_v), "constant"
    else:
        rate = burst = None
    profile_max = _d(spec.get("profile")).get("max_concurrency")
    concurrency: str | None
    if kind == "concurrent":
        concurrency = _fmt(int(_num(strat.get("streams")) or 1))
    elif kind == "synchronous":
        concurrency = "1"
    elif profile_max is not None and _num(profile_max) is not None:
        concurrency = _fmt(int(_num(profile_max) or 0))
    elif kind == "throughput":
        concurrency = "all requests at once"
    else:  # a rate without a cap (GuideLLM's max_concurrency is then its worker pool's)
        concurrency = "no cap" if rate not in (None, "inf") else None
    limits = _constraints(doc, b)
    max_req = _num(limits.get("max_requests"))
    m = _d(b.get("metrics"))
    in_len = [float(x) for r in ok if (x := _num(r.get("prompt_tokens"))) is not None]
    out_len = [float(x) for r in ok if (x := _num(r.get("output_tokens"))) is not None]
    out_decl = _lengths(data, "output")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    elements: dict[str, str | None] = dict.fromkeys(ELEMENTS)
    elements |= {
        "model": _fmt(backend.get("model") or args.get("model")),
        "endpoint": endpoint,
        "dataset": _fmt(dataset),
        "input tokens (mean)": _fmt(round(statistics.fmean(in_len), 1)) if in_len else None,
        "input length distribution": _lengths(data, "prompt"),
        # the length asked for; each request's body carries its own max_completion_tokens
        "output max_tokens": (out_decl.removeprefix("fixed ") if out_decl else
                              _fmt(max_tokens) if max_tokens is not None else None),
        "output tokens (mean)": _fmt(round(statistics.fmean(out_len), 1)) if out_len else None,
        "output length distribution": _span(min(out_len), max(out_len),
                                            statistics.median(out_len)) if out_len else None,
        "ignore_eos": _fmt(bool(body["ignore_eos"])) if "ignore_eos" in body else (
            "false" if body else None),
        "temperature": _fmt(body.get("temperature")),
        "top_p": _fmt(body.get("top_p")),
        "top_k": _fmt(body.get("top_k")),
        "concurrency": concurrency,
        "request rate": rate,
        "burstiness": burst,
        "requests per trial": _fmt(int(max_req)) if max_req else None,
    }
    if body and "ignore_eos" not in body:
        notes.append("the requests' bodies carry no ignore_eos: the server's default (false)")
    if body and not any(k in body for k in ("temperature", "top_p", "top_k")):
        notes.append("the requests' bodies carry no sampling: the server's defaults, not "
                     "recorded, so temperature / top_p / top_k are unknown")
    other = {k: v for k, v in limits.items() if k != "max_requests"}
    if other:
        notes.append("limits: " + ", ".join(f"{k} {v}" for k, v in other.items()))
    if kind == "sweep" or _d(spec.get("profile")).get("kind") == "sweep":
        notes.append("a sweep: the benchmark's rate was chosen by GuideLLM from the "
                     "synchronous and throughput runs")
    slo = _d(m.get("slo_attainment")) if isinstance(m.get("slo_attainment"), dict) else None
    if slo:
        notes.append("GuideLLM's SLO attainment: " + json.dumps(slo, sort_keys=True))
    totals = _d(m.get("request_totals"))
    n_ok = int(_num(totals.get("successful")) or len(ok))
    n_err = int(_num(totals.get("errored")) or len(errored))
    n_inc = int(_num(totals.get("incomplete")) or len(incomplete))
    # each number through common.Fields: a bad value withheld with a note, never a number
    f = Fields(b, path + (f" benchmark {idx + 1}" if n_bench > 1 else ""))

    def ms(name: str, positive: bool = False) -> float | None:
        k = _stat_keys(b, name)
        return f.seconds(*k, scale=1e-3, positive=positive) if k else None

    tpot_s, ttft_s = ms("time_per_output_token_ms"), ms("time_to_first_token_ms")
    itl_s = ms("inter_token_latency_ms", positive=True)
    itl_k = _stat_keys(b, "inter_token_latency_ms")
    decode_rate = f.rate_per_token(*itl_k) if (itl_k and itl_s) else None
    duration = f.seconds("duration", positive=True)
    notes += f.withheld
    out_total = sum(out_len)
    trial: dict[str, Any] = {
        "idx": 0, "status": "ok", "requests": n_ok,
        # per request: 1 / median ITL over the successful requests. GuideLLM's ITL is
        # (latency − TTFT) / (output tokens − 1), vLLM's TPOT; its own TPOT is latency / output
        # tokens (TTFT included), kept beside as tpot_incl_ttft_s
        "decode_rate": decode_rate,
        "tpot_incl_ttft_s": tpot_s,
        "ttft_s": ttft_s,
        "itl_median_s": itl_s,
        "output_tokens": statistics.fmean(out_len) if out_len else None,
        "prompt_tokens": statistics.fmean(in_len) if in_len else None,
        "wall_rate": out_total / duration if (duration and out_len) else None,
        "aggregate_rate": out_total / duration if (duration and out_len) else None,
        "request_throughput": n_ok / duration if duration else None,
        "failed": float(n_err + n_inc),
        # the work the file claims, for the audit (peers/audit.py)
        "work": {"declared_output": _num(data.get("output_tokens")) if out_decl and
                 out_decl.startswith("fixed") else _num(max_tokens) if not out_decl and
                 body.get("ignore_eos") else None,
                 "ignore_eos": body.get("ignore_eos") if body else None,
                 "output_lengths": out_len,
                 "failed_output_lengths": [float(x) for r in errored + incomplete
                                           if (x := _num(r.get("output_tokens"))) is not None],
                 "successful": n_ok, "errored": n_err, "incomplete": n_inc,
                 "total": _num(totals.get("total")), "asked": max_req},
        # per-request numbers for goodput (analysis/goodput.py), successful requests only
        "per_request": [{"ttft_s": (_num(r.get("time_to_first_token_ms")) or 0) / 1000.0
                         if _num(r.get("time_to_first_token_ms")) is not None else None,
                         "e2e_s": _num(r.get("request_latency")),
                         "output_tokens": _num(r.get("output_tokens"))} for r in ok],
    }
    meta = _d(doc.get("metadata"))
    version = meta.get("guidellm_version") or args.get("guidellm_version")
    url = backend.get("target") or args.get("target")
    return Parsed(TOOL, str(version) if version else None, elements, trial, notes,
                  started_at=_num(b.get("start_time")), url=str(url) if url else None)
