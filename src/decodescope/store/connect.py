"""The one way to open a run store: SQLite (a path) or PostgreSQL (a `postgresql://` URL), as
the argument or DECODESCOPE_STORE. Above db.py and pg.py, so neither imports the other's
opener (no import cycle between them).

    open_store(path=None, read_only=False) -> Store
"""

from __future__ import annotations

import os
from pathlib import Path

from decodescope.store.db import ENV_STORE, Store, is_postgres_url
from decodescope.store.pg import PgStore


def open_store(path: str | Path | None = None, *, read_only: bool = False) -> Store:
    """Open the store. Write commands create and migrate it; read commands (`read_only=True`)
    never create, migrate or write it. A foreign database or a newer schema is refused
    untouched (store.db, store.pg)."""
    if path is None and is_postgres_url(os.environ.get(ENV_STORE)):
        path = os.environ[ENV_STORE]
    if is_postgres_url(path):
        return PgStore.open_url(str(path), read_only=read_only)
    return Store.open_sqlite(path, read_only=read_only)
