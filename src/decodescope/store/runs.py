"""Reading and writing runs, trials, requests, engine windows and series.

Every JSON column goes through `db.dumps` (one redaction pass); a trace's chunk texts (the
model's output) get only the registered-secret pass, so stored output keeps its lengths.
SQLite failures surface as StoreError (exit 2) with the cause (`Store.guard`).

A run records who writes it (`meta.writer`: pid, host, boot id, process start time). A run
still `running` whose writer is gone from this host (killed, crashed, the machine rebooted) is
read as `abandoned`: nothing will ever finish it. Its completed trials are kept as committed.
A `failed` run carries its cause (`StoredRun.failure`): the error of the failing trace.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import sqlite3
import time
from typing import Any

from decodescope.errors import StoreError
from decodescope.records.stored_run import StoredRun, StoredTrial
from decodescope.records.trace import RequestTrace
from decodescope.records.window import EngineWindow
from decodescope.redact import redact_literals, redact_record, redact_text, registered_secrets
from decodescope.store.db import Store, dumps, dumps_redacted, loads

RUN_STATUSES = ("running", "complete", "interrupted", "failed")
# Not stored: how a `running` run whose writer process is gone reads (see `writer_gone`).
ABANDONED = "abandoned"
MAX_RUN_ID = 2**63 - 1  # SQLite's INTEGER PRIMARY KEY is a signed 64-bit integer


def create_run(store: Store, *, url: str | None, model: str | None, engine: str | None,
               caliber: dict[str, Any] | None, caliber_ref: str | None,
               caliber_identity: str | None, labels: dict[str, str], simulated: bool = False,
               kind: str = "probe", meta: dict[str, Any] | None = None,
               fingerprint: dict[str, Any] | None = None) -> int:
    meta = {**(meta or {}), "writer": writer_identity()}
    with store.tx() as c:
        cur = c.execute(
            "INSERT INTO runs (created_at, kind, status, url, model, engine, simulated, caliber_ref,"
            " caliber_identity, caliber_json, labels_json, meta_json, fingerprint_json)"
            " VALUES (?, ?, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (time.time(), kind, _text(url), _text(model), _text(engine), int(simulated),
             _text(caliber_ref), caliber_identity,
             dumps(caliber) if caliber is not None else None, dumps(labels), dumps(meta),
             dumps(fingerprint) if fingerprint is not None else None),
        )
        return int(cur.lastrowid or 0)


def add_trial(store: Store, run_id: int, idx: int, *, status: str, started_at: float,
              wall_anchor_s: float, result: dict[str, Any] | None,
              requests: list[RequestTrace], windows: list[EngineWindow] = ()) -> None:  # type: ignore[assignment]
    """Commit one completed (or failed) trial with its raw traces, in one transaction."""
    with store.tx() as c:
        cur = c.execute(
            "INSERT INTO trials (run_id, idx, status, started_at, wall_anchor_s, result_json)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (run_id, idx, status, started_at, wall_anchor_s, dumps(result) if result else None))
        tid = cur.lastrowid
        c.executemany("INSERT INTO requests (trial_id, idx, trace_json) VALUES (?, ?, ?)",
                      [(tid, i, trace_json(r)) for i, r in enumerate(requests)])
        c.executemany("INSERT INTO windows (run_id, trial_idx, source, window_json) VALUES (?, ?, ?, ?)",
                      [(run_id, idx, w.source, dumps(w.to_dict())) for w in windows])


def set_trial_status(store: Store, run_id: int, idx: int, status: str) -> None:
    """Change one stored trial's status (an A/B trial first marked "retaken" whose cause then
    persisted: it is the arm's evidence, kept as an ordinary trial)."""
    with store.tx() as c:
        c.execute("UPDATE trials SET status = ? WHERE run_id = ? AND idx = ?",
                  (status, run_id, idx))


def delete_run(store: Store, run_id: int) -> bool:
    """Delete one run with its trials, traces, windows and series, in one transaction
    (explicit deletes: no reliance on ON DELETE CASCADE). False when there is no such run."""
    _check_id(store, run_id)
    with store.tx() as c:
        if c.execute("SELECT id FROM runs WHERE id = ?", (run_id,)).fetchone() is None:
            return False
        c.execute("DELETE FROM requests WHERE trial_id IN (SELECT id FROM trials WHERE run_id = ?)",
                  (run_id,))
        for table in ("trials", "windows", "series"):
            c.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
        c.execute("DELETE FROM runs WHERE id = ?", (run_id,))
    return True


def _text(value: Any) -> Any:
    """A plain text column gets the same redaction pass as the JSON ones."""
    return redact_text(value) if isinstance(value, str) else value


def trace_json(trace: RequestTrace) -> str:
    """A trace's stored JSON: the text rules over its error, usage and ids; only the registered
    secrets over its chunk texts (model output, where the rules would only add noise)."""
    d = trace.to_dict()
    chunks = d.pop("chunks")
    d = redact_record(d)
    if registered_secrets():
        for key in ("content", "reasoning"):
            chunks[key] = [redact_literals(text) if text else text for text in chunks[key]]
    d["chunks"] = chunks
    return dumps_redacted(d)


def add_windows(store: Store, run_id: int, windows: list[EngineWindow],
                trial_idx: int | None = None) -> None:
    with store.tx() as c:
        c.executemany("INSERT INTO windows (run_id, trial_idx, source, window_json) VALUES (?, ?, ?, ?)",
                      [(run_id, trial_idx, w.source, dumps(w.to_dict())) for w in windows])


def add_series(store: Store, run_id: int, name: str, data: Any) -> None:
    with store.tx() as c:
        c.execute("INSERT INTO series (run_id, name, data_json) VALUES (?, ?, ?)",
                  (run_id, name, dumps(data)))


def update_run(store: Store, run_id: int, **fields_: Any) -> None:
    """Set status / result / warnings / fingerprint / engine / model / meta on a run."""
    cols = {"status": "status", "result": "result_json", "warnings": "warnings_json",
            "fingerprint": "fingerprint_json", "engine": "engine", "model": "model",
            "meta": "meta_json", "labels": "labels_json", "simulated": "simulated"}
    sets, vals = [], []
    for k, v in fields_.items():
        col = cols[k]
        sets.append(f"{col} = ?")
        vals.append(dumps(v) if col.endswith("_json") else _text(v))
    if fields_.get("status") in ("complete", "interrupted", "failed"):
        sets.append("finished_at = ?")
        vals.append(time.time())
    with store.tx() as c:
        c.execute(f"UPDATE runs SET {', '.join(sets)} WHERE id = ?", (*vals, run_id))


_RUN_COLS = ("id, created_at, finished_at, kind, status, url, model, engine, simulated, caliber_ref,"
             " caliber_identity, caliber_json, labels_json, warnings_json, fingerprint_json,"
             " result_json, meta_json")


def _row_to_run(r: tuple[Any, ...]) -> StoredRun:
    run = StoredRun(
        id=r[0], created_at=r[1], finished_at=r[2], kind=r[3], status=r[4], url=r[5], model=r[6],
        engine=r[7], simulated=bool(r[8]), caliber_ref=r[9], caliber_identity=r[10],
        caliber=loads(r[11]), labels=loads(r[12]) or {}, warnings=loads(r[13]) or [],
        fingerprint=loads(r[14]), result=loads(r[15]), meta=loads(r[16]) or {},
    )
    if run.status == "running":
        gone = writer_gone(run.meta.get("writer"))
        if gone:
            run.status = ABANDONED
            run.status_note = (f"{gone}; the run will never finish. Its completed trials are "
                               "kept")
    return run


# ---- who writes a run, and whether it is still there ----------------------------------------

def writer_identity() -> dict[str, Any]:
    """This process, as a run records its writer: enough to tell later, on this host, whether
    the process is gone (pid, and its start time against pid reuse; the boot id across
    reboots)."""
    pid = os.getpid()
    started = _process_started(pid)
    return {"pid": pid, "host": _hostname(), "boot_id": _boot_id(),
            "started": started if started is not None and started == started else None}


def writer_gone(writer: Any) -> str | None:
    """Why the process that wrote a `running` run is certainly gone, or None when it is alive
    or that cannot be told (another host, a run written before writers were recorded)."""
    if not isinstance(writer, dict) or not isinstance(writer.get("pid"), int):
        return None
    pid, host = writer["pid"], writer.get("host")
    if not host or host != _hostname():
        return None  # another machine's process: cannot be seen from here
    who = f"its probe process (pid {pid} on {host})"
    boot = _boot_id()
    if writer.get("boot_id") and boot and writer["boot_id"] != boot:
        return f"{who} ended when the machine rebooted"
    if pid == os.getpid():
        return None
    started = _process_started(pid)
    if started is None:
        return f"{who} no longer exists"
    if isinstance(writer.get("started"), (int, float)) and abs(started - writer["started"]) > 1.0:
        return f"{who} no longer exists (the pid now belongs to another process)"
    return None


def _hostname() -> str:
    try:
        return socket.gethostname()
    except OSError:  # pragma: no cover
        return ""


def _boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip() or None
    except OSError:  # not Linux: reboots are not told apart (the pid check still runs)
        return None


def _process_started(pid: int) -> float | None:
    """When process `pid` started (epoch seconds), or None when there is no such live process
    (a zombie, killed but not yet reaped, counts as gone). A process we may not inspect counts
    as alive with its start time unknown (NaN, which never differs by more than a second)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return float(proc.create_time())
    except psutil.NoSuchProcess:
        return None
    except (psutil.AccessDenied, psutil.Error, OSError):
        return float("nan")  # alive, start unknown: abs(nan - x) > 1.0 is False


def get_run(store: Store, run_id: int, *, with_traces: bool = True) -> StoredRun:
    with store.guard():
        return _get_run(store, run_id, with_traces)


def _get_run(store: Store, run_id: int, with_traces: bool) -> StoredRun:
    _check_id(store, run_id)
    row = store.conn.execute(f"SELECT {_RUN_COLS} FROM runs WHERE id = ?", (run_id,)).fetchone()
    if row is None:
        raise StoreError(f"no run {run_id}", where=store.path,
                         remedy="List runs with `decodescope runs list`")
    run = _row_to_run(row)
    trials = store.conn.execute(
        "SELECT id, idx, status, started_at, wall_anchor_s, result_json FROM trials"
        " WHERE run_id = ? ORDER BY idx", (run_id,)).fetchall()
    for tid, idx, status, started, anchor, res in trials:
        t = StoredTrial(idx, status, started, anchor, loads(res))
        if with_traces:
            t.requests = [RequestTrace.from_dict(loads(tr)) for (tr,) in store.conn.execute(
                "SELECT trace_json FROM requests WHERE trial_id = ? ORDER BY idx", (tid,))]
        run.trials.append(t)
    run.windows = [EngineWindow.from_dict(loads(w)) for (w,) in store.conn.execute(
        "SELECT window_json FROM windows WHERE run_id = ? ORDER BY id", (run_id,))]
    if with_traces:
        run.series = {n: loads(d) for n, d in store.conn.execute(
            "SELECT name, data_json FROM series WHERE run_id = ? ORDER BY id", (run_id,))}
    if run.status == "failed":
        run.failure = _failure(store, run)
    return run


def _failure(store: Store, run: StoredRun) -> dict[str, Any] | None:
    """The failing trace's error (first failed trial, first failed request), else what the
    probe recorded when it stopped (`meta.stop`, a failure outside any trace)."""
    for t in run.trials:
        for i, tr in enumerate(t.requests):
            if tr.error is not None:
                return {"error": tr.error, "error_kind": tr.error_kind, "trial": t.idx + 1,
                        "request": i + 1}
    if not any(t.requests for t in run.trials):  # loaded without traces: ask for the one
        with contextlib.suppress(sqlite3.OperationalError):  # an SQLite without JSON1
            row = store.conn.execute(
                "SELECT t.idx, r.idx, json_extract(r.trace_json, '$.error'),"
                " json_extract(r.trace_json, '$.error_kind')"
                " FROM requests r JOIN trials t ON r.trial_id = t.id"
                " WHERE t.run_id = ? AND t.status = 'failed'"
                " AND json_extract(r.trace_json, '$.error') IS NOT NULL"
                " ORDER BY t.idx, r.idx LIMIT 1", (run.id,)).fetchone()
            if row is not None:
                return {"error": row[2], "error_kind": row[3], "trial": row[0] + 1,
                        "request": row[1] + 1}
    stop = run.meta.get("stop")
    if isinstance(stop, dict) and stop.get("error"):
        return {"error": stop["error"], "error_kind": stop.get("error_kind")}
    return None


def _check_id(store: Store, run_id: int) -> None:
    if not 0 < run_id <= MAX_RUN_ID:
        raise StoreError(f"no run {run_id}: run ids are 1..{MAX_RUN_ID}", where=store.path,
                         remedy="List runs with `decodescope runs list`")


def list_runs(store: Store, *, caliber: str | None = None, label: tuple[str, str] | None = None,
              limit: int = 50) -> list[StoredRun]:
    with store.guard():
        return _list_runs(store, caliber, label, limit)


def _list_runs(store: Store, caliber: str | None, label: tuple[str, str] | None,
               limit: int) -> list[StoredRun]:
    q = f"SELECT {_RUN_COLS} FROM runs"
    where, args = [], []
    if caliber:
        where.append("(caliber_ref = ? OR caliber_ref LIKE ? OR caliber_identity = ?)")
        args += [caliber, caliber + "@%", caliber]
    sql_label = label is not None and re.fullmatch(r"\w+", label[0]) is not None
    if label is not None and sql_label:  # in SQL: only the label's runs are read and decoded
        where.append(f"json_extract(labels_json, '$.{label[0]}') = ?")
        args.append(label[1])
    if where:
        q += " WHERE " + " AND ".join(where)
    q += " ORDER BY id DESC"
    if sql_label:
        q += f" LIMIT {int(limit)}"
    runs = [_row_to_run(r) for r in store.conn.execute(q, args)]
    if label:
        runs = [r for r in runs if r.labels.get(label[0]) == label[1]]
    return runs[:limit]


def resolve_run_id(store: Store, selector: str) -> int:
    """`42`, `#42`, `last`, or a label `key=value` (newest run carrying it)."""
    s = selector.strip().lstrip("#")
    if s.isascii() and s.isdigit():
        _check_id(store, int(s))
        return int(s)
    if s == "last":
        with store.guard():
            row = store.conn.execute("SELECT max(id) FROM runs").fetchone()
        if row and row[0]:
            return int(row[0])
        raise StoreError("the store has no runs yet", where=store.path,
                         remedy="Run `decodescope probe URL --caliber NAME` first")
    if "=" in s:
        k, v = s.split("=", 1)
        runs = list_runs(store, label=(k, v), limit=1)
        if runs:
            return runs[0].id
        raise StoreError(f"no run labelled {k}={v}", where=store.path,
                         remedy="List runs and their labels with `decodescope runs list`")
    raise StoreError(f"not a run selector: {selector!r}", where=store.path,
                     remedy="Use a run id (42), `last`, or a label key=value")
