"""The llm-d benchmark report, version 0.2 ("BR0.2", revision 0.2.1): the format inference-perf
writes beside its own reports (`inference-perf.partial.stage_<n>.yaml`: `version`, `run`,
`results`) and that llm-d-benchmark composes with a `scenario` (stack components, load). The
schema is the `llmd-benchmark-report` package's (0.2.1, whose `benchmark-report` converter
also turns vLLM's, GuideLLM's and inference-perf's native files into it): every model forbids
unknown keys; a component's `standardized.kind` picks its schema.

`to_report` writes a decodescope run as a full report; `parse` reads one back (decodescope's
own or another producer's). Every caliber element decodescope knows is written twice: in the
standardized load (`scenario.load.standardized`: lengths, rate, concurrency — what other readers
take) and, verbatim, in the load's native configuration (`scenario.load.native.config.
decodescope.elements`), so that a round trip keeps every element, unknown ones included.
A report without that native block gives what its standardized fields say; the rest unknown.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone
from typing import Any

from decodescope.peers.common import ELEMENTS, Fields, Parsed, Source
from decodescope.peers.common import fmt as _fmt
from decodescope.peers.common import num as _num

TOOL = "llm-d benchmark report"  # a result names its producer: "llm-d benchmark report (guidellm)"
DECODE_FROM = "1 / median TPOT"
FILES = "an llm-d benchmark report 0.2 (YAML or JSON)"
VERSION = "0.2.1"  # what we write; any 0.2.x is read
NATIVE_KEY = "decodescope"


def is_report(doc: Any) -> bool:
    return (isinstance(doc, dict) and str(doc.get("version")).startswith("0.2")
            and isinstance(doc.get("results"), dict) and isinstance(doc.get("run"), dict))


# -- writing -------------------------------------------------------------------------------
def _stats(xs: list[float], units: str) -> dict[str, Any] | None:
    """A BR Statistics block of per-request values (None when there are none)."""
    v = sorted(x for x in xs if x is not None and math.isfinite(x))
    if not v:
        return None

    def q(p: float) -> float:
        k = (len(v) - 1) * p
        lo, hi = math.floor(k), math.ceil(k)
        return v[lo] + (v[hi] - v[lo]) * (k - lo)

    mean = sum(v) / len(v)
    sd = math.sqrt(sum((x - mean) ** 2 for x in v) / len(v))
    out: dict[str, Any] = {"units": units, "mean": mean, "stddev": sd, "min": v[0]}
    for name, p in (("p10", .1), ("p25", .25), ("p50", .5), ("p75", .75), ("p90", .9),
                    ("p95", .95), ("p99", .99)):
        out[name] = q(p)
    out["max"] = v[-1]
    return out


def _seq_len(dist: str | None, mean: str | None) -> dict[str, Any] | None:
    """BR SequenceLength from an element ("fixed 128", "53–69 (median 66.5)") and its mean."""
    m = re.fullmatch(r"fixed ([0-9.]+)", dist or "")
    if m:
        return {"distribution": "fixed", "value": _int_or_float(float(m.group(1)))}
    value = _num_str(mean)
    if value is None or value < 1:
        return None
    out: dict[str, Any] = {"distribution": "other", "value": _int_or_float(value)}
    r = re.match(r"([0-9.]+)–([0-9.]+)", dist or "")
    if r:
        out["min"], out["max"] = int(float(r.group(1))), int(float(r.group(2)))
    return out


def _num_str(v: str | None) -> float | None:
    try:
        return float(v) if v is not None else None
    except ValueError:
        return None


def _int_or_float(x: float) -> int | float:
    return int(x) if x == int(x) else x


def to_report(*, elements: dict[str, str | None], requests: list[dict[str, Any]],
              failures: int, tool_version: str, engine: str | None, engine_version: str | None,
              identity: str | None, description: str, start: float | None, end: float | None,
              trials: int, run_id: int) -> dict[str, Any]:
    """A BR0.2 report of one decodescope run. `requests`: per successful request,
    {ttft_s, tpot_s, itl_s, e2e_s, prompt_tokens, output_tokens} (None where unknown)."""

    def col(key: str, scale: float = 1.0) -> list[float]:
        return [float(r[key]) * scale for r in requests if r.get(key) is not None]

    std: dict[str, Any] = {"tool": "decodescope", "tool_version": tool_version,
                           "source": "sampled" if elements.get("dataset sha256") else "random"}
    isl = _seq_len(elements.get("input length distribution"), elements.get("input tokens (mean)"))
    osl = _seq_len(elements.get("output length distribution"),
                   elements.get("output tokens (mean)"))
    if isl is not None:
        std["input_seq_len"] = isl
    if osl is not None:
        std["output_seq_len"] = osl
    rate = _num_str(elements.get("request rate"))
    if rate is not None and rate > 0 and math.isfinite(rate):
        std["rate_qps"] = rate
    conc = _num_str(elements.get("concurrency"))
    if conc is not None and conc >= 1:
        std["concurrency"] = int(conc)
    elif elements.get("concurrency") == "all requests at once":
        std["concurrency"] = math.inf
    native = {"config": {NATIVE_KEY: {"elements": dict(elements), "trials": trials,
                                      "run": run_id}}}
    scenario: dict[str, Any] = {}
    if "input_seq_len" in std:  # required by the schema's standardized load
        scenario["load"] = {"metadata": {"schema_version": "0.0.1", "cfg_id": identity or "",
                                         "description": description},
                            "standardized": std, "native": native}
    if engine:
        scenario["stack"] = [{
            "metadata": {"schema_version": "0.0.1", "label": "engine-0",
                         "cfg_id": identity or ""},
            "standardized": {"kind": "generic", "tool": engine,
                             "tool_version": engine_version or "unknown",
                             "model": elements.get("model")},
            "native": {}}]
    total = len(requests) + failures
    agg: dict[str, Any] = {"requests": {"total": total, "failures": failures}}
    for key, col_key, units in (("input_length", "prompt_tokens", "count"),
                                ("output_length", "output_tokens", "count")):
        s = _stats(col(col_key), units)
        if s is not None:
            agg["requests"][key] = s
    lat = {name: s for name, s in (
        ("time_to_first_token", _stats(col("ttft_s", 1000), "ms")),
        ("time_per_output_token", _stats(col("tpot_s", 1000), "ms/token")),
        ("inter_token_latency", _stats(col("itl_s", 1000), "ms/token")),
        ("request_latency", _stats(col("e2e_s", 1000), "ms"))) if s is not None}
    if lat:
        agg["latency"] = lat
    span = (end - start) if (start is not None and end is not None and end > start) else None
    if span:
        out_tok = sum(col("output_tokens"))
        agg["throughput"] = {
            "output_token_rate": {"units": "tokens/s", "mean": out_tok / span},
            "request_rate": {"units": "queries/s", "mean": len(requests) / span}}
    run: dict[str, Any] = {"uid": f"decodescope-run-{run_id}"}
    if start is not None and end is not None:
        run["time"] = {"start": _iso(start), "end": _iso(end), "duration": f"PT{end - start:.3f}S"}
    doc: dict[str, Any] = {"version": VERSION, "run": run}
    if scenario:
        doc["scenario"] = scenario
    doc["results"] = {"request_performance": {"aggregate": agg}}
    return doc


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat()


# -- reading -------------------------------------------------------------------------------
def _d(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


AGG = ("results", "request_performance", "aggregate")  # where a report's numbers lie


def _ms(f: Fields, name: str, positive: bool = False) -> float | None:
    """The median of an aggregate latency in seconds, from ms or s units, read through
    common.Fields (a bad value withheld with a note naming the field)."""
    units = str(_d(f.raw(*AGG, "latency", name)).get("units") or "ms")
    return f.seconds(*AGG, "latency", name, "p50",
                     scale=1e-3 if units.startswith("ms") else 1.0, positive=positive)


def parse(src: Source) -> list[Parsed] | None:
    """A BR0.2 report (YAML, its usual form, or JSON) as one result; None: not a report."""
    doc = src.doc
    if doc is None and src.raw.lstrip()[:1] not in (b"{", b"["):
        doc = _yaml(src.raw)
    if not is_report(doc):
        return None
    return [read(doc, src.path)]


def _yaml(raw: bytes) -> Any:
    """A YAML document, or None."""
    import yaml

    try:
        doc = yaml.safe_load(raw.decode("utf-8", "replace"))
    except yaml.YAMLError:
        return None
    return doc if isinstance(doc, dict) else None


def read(doc: dict[str, Any], path: str = "") -> Parsed:
    """One BR0.2 report as an imported trial."""
    notes: list[str] = []
    scen = _d(doc.get("scenario"))
    load = _d(scen.get("load"))
    std = _d(load.get("standardized"))
    own = _d(_d(_d(load.get("native")).get("config")).get(NATIVE_KEY))
    agg = _d(_d(_d(doc.get("results")).get("request_performance")).get("aggregate"))
    reqs, thr = _d(agg.get("requests")), _d(agg.get("throughput"))
    out_len, in_len = _d(reqs.get("output_length")), _d(reqs.get("input_length"))
    elements: dict[str, str | None] = dict.fromkeys(ELEMENTS)
    if isinstance(own.get("elements"), dict):
        elements |= {k: (str(v) if v is not None else None)
                     for k, v in own["elements"].items() if k in elements}
    else:
        def seq(s: dict[str, Any]) -> str | None:
            v, lo, hi = _num(s.get("value")), _num(s.get("min")), _num(s.get("max"))
            if v is None:
                return None
            if s.get("distribution") == "fixed" or (lo is not None and lo == hi):
                return f"fixed {v:g}"
            kind = {"gaussian": "normal", "random": "uniform"}.get(str(s.get("distribution")),
                                                                    str(s.get("distribution")))
            sd = _num(s.get("std_dev"))
            return (f"{kind} mean {v:g}" + (f", sd {sd:g}" if sd is not None else "")
                    + (f", {lo:g}–{hi:g}" if lo is not None and hi is not None else ""))

        stack = [c for c in scen.get("stack") or [] if isinstance(c, dict)]
        model = next((_d(_d(c.get("standardized")).get("model")).get("name")
                      or _d(c.get("standardized")).get("model") for c in stack
                      if _d(c.get("standardized")).get("model")), None) or _d(_d(_d(
                          _d(load.get("native")).get("config")).get("spec")).get("backend")
                      ).get("model")
        conc = std.get("concurrency")
        elements |= {
            "model": _fmt(model) if isinstance(model, str) else None,
            "input tokens (mean)": _fmt(_round(_num(in_len.get("mean")))),
            "input length distribution": seq(_d(std.get("input_seq_len"))),
            "output tokens (mean)": _fmt(_round(_num(out_len.get("mean")))),
            "output max_tokens": (_fmt(_d(std.get("output_seq_len")).get("value"))
                                  if _d(std.get("output_seq_len")).get("distribution") == "fixed"
                                  else None),
            "request rate": _fmt(_num(std.get("rate_qps"))),
            "concurrency": ("all requests at once" if conc == math.inf else
                            _fmt(int(conc)) if isinstance(conc, (int, float)) else None),
        }
        if not scen:
            notes.append("the report has no scenario (a partial report, as inference-perf "
                         "writes): the workload's elements are unknown")
    # each number through common.Fields: a bad value withheld with a note, never a number
    f = Fields(doc, path)
    total, failures = f.count(*AGG, "requests", "total"), f.count(*AGG, "requests", "failures")
    done = (total - (failures or 0)) if total is not None else None
    tpot_med = _ms(f, "time_per_output_token", positive=True)
    if tpot_med is None and f.raw(*AGG, "latency", "time_per_output_token", "p50") is None \
            and f.raw(*AGG, "latency", "inter_token_latency", "p50"):
        tpot_med = _ms(f, "inter_token_latency", positive=True)
        notes.append("no TPOT in the report: decode rate from 1 / median ITL")
    out_rate = f.amount(*AGG, "throughput", "output_token_rate", "mean")
    trial: dict[str, Any] = {
        "idx": 0, "status": "ok", "requests": int(done) if done is not None else None,
        # per request: 1 / median TPOT (first token excluded), as for vllm bench serve
        "decode_rate": (1.0 / tpot_med) if tpot_med else None,
        "ttft_s": _ms(f, "time_to_first_token"),
        "itl_median_s": _ms(f, "inter_token_latency"),
        "output_tokens": f.amount(*AGG, "requests", "output_length", "mean"),
        "prompt_tokens": f.amount(*AGG, "requests", "input_length", "mean"),
        "wall_rate": out_rate,
        "aggregate_rate": out_rate,
        "request_throughput": f.amount(*AGG, "throughput", "request_rate" if "request_rate"
                                       in thr else "requests_rate", "mean"),
        "failed": failures,
    }
    notes += f.withheld
    if total is not None:  # for the audit (peers/audit.py): the counts the report states
        inc = _num(reqs.get("incomplete")) or 0
        trial["work"] = {"successful": int(total - (failures or 0) - inc),
                         "errored": int(failures or 0), "incomplete": int(inc),
                         "total": None, "asked": None}
    if tpot_med is None:
        notes.append("no median TPOT or ITL in the report: no decode rate")
    if own:
        notes.append(f"written by decodescope from its run {own.get('run')} "
                     f"({own.get('trials')} trials pooled)")
    run = _d(doc.get("run"))
    start = _parse_time(_d(run.get("time")).get("start"))
    tool = str(std.get("tool") or "")
    version = std.get("tool_version")
    what = TOOL + (f" ({tool})" if tool else "")
    return Parsed(what, str(version) if version else None, elements, trial, notes,
                  started_at=start)


def _round(v: float | None) -> float | None:
    return round(v, 1) if v is not None else None


def _parse_time(v: Any) -> float | None:
    if isinstance(v, datetime):
        return v.timestamp()
    if isinstance(v, str):
        try:
            return datetime.fromisoformat(v).timestamp()
        except ValueError:
            return None
    return None


def run_report(run: Any, elements: dict[str, str | None]) -> dict[str, Any]:
    """The BR0.2 report of a stored run (records.stored_run.StoredRun, with its traces):
    per-request numbers from the traces of its successful trials (an imported run has none:
    its aggregates are left out), its elements as `verdict.imported_run.run_elements` gives them."""
    from decodescope import __version__
    from decodescope.records.request_metrics import compute

    steady = int(((run.caliber or {}).get("output") or {}).get("steady_state_start") or 0)
    requests: list[dict[str, Any]] = []
    failures = 0
    sends: list[float] = []
    ends: list[float] = []
    for t in run.trials:
        if t.status != "ok":
            continue
        for r in t.requests:
            if not r.ok:
                failures += 1
                continue
            m = compute(r, steady)
            tpot = ((m.e2e_s - m.ttft_s) / (m.output_tokens - 1)
                    if (m.e2e_s is not None and m.ttft_s is not None and m.output_tokens
                        and m.output_tokens > 1) else None)
            requests.append({"ttft_s": m.ttft_s, "tpot_s": tpot, "itl_s": m.itl_median_s,
                             "e2e_s": m.e2e_s, "prompt_tokens": m.prompt_tokens,
                             "output_tokens": m.output_tokens})
            sends.append(r.t_send_s + t.wall_anchor_s)
            if r.t_done_s is not None:
                ends.append(r.t_done_s + t.wall_anchor_s)
    info = (run.meta or {}).get("engine_info") or {}
    trials = len([t for t in run.trials if t.status == "ok"])
    return to_report(
        elements=elements, requests=requests, failures=failures, tool_version=__version__,
        engine=run.engine, engine_version=info.get("version"), identity=run.caliber_identity,
        description=f"decodescope run {run.id} ({run.caliber_ref or 'no caliber'})"
        + (" [SIMULATED]" if run.simulated else ""),
        start=min(sends) if sends else None, end=max(ends) if ends else None,
        trials=trials, run_id=run.id)
