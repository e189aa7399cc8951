"""`decodescope store info | copy SRC DST`: the run store itself (docs/store.md).

A store is an SQLite file (the default) or a `postgresql://USER@HOST:PORT/DB` URL. `copy`
moves every run, trial, trace, window, series and baseline between them, either way,
losslessly (store/copy.py); `info` says what a store is and holds, opened read-only.
"""

from __future__ import annotations

import click

from decodescope.cli.common import emit, store_option
from decodescope.console import json_option
from decodescope.store.connect import open_store
from decodescope.store.copy import CopyReport, copy_store, counts
from decodescope.store.db import SCHEMA_VERSION


@click.group("store")
def command() -> None:
    """Inspect a run store; copy one between SQLite and PostgreSQL."""


@command.command("info")
@store_option
@json_option
def info_cmd(store_path: str | None, as_json: bool) -> None:
    """What a store is (backend, schema, migrations) and how many rows it holds."""
    with open_store(store_path, read_only=True) as st:
        doc = {"store": st.path, "backend": st.backend, "schema_version": st.schema_version,
               "known_schema_version": SCHEMA_VERSION, "migrations": st.migrations,
               "rows": counts(st)}

    def text(d: dict) -> str:
        rows = ", ".join(f"{n} {t}" for t, n in d["rows"].items())
        return (f"{d['store']}\n  backend {d['backend']}, schema {d['schema_version']} "
                f"({', '.join(d['migrations'])})\n  {rows}")

    emit(doc, as_json, text)


@command.command("copy")
@click.argument("src")
@click.argument("dst")
@click.option("--append", is_flag=True,
              help="Add the runs to a destination that already has runs (new ids); "
                   "by default the destination must be empty and ids are kept.")
@json_option
def copy_cmd(src: str, dst: str, append: bool, as_json: bool) -> None:
    """Copy every run, trial, trace, window, series and baseline from SRC to DST.

    SRC and DST are SQLite files or postgresql:// URLs, either way round. SRC is only read;
    DST is created and migrated as needed. One transaction: all or nothing.
    """
    with open_store(src, read_only=True) as s, open_store(dst) as d:
        report = copy_store(s, d, append=append)

    def text(r: CopyReport) -> str:
        n = r.rows
        line = (f"copied {n.get('runs', 0)} runs ({n.get('trials', 0)} trials, "
                f"{n.get('requests', 0)} request traces, {n.get('windows', 0)} windows, "
                f"{n.get('series', 0)} series) and {n.get('baselines', 0)} baselines\n"
                f"  from {r.src} ({r.src_backend})\n  to   {r.dst} ({r.dst_backend})\n"
                f"  {r.bytes / 1e6:.1f} MB in {r.seconds:.2f} s")
        if r.append and r.first_new_run_id is not None:
            line += f"; the copied runs start at id {r.first_new_run_id}"
        if r.skipped_baselines:
            line += ("\n  kept the destination's baselines of the same name: "
                     + ", ".join(r.skipped_baselines))
        return line

    emit(report, as_json, text)
