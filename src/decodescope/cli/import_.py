"""`decodescope import FILE…`: peers' result files as a stored run (docs/peers.md, "Importing
their results"): `vllm bench serve --save-result` JSON, AIPerf `profile_export_aiperf.json` (or
its CSV), SGLang `bench_serving` JSONL, inference-perf `*_lifecycle_metrics.json` (with the
config.yaml beside it). One trial per result (a file of appended results: one per line); the
caliber elements each file carries, and "unknown" for the rest; a bad number withheld with a
note.

Exit codes: 0 stored; 2 bad input (no such file, not a result file, results of different
workloads: one import is one workload).
"""

from __future__ import annotations

from typing import Any

import click

from decodescope.cli.common import emit, store_option
from decodescope.cli.probe import parse_labels
from decodescope.console import json_option
from decodescope.peers import ELEMENTS, decode_from
from decodescope.store.db import Store
from decodescope.store.peer_import import import_files


@click.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--label", "labels", multiple=True, help="key=value label stored with the run (repeatable).")
@click.option("--tool-version", default=None, metavar="V",
              help="The peer tool's version, when its file does not record it (vllm bench "
                   "serve does not); stored and shown with the run.")
@store_option
@json_option
def command(files: tuple[str, ...], labels: tuple[str, ...], tool_version: str | None,
            store_path: str | None, as_json: bool) -> int:
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
    with Store.open(store_path) as st:
        run_id, results, imported = import_files(st, list(files), labels=parse_labels(labels),
                                                 tool_version=tool_version)
    out = {"run_id": run_id, "tool": imported["tool"], "tool_version": imported["tool_version"],
           "files": imported["files"],
           "trials": [r.trial for r in results],
           "elements": {k: imported["elements"].get(k) for k in ELEMENTS},
           "unknown": imported["unknown"],
           "notes": imported["notes"]}
    emit(_Result(out), as_json, _render)
    return 0


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
    lines.append(f"next: decodescope triage {d['run_id']} --baseline RUN")
    return "\n".join(lines)
