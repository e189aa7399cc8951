"""The run store: SQLite with a schema version, named migrations, WAL; or PostgreSQL.

Write commands open it with `open_store(path)` (created and migrated as needed); read commands
with `open_store(path, read_only=True)` (never created, migrated or written). A foreign SQLite
database, a newer schema or a damaged file is a StoreError (exit 2) with the cause, and the file
is left as it was. Every JSON column passes through one redaction pass (`dumps`).

Each trial is committed as soon as it completes. Two processes writing at once both succeed
(WAL + busy timeout + short write transactions). Raw traces are kept; derived results are
recomputable from them.

A `postgresql://` (or `postgres://`) location opens the same schema, under the same named
migrations, in a PostgreSQL database instead (store/pg.py, psycopg 3): `store.connect.open_store` returns a
`PgStore`, whose `conn` takes the same SQL (`?` parameters) as the SQLite connection, so
store/runs.py and verdict/baseline.py run unchanged on either backend.
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
from urllib.parse import quote

import platformdirs

from decodescope.errors import StoreError, store_error
from decodescope.redact import redact_record

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


def is_postgres_url(location: object) -> bool:
    """True for a `postgresql://` / `postgres://` store location (any case)."""
    return isinstance(location, str) and location.strip().lower().startswith(
        ("postgresql://", "postgres://"))


def check_migrations(done: set[str] | None, where: str, read_only: bool) -> None:
    """A store's applied migrations (None: no migrations table yet) against what this version
    knows: a newer store is refused; an empty one is refused when opened read-only."""
    if done is not None:
        unknown = done - {name for name, _ in MIGRATIONS}
        if unknown:
            raise StoreError(f"store was written by a newer decodescope (migrations {sorted(unknown)})",
                             where=where, remedy="Upgrade decodescope, or use another --store")
    elif read_only:
        raise StoreError("the run store is empty (no decodescope tables yet)", where=where,
                         remedy="Run `decodescope probe URL --caliber NAME` to record a first run")

class Store:
    backend = "sqlite"

    def __init__(self, conn: Any, path: str, read_only: bool = False):
        # sqlite3.Connection here; PgStore's connection takes the same SQL (store/pg.py).
        self.conn: Any = conn
        self.path = path  # where errors say the store is (a Postgres URL without its password)
        self.read_only = read_only

    @classmethod
    def open_sqlite(cls, path: str | Path | None = None, *, read_only: bool = False) -> Store:
        """Open the store. Write commands create and migrate it; read commands
        (`read_only=True`) never create, migrate or write it, so a read-only file can be
        listed. Either way a foreign SQLite database or a newer schema is refused untouched.
        SQLite only: `store.connect.open_store` is the one way in (it opens a PgStore for a
        `postgresql://` URL, as argument or DECODESCOPE_STORE)."""
        p = Path(path) if path is not None else default_store_path()
        where = str(p)
        if p.exists() and p.is_dir():
            raise StoreError("store path is a directory", where=where,
                             remedy="Give a file path with --store or DECODESCOPE_STORE")
        if read_only and not p.exists():
            raise StoreError("no run store at this path", where=where,
                             remedy="Check --store / DECODESCOPE_STORE; the first `decodescope probe` creates the store")
        try:
            conn = _connect(p, read_only)
        except sqlite3.Error as exc:
            if "file is not a database" in str(exc):
                raise StoreError(f"not a decodescope store: {exc}", where=where,
                                 remedy="Point --store at a decodescope SQLite file or a new path") from None
            raise StoreError(f"cannot open the run store: {exc}", where=where,
                             remedy="Check the path and its permissions, or pass --store FILE") from None
        except OSError as exc:
            raise StoreError(f"cannot open the run store: {exc.strerror or exc}", where=where,
                             remedy="Check the path and its permissions, or pass --store FILE") from None
        store = cls(conn, where, read_only)
        try:
            store._check_kind()
            if not read_only:
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA foreign_keys = ON")
                store._migrate()
        except StoreError:
            conn.close()
            raise
        except sqlite3.DatabaseError as exc:
            conn.close()
            if "file is not a database" in str(exc):
                raise StoreError(f"not a decodescope store: {exc}", where=where,
                                 remedy="Point --store at a decodescope SQLite file or a new path") from None
            raise store_error(exc, where) from None
        return store

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def tx(self) -> Iterator[Any]:
        """A short write transaction (BEGIN IMMEDIATE takes the write lock up front)."""
        if self.read_only:
            raise StoreError("this command opened the run store read-only", where=self.path)
        with self.guard():
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield self.conn
            except BaseException:
                # SQLite has already rolled back after an I/O or disk-full error: a second
                # ROLLBACK would fail and hide the cause
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")

    @contextmanager
    def guard(self) -> Iterator[None]:
        """SQLite failures (a damaged file, a lock held too long, a read-only file) become a
        StoreError with the cause; programming errors stay what they are."""
        try:
            yield
        except (sqlite3.OperationalError, sqlite3.DataError) as exc:
            raise store_error(exc, self.path) from None
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, (sqlite3.ProgrammingError, sqlite3.IntegrityError,
                                sqlite3.InterfaceError)):
                raise
            raise store_error(exc, self.path) from None

    def _check_kind(self) -> None:
        """Refuse, before anything is written, a database decodescope did not create and a
        schema newer than this version knows."""
        c = self.conn
        tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        version = int(c.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise StoreError(f"store was written by a newer decodescope (schema {version}, this "
                             f"version knows {SCHEMA_VERSION})", where=self.path,
                             remedy="Upgrade decodescope, or use another --store")
        ours = {"schema_migrations", "runs", "trials", "requests", "windows", "series", "baselines",
                "sqlite_sequence"}
        foreign = sorted(t for t in tables if t not in ours)
        if "schema_migrations" not in tables and tables:
            raise StoreError("not a decodescope store: an SQLite database with other tables ("
                             + ", ".join(sorted(tables))[:120] + ")", where=self.path,
                             remedy="Point --store at a decodescope store or a new path; the file was not changed")
        if foreign:
            raise StoreError("not a decodescope store: it has tables decodescope does not know ("
                             + ", ".join(foreign)[:120] + ")", where=self.path,
                             remedy="Point --store at a decodescope store or a new path; the file was not changed")
        done = ({r[0] for r in c.execute("SELECT name FROM schema_migrations")}
                if "schema_migrations" in tables else None)
        check_migrations(done, self.path, self.read_only)

    def _pending(self) -> list[str]:
        has = self.conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table'"
                                " AND name = 'schema_migrations'").fetchone()
        if not has:
            return [name for name, _ in MIGRATIONS]
        done = {r[0] for r in self.conn.execute("SELECT name FROM schema_migrations")}
        return [name for name, _ in MIGRATIONS if name not in done]

    def _migrate(self) -> None:
        """Apply pending migrations; an up-to-date store is only read (no write lock)."""
        if not self._pending() and self.schema_version == SCHEMA_VERSION:
            return
        with self.tx() as c:
            c.execute("CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
            done = {r[0] for r in c.execute("SELECT name FROM schema_migrations")}
            unknown = done - {name for name, _ in MIGRATIONS}
            if unknown:  # another, newer process migrated it meanwhile
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

    # ---- what `store copy` needs beyond the shared SQL --------------------------------------

    def id_high_water(self, table: str) -> int:
        """The highest id this table has ever handed out (AUTOINCREMENT never reuses one, even
        after a delete), so a copy can carry it over."""
        with self.guard():
            row = self.conn.execute("SELECT seq FROM sqlite_sequence WHERE name = ?",
                                    (table,)).fetchone()
            top = self.conn.execute(f"SELECT max(id) FROM {table}").fetchone()
        return max(int(row[0]) if row and row[0] is not None else 0,
                   int(top[0]) if top and top[0] is not None else 0)

    def raise_id_high_water(self, c: Any, table: str, value: int) -> None:
        """Inside a write transaction: the next id of `table` comes after `value`."""
        if value <= 0:
            return
        if c.execute("SELECT 1 FROM sqlite_sequence WHERE name = ?", (table,)).fetchone():
            c.execute("UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = ?", (value, table))
        else:
            c.execute("INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)", (table, value))


def _connect(p: Path, read_only: bool) -> sqlite3.Connection:
    """A connection with the busy timeout. Read-only: `mode=ro`, so nothing is created or
    written; a WAL store in a directory this user cannot write (no -shm can be made) is read
    as immutable instead."""
    if not read_only:
        p.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(p, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                               check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        return conn
    uri = "file:" + quote(str(p.resolve()), safe="/")
    for query in ("?mode=ro", "?mode=ro&immutable=1"):
        conn = sqlite3.connect(uri + query, uri=True, timeout=BUSY_TIMEOUT_MS / 1000,
                               isolation_level=None, check_same_thread=False)
        try:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return conn
        except sqlite3.OperationalError as exc:
            conn.close()
            if "unable to open" not in str(exc) or "immutable" in query:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def dumps(obj: Any) -> str:
    """JSON for a stored column, after one redaction pass over every string in it (URL
    userinfo, registered secrets, key formats): nothing secret reaches the file or its WAL."""
    return dumps_redacted(redact_record(obj))


def dumps_redacted(obj: Any) -> str:
    """JSON for a value the caller has already redacted (see runs.add_trial)."""
    return json.dumps(obj, separators=(",", ":"), allow_nan=True, default=_default)


def _default(obj: Any) -> Any:
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


def loads(text: str | None) -> Any:
    return json.loads(text) if text else None
