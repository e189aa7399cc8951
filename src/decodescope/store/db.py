"""The run store: SQLite with a schema version, named migrations, WAL.

Each trial is committed as soon as it completes. Two processes writing at once both succeed
(WAL + busy timeout + short write transactions). Raw traces are kept; derived results are
recomputable from them.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import platformdirs

from decodescope.errors import StoreError

ENV_STORE = "DECODESCOPE_STORE"
BUSY_TIMEOUT_MS = 30_000  # a writer waits this long for another process's transaction

MIGRATIONS: list[tuple[str, str]] = [
    ("0001_initial", """
        CREATE TABLE runs (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            created_at REAL NOT NULL,
            finished_at REAL,
            kind TEXT NOT NULL DEFAULT 'probe',
            status TEXT NOT NULL,
            url TEXT,
            model TEXT,
            engine TEXT,
            simulated INTEGER NOT NULL DEFAULT 0,
            caliber_ref TEXT,
            caliber_identity TEXT,
            caliber_json TEXT,
            labels_json TEXT NOT NULL DEFAULT '{}',
            warnings_json TEXT NOT NULL DEFAULT '[]',
            fingerprint_json TEXT,
            result_json TEXT,
            meta_json TEXT NOT NULL DEFAULT '{}'
        );
        CREATE TABLE trials (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            idx INTEGER NOT NULL,
            status TEXT NOT NULL,
            started_at REAL NOT NULL,
            wall_anchor_s REAL NOT NULL,
            result_json TEXT,
            UNIQUE(run_id, idx)
        );
        CREATE TABLE requests (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
            idx INTEGER NOT NULL,
            trace_json TEXT NOT NULL
        );
        CREATE TABLE windows (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            trial_idx INTEGER,
            source TEXT NOT NULL,
            window_json TEXT NOT NULL
        );
        CREATE TABLE series (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            name TEXT NOT NULL,
            data_json TEXT NOT NULL
        );
        CREATE INDEX runs_caliber ON runs(caliber_identity);
        CREATE INDEX trials_run ON trials(run_id);
        CREATE INDEX requests_trial ON requests(trial_id);
        CREATE INDEX windows_run ON windows(run_id);
    """),
    ("0002_baselines", """
        CREATE TABLE baselines (
            name TEXT PRIMARY KEY,
            created_at REAL NOT NULL,
            caliber_ref TEXT NOT NULL,
            spec_json TEXT NOT NULL
        );
    """),
]
SCHEMA_VERSION = len(MIGRATIONS)


def default_store_path() -> Path:
    env = os.environ.get(ENV_STORE)
    if env:
        return Path(env)
    return Path(platformdirs.user_data_dir("decodescope")) / "runs.sqlite"


class Store:
    def __init__(self, conn: sqlite3.Connection, path: str):
        self.conn = conn
        self.path = path

    @classmethod
    def open(cls, path: str | Path | None = None) -> Store:
        p = Path(path) if path is not None else default_store_path()
        where = str(p)
        if p.exists() and p.is_dir():
            raise StoreError("store path is a directory", where=where,
                             remedy="Give a file path with --store or DECODESCOPE_STORE")
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(p, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                                   check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"not a decodescope store: {exc}", where=where,
                             remedy="Point --store at a decodescope SQLite file or a new path") from None
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the run store: {exc}", where=where,
                             remedy="Check the path and its permissions, or pass --store FILE") from None
        store = cls(conn, where)
        try:
            store._migrate()
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise StoreError(f"not a decodescope store: {exc}", where=where,
                             remedy="Point --store at a decodescope SQLite file or a new path") from None
        return store

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """A short write transaction (BEGIN IMMEDIATE takes the write lock up front)."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def _migrate(self) -> None:
        with self.tx() as c:
            c.execute("CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
            done = {r[0] for r in c.execute("SELECT name FROM schema_migrations")}
            known = {name for name, _ in MIGRATIONS}
            unknown = done - known
            if unknown:
                raise StoreError(f"store was written by a newer decodescope (migrations {sorted(unknown)})",
                                 where=self.path, remedy="Upgrade decodescope, or use another --store")
            for name, sql in MIGRATIONS:
                if name not in done:
                    for stmt in sql.split(";"):
                        if stmt.strip():
                            c.execute(stmt)
                    c.execute("INSERT INTO schema_migrations VALUES (?, ?)", (name, time.time()))
            c.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @property
    def schema_version(self) -> int:
        return int(self.conn.execute("PRAGMA user_version").fetchone()[0])

    @property
    def migrations(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT name FROM schema_migrations ORDER BY name")]


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), allow_nan=True, default=_default)


def _default(obj: Any) -> Any:
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


def loads(text: str | None) -> Any:
    return json.loads(text) if text else None
