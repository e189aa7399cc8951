"""`decodescope store copy SRC DST`: every run, trial, request trace, engine window, series
and baseline from one store into another, SQLite or PostgreSQL either way.

Lossless: rows are copied as stored (the JSON text byte for byte, numbers as the same 64-bit
values, the same ids), nothing is re-serialized or re-redacted, and each table's id
high-water mark is carried so the destination never hands out an id the source already used.
The whole copy is one transaction in the destination: it lands completely or not at all, and
the row counts are checked against the source before it commits.

Into an empty destination the ids are kept. `append=True` adds the runs to a store that has
runs of its own (several hosts' SQLite files into one shared PostgreSQL store): they get new
ids in the same order, their trials, traces, windows and series follow them, and a copied
baseline's run ids are rewritten to the new ids (a baseline whose name the destination
already has is left as the destination has it, and reported).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from decodescope.errors import StoreError, UsageError
from decodescope.store.db import Store

# Every column of every table, in schema order. A migration that adds a column adds it here
# (tests/test_store_copy.py compares these with the schema, so a new column cannot be
# silently dropped by a copy).
COLUMNS: dict[str, tuple[str, ...]] = {
    "runs": ("id", "created_at", "finished_at", "kind", "status", "url", "model", "engine",
             "simulated", "caliber_ref", "caliber_identity", "caliber_json", "labels_json",
             "warnings_json", "fingerprint_json", "result_json", "meta_json"),
    "trials": ("id", "run_id", "idx", "status", "started_at", "wall_anchor_s", "result_json"),
    "requests": ("id", "trial_id", "idx", "trace_json"),
    "windows": ("id", "run_id", "trial_idx", "source", "window_json"),
    "series": ("id", "run_id", "name", "data_json"),
    "baselines": ("name", "created_at", "caliber_ref", "spec_json"),
}
ID_TABLES = ("runs", "trials", "requests", "windows", "series")  # in foreign-key order
BATCH = 500  # rows per read from the source


@dataclass
class CopyReport:
    src: str
    dst: str
    src_backend: str
    dst_backend: str
    append: bool
    rows: dict[str, int] = field(default_factory=dict)
    bytes: int = 0  # text stored in the copied rows (JSON and plain columns)
    seconds: float = 0.0
    skipped_baselines: list[str] = field(default_factory=list)
    first_new_run_id: int | None = None  # append: where the copied runs start

    def to_dict(self) -> dict[str, Any]:
        return {"src": self.src, "dst": self.dst, "src_backend": self.src_backend,
                "dst_backend": self.dst_backend, "append": self.append, "rows": self.rows,
                "bytes": self.bytes, "seconds": round(self.seconds, 3),
                "skipped_baselines": self.skipped_baselines,
                "first_new_run_id": self.first_new_run_id}


def rows(store: Store, table: str) -> Iterator[tuple[Any, ...]]:
    """Every row of `table`, in id (name) order, read in batches (keyset pagination: the
    same SQL on both backends, memory bounded by one batch)."""
    cols = COLUMNS[table]
    key = cols[0]
    last: Any = None
    while True:
        where = "" if last is None else f" WHERE {key} > ?"
        with store.guard():
            batch = store.conn.execute(
                f"SELECT {', '.join(cols)} FROM {table}{where} ORDER BY {key} LIMIT {BATCH}",
                () if last is None else (last,)).fetchall()
        yield from (tuple(r) for r in batch)
        if len(batch) < BATCH:
            return
        last = batch[-1][0]


def counts(store: Store) -> dict[str, int]:
    with store.guard():
        return {t: int(store.conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0])
                for t in COLUMNS}


def _size(row: tuple[Any, ...]) -> int:
    return sum(len(v) for v in row if isinstance(v, str))


def copy_store(src: Store, dst: Store, *, append: bool = False) -> CopyReport:
    same = (os.path.realpath(src.path) == os.path.realpath(dst.path)
            if src.backend == dst.backend == "sqlite" else src.path == dst.path)
    if same:
        raise UsageError("source and destination are the same store", where=src.path,
                         remedy="Copy into another file or database")
    report = CopyReport(src.path, dst.path, src.backend, dst.backend, append)
    t0 = time.monotonic()
    want = counts(src)
    have = counts(dst)
    if not append and (have["runs"] or have["baselines"]):
        raise StoreError(f"the destination already holds {have['runs']} runs and "
                         f"{have['baselines']} baselines", where=dst.path,
                         remedy="Copy into a new or empty store (ids are kept), or pass --append "
                                "to add the runs under new ids")
    with dst.tx() as c:
        if append:
            _append(src, c, report)
        else:
            _exact(src, dst, c, report)
        got = {t: int(c.execute(f"SELECT count(*) FROM {t}").fetchone()[0]) for t in COLUMNS}
        expect = {t: have[t] + want[t] - (len(report.skipped_baselines) if t == "baselines" else 0)
                  for t in COLUMNS}
        if got != expect:  # raising rolls the whole copy back
            raise StoreError(f"the copy does not add up (expected {expect}, found {got}); "
                             "nothing was written", where=dst.path,
                             remedy="Was the source written to during the copy? Run it again")
    report.seconds = time.monotonic() - t0
    return report


def _insert_sql(table: str, cols: tuple[str, ...]) -> str:
    return f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"


def _insert_batched(c: Any, sql: str, source: Iterable[tuple[Any, ...]],
                    report: CopyReport) -> int:
    """executemany in batches of BATCH; returns the rows, counts their text bytes."""
    n = 0
    batch: list[tuple[Any, ...]] = []
    for row in source:
        batch.append(row)
        report.bytes += _size(row)
        if len(batch) >= BATCH:
            c.executemany(sql, batch)
            n += len(batch)
            batch = []
    if batch:
        c.executemany(sql, batch)
        n += len(batch)
    return n


def _exact(src: Store, dst: Store, c: Any, report: CopyReport) -> None:
    for table in (*ID_TABLES, "baselines"):
        report.rows[table] = _insert_batched(c, _insert_sql(table, COLUMNS[table]),
                                             rows(src, table), report)
    for table in ID_TABLES:
        dst.raise_id_high_water(c, table, src.id_high_water(table))


def _append(src: Store, c: Any, report: CopyReport) -> None:
    run_ids: dict[int, int] = {}
    trial_ids: dict[int, int] = {}
    # runs and trials one by one (their new ids are needed), the rest in batches
    for table, ids, parent in (("runs", run_ids, None), ("trials", trial_ids, run_ids)):
        cols = COLUMNS[table][1:]
        sql = _insert_sql(table, cols)
        n = 0
        for row in rows(src, table):
            values = list(row[1:])
            if parent is not None:
                values[0] = parent[values[0]]
            ids[row[0]] = int(c.execute(sql, values).lastrowid)
            report.bytes += _size(row)
            n += 1
        report.rows[table] = n
    report.first_new_run_id = min(run_ids.values()) if run_ids else None
    for table, parent in (("requests", trial_ids), ("windows", run_ids), ("series", run_ids)):
        report.rows[table] = _insert_batched(
            c, _insert_sql(table, COLUMNS[table][1:]),
            ((parent[row[1]], *row[2:]) for row in rows(src, table)), report)
    taken = {r[0] for r in c.execute("SELECT name FROM baselines").fetchall()}
    sql = _insert_sql("baselines", COLUMNS["baselines"])
    n = 0
    for name, created, ref, spec_json in rows(src, "baselines"):
        if name in taken:
            report.skipped_baselines.append(name)
            continue
        spec = json.loads(spec_json)
        if spec.get("run_ids"):
            spec["run_ids"] = [run_ids.get(i, i) for i in spec["run_ids"]]
            spec_json = json.dumps(spec)
        c.execute(sql, (name, created, ref, spec_json))
        report.bytes += len(name) + len(ref) + len(spec_json)
        n += 1
    report.rows["baselines"] = n
