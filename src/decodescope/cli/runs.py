"""`decodescope runs list | show RUN | export RUN`.

Read commands: the store is opened read-only (never created, migrated or written), so a
read-only store can be listed and a mistyped --store says so instead of starting a new one.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import click

from decodescope.cli.common import emit, json_option, store_option, to_jsonable
from decodescope.redact import redact_output
from decodescope.store import runs as sr
from decodescope.store.db import SCHEMA_VERSION, Store


def _when(t: float | None) -> str:
    return dt.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S") if t else "-"


def _f(v: Any, fmt: str = "{:.1f}") -> str:
    return "—" if v is None else fmt.format(v)


@click.group("runs")
def command() -> None:
    """List, show and export stored runs."""


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
    with Store.open(store_path, read_only=True) as st:
        runs = sr.list_runs(st, caliber=caliber, label=lab, limit=limit)  # type: ignore[arg-type]
        path = st.path
    rows = [{
        "id": r.id, "created_at": _when(r.created_at), "status": r.status, "caliber": r.caliber_ref,
        "identity": r.caliber_identity, "engine": r.engine, "simulated": r.simulated, "model": r.model,
        "labels": r.labels,
        "decode_rate": ((r.result or {}).get("client", {}).get("decode_rate") or {}).get("median"),
        "mal": _engine_mal(r.result), "caliber_status": (r.result or {}).get("caliber_status"),
    } for r in runs]

    def text(rows: list[dict]) -> str:
        if not rows:
            return f"no runs in {path}"
        lines = [f"{'id':>4}  {'created':<19}  {'status':<11} {'caliber':<22} {'engine':<10} {'decode':>7} {'MAL':>5}  labels"]
        for r in rows:
            eng = (r["engine"] or "-") + ("(sim)" if r["simulated"] else "")
            labels = ",".join(f"{k}={v}" for k, v in r["labels"].items())
            lines.append(f"{r['id']:>4}  {r['created_at']:<19}  {r['status']:<11} {r['caliber'] or '-':<22} "
                         f"{eng:<10} {_f(r['decode_rate']):>7} {_f(r['mal'], '{:.2f}'):>5}  {labels}")
        lines.append(f"store: {path}")
        return "\n".join(lines)

    emit(rows, as_json, text)


def _engine_mal(result: dict | None) -> float | None:
    for src in ("prometheus", "log", "request"):
        v = ((result or {}).get("engine") or {}).get(src)
        if v and v.get("mal") is not None:
            return v["mal"]
    return None


@command.command("show")
@click.argument("run")
@store_option
@json_option
def show_cmd(run: str, store_path: str | None, as_json: bool) -> None:
    """Show one run (id, `last`, or label key=value): caliber, trials, numbers, warnings."""
    from decodescope.report.text import render_run

    with Store.open(store_path, read_only=True) as st:
        r = sr.get_run(st, sr.resolve_run_id(st, run), with_traces=False)
    emit(r.to_dict(with_traces=False), as_json, lambda _: render_run(r))


@command.command("export")
@click.argument("run")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None, help="File (default stdout).")
@store_option
def export_cmd(run: str, output: str | None, store_path: str | None) -> None:
    """Export one run with its raw traces, windows and series as JSON."""
    with Store.open(store_path, read_only=True) as st:
        r = sr.get_run(st, sr.resolve_run_id(st, run))
    doc = {"schema_version": SCHEMA_VERSION, "kind": "decodescope.run", "run": to_jsonable(r.to_dict())}
    text = json.dumps(doc, indent=1)
    if output:
        text = redact_output(text)  # stdout gets this pass in run_click; a file gets it here
        with open(output, "w", encoding="utf-8") as f:
            f.write(text)
        click.echo(f"wrote {output}", err=True)
    else:
        click.echo(text)
