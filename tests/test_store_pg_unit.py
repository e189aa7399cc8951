"""The PostgreSQL store's pieces that need no server: SQL translation, URL detection, error
lines (always redacted, with a remedy)."""

from __future__ import annotations

import pytest

from decodescope.errors import StoreError
from decodescope.redact import clear_registered_secrets
from decodescope.store.connect import open_store
from decodescope.store.db import is_postgres_url

psycopg = pytest.importorskip("psycopg")

from decodescope.store.pg import pg_store_error, translate  # noqa: E402


def test_postgres_urls_are_told_from_paths():
    assert is_postgres_url("postgresql://u@h/db") and is_postgres_url("POSTGRES://h/db")
    assert not is_postgres_url("runs.sqlite") and not is_postgres_url(None)
    assert not is_postgres_url("./postgresql:/x")


def test_sqlite_sql_is_translated():
    q, ret = translate("INSERT INTO runs (a, b) VALUES (?, ?)")
    assert q == "INSERT INTO runs (a, b) VALUES (%s, %s) RETURNING id" and ret
    assert translate("SELECT x FROM runs WHERE ref LIKE ?") == (
        "SELECT x FROM runs WHERE ref LIKE %s", False)
    assert translate("SELECT '5%' FROM t")[0] == "SELECT '5%%' FROM t"
    q, ret = translate("INSERT OR REPLACE INTO baselines (name, created_at, spec_json)"
                       " VALUES (?, ?, ?)")
    assert q == ("INSERT INTO baselines (name, created_at, spec_json) VALUES (%s, %s, %s)"
                 " ON CONFLICT (name) DO UPDATE SET created_at = EXCLUDED.created_at,"
                 " spec_json = EXCLUDED.spec_json") and not ret
    assert "decodescope_json_text(r.trace_json, 'error')" in translate(
        "SELECT json_extract(r.trace_json, '$.error') FROM requests r")[0]
    assert not translate("INSERT INTO baselines (name) VALUES (?)")[1]


def test_error_lines_are_redacted_and_say_what_to_do():
    e = pg_store_error(psycopg.OperationalError(
        'connection failed: FATAL:  password authentication failed for user "u"'), "postgresql://<redacted>@h/db")
    assert "cannot reach" in e.one_line() and "password" in e.remedy
    assert "postgresql://<redacted>@h/db" in e.one_line()


def test_a_bad_url_is_a_store_error_without_its_password():
    try:
        for url in ("postgresql://u:Sekret-pw-77@h:notaport/db",
                    "postgresql://u:Sekret-pw-77@127.0.0.1:1/db?connect_timeout=2"):
            with pytest.raises(StoreError) as e:
                open_store(url)
            assert "Sekret-pw-77" not in e.value.one_line()
    finally:
        clear_registered_secrets()
