"""`decodescope import FILE…`: peers' result files as a stored run (docs/peers.md, "Importing
their results"): `vllm bench serve --save-result` JSON, AIPerf `profile_export_aiperf.json` (or
its CSV), SGLang `bench_serving` JSONL, inference-perf `*_lifecycle_metrics.json` (with the
config.yaml beside it), GuideLLM's result JSON (one benchmark: `--benchmark N|all`), an llm-d
benchmark report 0.2 (YAML or JSON). One trial per result (a file of appended results: one per line); the
caliber elements each file carries, and "unknown" for the rest; a bad number withheld with a
note; what a file claims checked against what it records (peers.audit); `--slo`: goodput from
its per-request numbers, stored with the run.

Exit codes: 0 stored; 2 bad input (no such file, not a result file, results of different
workloads: one import is one workload; a bad --benchmark or --slo).
"""

from __future__ import annotations

from typing import Any

import click

from decodescope.cli.common import emit, parse_labels, store_option
from decodescope.console import json_option
from decodescope.peers import ELEMENTS, decode_from
from decodescope.store.connect import open_store
from decodescope.store.db import Store
from decodescope.store.peer_import import import_files


@click.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--label", "labels", multiple=True, help="key=value label stored with the run (repeatable).")
@click.option("--tool-version", default=None, metavar="V",
              help="The peer tool's version, when its file does not record it (vllm bench "
                   "serve does not); stored and shown with the run.")
@click.option("--benchmark", "benchmark", default=None, metavar="N|all",
              help="A GuideLLM file of several benchmarks (a sweep): import benchmark N "
                   "(1-based), or `all`, each its own run.")
@click.option("--slo", "slo", default=None, metavar="LIMITS",
              help="Goodput under these limits (as probe --slo), from the file's per-request "
                   "numbers (GuideLLM's); stored with the run.")
@store_option
@json_option
def command(files: tuple[str, ...], labels: tuple[str, ...], tool_version: str | None,
            store_path: str | None, as_json: bool, benchmark: str | None = None,
            slo: str | None = None) -> int:
    """Store other tools' result files as one run, each result one trial (the unit of
    statistics; appended lines of one file are one trial each). One import is one workload:
    results whose recorded elements differ are refused (exit 2).

    Every caliber element a file records is kept (model, endpoint, dataset, input / output
    lengths and their distribution, concurrency, request rate, burstiness, ignore_eos,
    sampling); every element it does not record is "unknown", never a default. A number that
    fails its check (negative, zero, NaN, infinite or a string where a TPOT belongs) is
    withheld with a note naming file, field and value. `triage` of two imports from one tool
    judges them by their recorded workload (unrecorded elements named as assumed); against a
    probe it names the elements that differ or the unknown ones.
    """
    slo_d = None
    if slo is not None:
        import dataclasses

        from decodescope.caliber.slo import parse_slo

        slo_d = dataclasses.asdict(parse_slo(slo))
    if benchmark == "all":
        return _import_each_benchmark(files, labels, tool_version, store_path, as_json, slo_d)
    which = _benchmark_number(benchmark)
    with open_store(store_path) as st:
        run_id, results, imported = import_files(st, list(files), labels=parse_labels(labels),
                                                 tool_version=tool_version, benchmark=which)
        doc = _document(run_id, results, imported)
        doc["goodput"] = _store_goodput(st, run_id, slo_d)
    emit(_Result(doc), as_json, _render)
    return 0


def _store_goodput(st: Store, run_id: int, slo: dict[str, Any] | None) -> dict[str, Any] | None:
    """Goodput of the imported run under `slo`, stored in its result (None: no SLO given, or
    the file has no per-request numbers; said by the caller)."""
    if slo is None:
        return None
    from decodescope.analysis.goodput import goodput_of_imported
    from decodescope.errors import UsageError
    from decodescope.store import runs as sr

    run = sr.get_run(st, run_id, with_traces=False)
    result = run.result or {}
    g = goodput_of_imported(result.get("trials") or [], slo)
    if g is None:
        raise UsageError(f"run {run_id} was stored, but its file has no per-request numbers: "
                         "no goodput", where="--slo",
                         remedy="Give --slo with a file that records each request (GuideLLM's)")
    sr.update_run(st, run_id, status=run.status, result={**result, "goodput": g})
    return g


def _benchmark_number(v: str | None) -> int | None:
    if v is None:
        return None
    if not v.isdigit() or int(v) < 1:
        from decodescope.errors import UsageError

        raise UsageError(f"--benchmark {v!r} is neither a number from 1 nor `all`",
                         where="--benchmark", remedy="Give --benchmark 2, or --benchmark all")
    return int(v)


def _import_each_benchmark(files: tuple[str, ...], labels: tuple[str, ...],
                           tool_version: str | None, store_path: str | None,
                           as_json: bool, slo: dict[str, Any] | None = None) -> int:
    """Each benchmark of the files (GuideLLM) as its own run: benchmark N of every file is
    one run of as many trials as files."""
    import json as _json

    from decodescope.peers.guidellm import benchmark_names, is_guidellm

    counts = set()
    for f in files:
        try:
            with open(f, "rb") as fh:
                doc = _json.loads(fh.read())
        except (OSError, ValueError):
            doc = None
        if not is_guidellm(doc):
            from decodescope.errors import UsageError

            raise UsageError(f"{f} is not a GuideLLM file: --benchmark all reads GuideLLM's",
                             where="--benchmark", remedy="Leave out --benchmark")
        counts.add(len(benchmark_names(doc)))
    if len(counts) != 1:
        from decodescope.errors import UsageError

        raise UsageError(f"the files hold different numbers of benchmarks ({sorted(counts)})",
                         where="--benchmark all", remedy="Import each file on its own")
    docs = []
    with open_store(store_path) as st:
        for n in range(1, counts.pop() + 1):
            run_id, results, imported = import_files(
                st, list(files), labels=parse_labels(labels), tool_version=tool_version,
                benchmark=n)
            docs.append(_document(run_id, results, imported))
            docs[-1]["goodput"] = _store_goodput(st, run_id, slo)
    if as_json:
        emit(_Result({"runs": docs}), True, _render)
    else:
        click.echo("\n\n".join(_render(_Result(d)) for d in docs))
    return 0


def _document(run_id: int, results: Any, imported: dict[str, Any]) -> dict[str, Any]:
    out = {"run_id": run_id, "tool": imported["tool"], "tool_version": imported["tool_version"],
           "files": imported["files"],
           "trials": [r.trial for r in results],
           "elements": {k: imported["elements"].get(k) for k in ELEMENTS},
           "unknown": imported["unknown"],
           "notes": imported["notes"],
           "audit": imported.get("audit") or []}
    return out


class _Result:
    def __init__(self, d: dict[str, Any]):
        self.d = d

    def to_dict(self) -> dict[str, Any]:
        return self.d


def _render(r: _Result) -> str:
    d = r.d
    lines = [f"stored run {d['run_id']}: {len(d['trials'])} result(s) in {len(d['files'])} "
             f"file(s) from {d['tool']} "
             f"{d['tool_version'] or '(version unknown: --tool-version)'}, one trial each"]
    rates = [t.get("decode_rate") for t in d["trials"]]
    lines.append(f"decode rate per request ({decode_from(d['tool'])}): "
                 + ", ".join(f"{x:.1f} tok/s" if x is not None else "-" for x in rates))
    lines.append("caliber elements:")
    width = max(len(k) for k in ELEMENTS)
    for k in ELEMENTS:
        v = d["elements"].get(k)
        lines.append(f"  {k:<{width}}  {v if v is not None else 'unknown (not in the file)'}")
    lines += [f"note: {n}" for n in d["notes"]]
    for f in d.get("audit") or []:  # what the file claims vs records (peers/audit.py)
        tag = "work not done" if f["severity"] == "error" else "audit"
        lines.append(f"{tag}: {f['text']} ({f['code']}). {f['remedy']}")
    if d.get("goodput"):
        from decodescope.analysis.goodput import goodput_line

        lines.append(goodput_line(d["goodput"]) or "")
    lines.append(f"next: decodescope triage {d['run_id']} --baseline RUN")
    return "\n".join(lines)
