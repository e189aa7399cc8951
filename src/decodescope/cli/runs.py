"""`decodescope runs list | show RUN | export RUN... | rm RUN...`.

Read commands: the store is opened read-only (never created, migrated or written), so a
read-only store can be listed and a mistyped --store says so instead of starting a new one.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import time
from typing import Any

import click

from decodescope.analysis.run_quantities import quantities_of, speculative_of
from decodescope.cli.common import emit, store_option, to_jsonable
from decodescope.console import json_option
from decodescope.errors import StoreError
from decodescope.records.quantity import POOLED
from decodescope.records.stored_run import StoredRun
from decodescope.redact import redact_output
from decodescope.report.headline import headline
from decodescope.report.iso import iso, with_iso
from decodescope.report.runs_table import TABLES, to_csv
from decodescope.report.runs_table import rows as export_rows
from decodescope.report.text_table import text_table
from decodescope.store import runs as sr
from decodescope.store.connect import open_store
from decodescope.store.db import SCHEMA_VERSION, Store


def _when(t: float | None) -> str:
    return dt.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S") if t else "-"


def _f(v: Any, fmt: str = "{:.1f}") -> str:
    return "—" if v is None else fmt.format(v)


@click.group("runs")
def command() -> None:
    """List, show, export and delete stored runs."""


@command.command("list")
@click.option("--caliber", default=None, help="Only runs of this caliber (name, name@version or identity).")
@click.option("--label", default=None, help="Only runs carrying this label key=value.")
@click.option("--limit", default=50, show_default=True)
@store_option
@json_option
def list_cmd(caliber: str | None, label: str | None, limit: int, store_path: str | None,
             as_json: bool) -> None:
    """List stored runs, newest first."""
    lab = tuple(label.split("=", 1)) if label and "=" in label else None
    with open_store(store_path, read_only=True) as st:
        runs = sr.list_runs(st, caliber=caliber, label=lab, limit=limit)  # type: ignore[arg-type]
        path = st.path
    rows = [_list_row(r) for r in runs]

    def text(rows: list[dict]) -> str:
        if not rows:
            return f"no runs in {path}"
        table = text_table(
            ["id", "created", "status", "caliber", "identity", "engine", "decode tok/s",
             "source", "MAL", "labels"],
            [[str(r["id"]), r["created_at"], r["status"], r["caliber"] or "-",
              r["identity"] or "-", (r["engine"] or "-") + (" (sim)" if r["simulated"] else ""),
              _f(r["decode_rate"]), r["decode_source"] or "-",
              _mal_cell(r),
              ",".join(f"{k}={v}" for k, v in r["labels"].items())] for r in rows],
            right=(0, 6, 8))
        return (table + "\ndecode tok/s: per request, median over trials, from the source the "
                "verdict uses (the engine's when it has per-trial numbers); MAL: the engine's, "
                "median over trials (pooled: the engine's pooled counts, where no trial has "
                f"one)\nstore: {path}")

    emit(rows, as_json, text)


def _list_row(r: StoredRun) -> dict[str, Any]:
    head = headline(r.result)
    qs = quantities_of(r.result)  # the run's reported numbers, as every output shows them
    return {
        "id": r.id, "created_at": _when(r.created_at), "created_at_iso": iso(r.created_at),
        "status": r.status, "caliber": r.caliber_ref, "identity": r.caliber_identity,
        "engine": r.engine, "simulated": r.simulated, "model": r.model, "labels": r.labels,
        "decode_rate": head.decode_rate, "decode_source": head.source,
        "decode_trials": head.trials, "decode_statistic": qs["decode_rate"].basis_text(),
        "decode_rate_client": qs["client_decode_rate"].value,
        "mal": qs["mal"].value, "mal_statistic": qs["mal"].basis_text(),
        "speculative": speculative_of(qs),
        "quantities": {k: q.to_dict() for k, q in qs.items()},
        "caliber_status": (r.result or {}).get("caliber_status"),
    }


def _mal_cell(r: dict[str, Any]) -> str:
    """MAL as the run's record has it: '1 (no drafts)' when the engine counted steps but no
    drafts, the pooled count marked as such (the footer names the default statistic)."""
    if r["speculative"] is False:
        return "1 (no drafts)"
    q = r["quantities"]["mal"]
    return _f(r["mal"], "{:.2f}") + (" pooled" if r["mal"] is not None
                                     and q["statistic"] == POOLED else "")


@command.command("show")
@click.argument("run")
@click.option("--slo", "slo", default=None, metavar="LIMITS",
              help="Goodput of the run's requests under these limits (as probe --slo), "
                   "computed from its traces; not stored.")
@store_option
@json_option
def show_cmd(run: str, store_path: str | None, as_json: bool, slo: str | None = None) -> None:
    """Show one run (id, `last`, or label key=value): caliber, trials, numbers, warnings."""
    from decodescope.report.distributions import run_distributions
    from decodescope.report.run_document import run_document
    from decodescope.report.text import render_run

    with open_store(store_path, read_only=True) as st:
        r = sr.get_run(st, sr.resolve_run_id(st, run), with_traces=False)
        shown = r
        if (not as_json and r.result is None and r.trials
                and r.status in ("running", sr.ABANDONED)):
            shown = _so_far(st, r)
        full = sr.get_run(st, r.id)
        dist = run_distributions(dataclasses.replace(shown, trials=full.trials))
        if slo is not None:
            from decodescope.analysis.goodput import goodput_of_run
            from decodescope.caliber.slo import parse_slo

            g = goodput_of_run(full, dataclasses.asdict(parse_slo(slo)))
            r = shown = dataclasses.replace(shown, result={**(shown.result or {}), "goodput": g})
    emit(run_document(r, dist), as_json, lambda _: render_run(shown, dist))


def _so_far(st: Store, r: StoredRun) -> StoredRun:
    """A run that never finished (still running, or abandoned by a killed process) has no
    result: the text shows the numbers of its completed trials, computed here, not stored."""
    from decodescope.analysis.run_result import analyze_run

    full = sr.get_run(st, r.id)
    return dataclasses.replace(r, result=analyze_run(full))


@command.command("export")
@click.argument("runs", nargs=-1, required=True)
@click.option("--format", "fmt", type=click.Choice(["json", "csv", "br"]), default="json", show_default=True,
              help="json: the whole run(s) with raw traces; csv: one table (--table); br: the "
                   "llm-d benchmark report 0.2 of one run (YAML when -o ends in .yaml).")
@click.option("--table", type=click.Choice(list(TABLES)), default="runs", show_default=True,
              help="With --format csv: one row per run (summary and percentiles), per trial, or per request.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None, help="File (default stdout).")
@store_option
def export_cmd(runs: tuple[str, ...], fmt: str, table: str, output: str | None,
               store_path: str | None) -> None:
    """Export stored RUNs (ids, `last`, key=value) as JSON or CSV.

    JSON keeps the epoch timestamps and adds an ISO-8601 `<name>_iso` sibling (UTC offset)
    to each; a single RUN is {"run": ...}, several are {"runs": [...]}."""
    with open_store(store_path, read_only=True) as st:
        ids = list(dict.fromkeys(sr.resolve_run_id(st, s) for s in runs))
        loaded = [sr.get_run(st, i) for i in ids]
    if fmt == "br":
        text = _br_text(loaded, output)
    elif fmt == "csv":
        text = to_csv(export_rows(loaded, table))
    else:
        from decodescope.report.distributions import run_distributions

        docs = [with_iso(to_jsonable({**r.to_dict(), "headline": dataclasses.asdict(headline(r.result)),
                                      "quantities": {k: q.to_dict() for k, q in
                                                     quantities_of(r.result).items()},
                                      "distributions": run_distributions(r)})) for r in loaded]
        head = {"schema_version": SCHEMA_VERSION, "exported_at": iso(time.time())}
        doc = ({**head, "kind": "decodescope.run", "run": docs[0]} if len(docs) == 1
               else {**head, "kind": "decodescope.runs", "runs": docs})
        text = json.dumps(doc, indent=1) + "\n"
    if output:
        text = redact_output(text)  # stdout gets this pass in run_click; a file gets it here
        with open(output, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        click.echo(f"wrote {output}", err=True)
    else:
        click.echo(text, nl=False)


def _br_text(loaded: list[Any], output: str | None) -> str:
    """One run as an llm-d benchmark report 0.2 (peers/llmd_report.py)."""
    from decodescope.errors import UsageError
    from decodescope.peers.llmd_report import run_report
    from decodescope.verdict.imported_run import run_elements

    if len(loaded) != 1:
        raise UsageError(f"--format br writes one run per report; {len(loaded)} were given",
                         where="runs export", remedy="Export each run to its own file")
    doc = run_report(loaded[0], run_elements(loaded[0]))
    if output and output.endswith((".yaml", ".yml")):
        import yaml

        return str(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


@command.command("rm")
@click.argument("runs", nargs=-1, required=True)
@click.option("--force", is_flag=True, help="Also delete runs a baseline was built from.")
@store_option
def rm_cmd(runs: tuple[str, ...], force: bool, store_path: str | None) -> None:
    """Delete stored RUNs (ids, `last`, key=value) with their trials, traces and windows."""
    from decodescope.errors import UsageError
    from decodescope.verdict.baseline import list_baselines

    with open_store(store_path) as st:
        ids = list(dict.fromkeys(sr.resolve_run_id(st, s) for s in runs))
        used = {i: b.name for b in list_baselines(st) for i in b.run_ids if i in ids}
        if used and not force:
            which = ", ".join(f"run {i} (baseline {n})" for i, n in sorted(used.items()))
            raise UsageError(f"{which}: a baseline was built from it", where="runs rm",
                             remedy="Delete the baseline first, or pass --force")
        for i in ids:
            if not sr.delete_run(st, i):
                raise StoreError(f"no run {i}", where=st.path,
                                 remedy="List runs with `decodescope runs list`")
            click.echo(f"deleted run {i}", err=True)
