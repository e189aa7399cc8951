"""Reading and writing runs, trials, requests, engine windows and series.

Every JSON column goes through `db.dumps` (one redaction pass); a trace's chunk texts (the
model's output) get only the registered-secret pass, so stored output keeps its lengths.
SQLite failures surface as StoreError (exit 2) with the cause (`Store.guard`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from decodescope.errors import StoreError
from decodescope.probe.trace import RequestTrace
from decodescope.redact import REDACTED, redact_record, redact_text, registered_secrets
from decodescope.store.db import Store, dumps, dumps_redacted, loads
from decodescope.telemetry.window import EngineWindow

RUN_STATUSES = ("running", "complete", "interrupted", "failed")
MAX_RUN_ID = 2**63 - 1  # SQLite's INTEGER PRIMARY KEY is a signed 64-bit integer


@dataclass
class StoredTrial:
    idx: int
    status: str  # "ok" | "failed"
    started_at: float
    wall_anchor_s: float  # epoch = perf_counter time + wall_anchor_s
    result: dict[str, Any] | None
    requests: list[RequestTrace] = field(default_factory=list)


@dataclass
class StoredRun:
    id: int
    created_at: float
    finished_at: float | None
    kind: str
    status: str
    url: str | None
    model: str | None
    engine: str | None
    simulated: bool
    caliber_ref: str | None
    caliber_identity: str | None
    caliber: dict[str, Any] | None
    labels: dict[str, str]
    warnings: list[dict[str, Any]]
    fingerprint: dict[str, Any] | None
    result: dict[str, Any] | None
    meta: dict[str, Any]
    trials: list[StoredTrial] = field(default_factory=list)
    windows: list[EngineWindow] = field(default_factory=list)
    series: dict[str, Any] = field(default_factory=dict)

    def to_dict(self, with_traces: bool = True) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in (
            "id", "created_at", "finished_at", "kind", "status", "url", "model", "engine",
            "simulated", "caliber_ref", "caliber_identity", "caliber", "labels", "warnings",
            "fingerprint", "result", "meta")}
        d["trials"] = [
            {"idx": t.idx, "status": t.status, "started_at": t.started_at,
             "wall_anchor_s": t.wall_anchor_s, "result": t.result,
             **({"requests": [r.to_dict() for r in t.requests]} if with_traces else {})}
            for t in self.trials
        ]
        d["windows"] = [w.to_dict() for w in self.windows]
        if with_traces:
            d["series"] = self.series
        return d


def create_run(store: Store, *, url: str | None, model: str | None, engine: str | None,
               caliber: dict[str, Any] | None, caliber_ref: str | None,
               caliber_identity: str | None, labels: dict[str, str], simulated: bool = False,
               kind: str = "probe", meta: dict[str, Any] | None = None,
               fingerprint: dict[str, Any] | None = None) -> int:
    with store.tx() as c:
        cur = c.execute(
            "INSERT INTO runs (created_at, kind, status, url, model, engine, simulated, caliber_ref,"
            " caliber_identity, caliber_json, labels_json, meta_json, fingerprint_json)"
            " VALUES (?, ?, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (time.time(), kind, _text(url), _text(model), _text(engine), int(simulated),
             _text(caliber_ref), caliber_identity,
             dumps(caliber) if caliber is not None else None, dumps(labels), dumps(meta or {}),
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


def _text(value: Any) -> Any:
    """A plain text column gets the same redaction pass as the JSON ones."""
    return redact_text(value) if isinstance(value, str) else value


def trace_json(trace: RequestTrace) -> str:
    """A trace's stored JSON: the text rules over its error, usage and ids; only the registered
    secrets over its chunk texts (model output, where the rules would only add noise)."""
    d = trace.to_dict()
    chunks = d.pop("chunks")
    d = redact_record(d)
    secrets = registered_secrets()
    if secrets:
        for key in ("content", "reasoning"):
            chunks[key] = [_literals(text, secrets) for text in chunks[key]]
    d["chunks"] = chunks
    return dumps_redacted(d)


def _literals(text: str | None, secrets: list[str]) -> str | None:
    if text:
        for lit in secrets:
            if lit in text:
                text = text.replace(lit, REDACTED)
    return text


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
    return StoredRun(
        id=r[0], created_at=r[1], finished_at=r[2], kind=r[3], status=r[4], url=r[5], model=r[6],
        engine=r[7], simulated=bool(r[8]), caliber_ref=r[9], caliber_identity=r[10],
        caliber=loads(r[11]), labels=loads(r[12]) or {}, warnings=loads(r[13]) or [],
        fingerprint=loads(r[14]), result=loads(r[15]), meta=loads(r[16]) or {},
    )


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
    return run


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
    if where:
        q += " WHERE " + " AND ".join(where)
    q += " ORDER BY id DESC"
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
