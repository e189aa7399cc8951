import subprocess
import sys

import pytest

from decodescope.errors import StoreError
from decodescope.records.trace import Chunk, RequestTrace
from decodescope.records.window import EngineWindow
from decodescope.store import runs as sr
from decodescope.store.connect import open_store
from decodescope.store.db import MIGRATIONS, SCHEMA_VERSION


def trace(n=3):
    return RequestTrace(t_send_s=1.0, t_headers_s=1.1,
                        chunks=tuple(Chunk(1.2 + i * 0.01, content="x", tokens=1) for i in range(n)),
                        status_code=200, prompt_tokens=5, completion_tokens=n, reasoning_tokens=None,
                        finish_reason="length", t_done_s=2.0)


def new_run(st, **kw):
    args = dict(url="http://127.0.0.1:1", model="m", engine="vllm", caliber={"name": "c"},
                caliber_ref="c@1", caliber_identity="abc", labels={"tag": "after-pull"})
    args.update(kw)
    return sr.create_run(st, **args)


def test_schema_version_and_named_migrations(tmp_path):
    with open_store(tmp_path / "s.sqlite") as st:
        assert st.schema_version == SCHEMA_VERSION
        assert st.migrations == [name for name, _ in MIGRATIONS]
        assert st.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with open_store(tmp_path / "s.sqlite") as st:  # reopening migrates nothing twice
        assert st.migrations == [name for name, _ in MIGRATIONS]


def test_trial_roundtrip_keeps_raw_traces(tmp_path):
    with open_store(tmp_path / "s.sqlite") as st:
        rid = new_run(st)
        w = EngineWindow("prometheus", "vllm", 1.0, 2.0, generation_tokens=100, drafts=25,
                         accepted_tokens=75, running=1)
        sr.add_trial(st, rid, 0, status="ok", started_at=1.0, wall_anchor_s=5.0, result={"a": 1},
                     requests=[trace(4)], windows=[w])
        sr.update_run(st, rid, status="complete", result={"client": {}})
        run = sr.get_run(st, rid)
        assert run.status == "complete" and run.finished_at is not None
        assert run.trials[0].requests[0] == trace(4)
        assert run.windows[0] == w and run.windows[0].mal == 4.0
        assert sr.resolve_run_id(st, "last") == rid
        assert sr.resolve_run_id(st, "tag=after-pull") == rid
        assert sr.resolve_run_id(st, f"#{rid}") == rid
        with pytest.raises(StoreError):
            sr.resolve_run_id(st, "tag=nope")
        with pytest.raises(StoreError):
            sr.get_run(st, 999)


WRITER = """
import sys
from decodescope.store.db import Store
from decodescope.store.connect import open_store
from decodescope.store import runs as sr
from decodescope.records.trace import RequestTrace
st = open_store(sys.argv[1])
for i in range(40):
    rid = sr.create_run(st, url=None, model=None, engine=None, caliber=None, caliber_ref=None,
                        caliber_identity=None, labels={"writer": sys.argv[2]})
    sr.add_trial(st, rid, 0, status="ok", started_at=0.0, wall_anchor_s=0.0, result=None,
                 requests=[RequestTrace(0.0, None, (), 200, 1, 1, None, "stop")])
    sr.update_run(st, rid, status="complete")
print("ok")
"""


def test_two_processes_writing_at_once_both_succeed(tmp_path):
    db = str(tmp_path / "s.sqlite")
    open_store(db).close()
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, db, str(i)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    with open_store(db) as st:
        runs = sr.list_runs(st, limit=1000)
        assert len(runs) == 80
        assert {r.labels["writer"] for r in runs} == {"0", "1"}


def test_store_path_errors(tmp_path):
    with pytest.raises(StoreError) as e:
        open_store(tmp_path)
    assert "directory" in e.value.one_line()
    bad = tmp_path / "junk.sqlite"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError) as e:
        open_store(bad)
    assert "not a decodescope store" in e.value.one_line()


def test_newer_store_is_refused(tmp_path):
    db = tmp_path / "s.sqlite"
    with open_store(db) as st:
        st.conn.execute("INSERT INTO schema_migrations VALUES ('9999_future', 0)")
    with pytest.raises(StoreError) as e:
        open_store(db)
    assert "newer decodescope" in e.value.one_line()


def test_read_only_open_never_creates_migrates_or_writes(tmp_path):
    missing = tmp_path / "nope" / "s.sqlite"
    with pytest.raises(StoreError) as e:
        open_store(missing, read_only=True)
    assert "no run store" in e.value.one_line() and not missing.parent.exists()
    db = tmp_path / "s.sqlite"
    with open_store(db) as st:
        rid = new_run(st)
    before = db.read_bytes()
    with open_store(db, read_only=True) as st:
        assert sr.get_run(st, rid).labels == {"tag": "after-pull"}
        with pytest.raises(StoreError):
            sr.create_run(st, url=None, model=None, engine=None, caliber=None, caliber_ref=None,
                          caliber_identity=None, labels={})
    assert db.read_bytes() == before


def test_empty_sqlite_file_is_a_new_store_for_writers_only(tmp_path):
    db = tmp_path / "empty.sqlite"
    db.write_bytes(b"")
    with pytest.raises(StoreError) as e:
        open_store(db, read_only=True)
    assert "empty" in e.value.one_line()
    with open_store(db) as st:
        assert st.schema_version == SCHEMA_VERSION


def test_newer_user_version_is_refused_not_rewritten(tmp_path):
    import sqlite3

    db = tmp_path / "s.sqlite"
    open_store(db).close()
    c = sqlite3.connect(db)
    c.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    c.close()
    for ro in (False, True):
        with pytest.raises(StoreError) as e:
            open_store(db, read_only=ro)
        assert "newer decodescope" in e.value.one_line()
    c = sqlite3.connect(db)
    assert c.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1
    c.close()


def test_up_to_date_store_opens_without_the_write_lock(tmp_path):
    import sqlite3

    db = tmp_path / "s.sqlite"
    open_store(db).close()
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another writer mid-transaction
    try:
        with open_store(db) as st:  # no migration due: no BEGIN IMMEDIATE, no 30 s wait
            assert st.schema_version == SCHEMA_VERSION
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_sqlite_failures_become_store_errors_with_the_cause(tmp_path):
    import sqlite3

    from decodescope.errors import store_error

    assert "damaged" in store_error(sqlite3.DatabaseError("database disk image is malformed"), "x").one_line()
    assert "read-only" in store_error(sqlite3.OperationalError("attempt to write a readonly database"), "x").one_line()
    assert "locked" in store_error(sqlite3.OperationalError("database is locked"), "x").one_line()
    with open_store(tmp_path / "s.sqlite") as st:
        with pytest.raises(StoreError) as e:
            sr.get_run(st, 2**63)
        assert "run ids are 1.." in e.value.one_line()
        with pytest.raises(StoreError):
            sr.resolve_run_id(st, "99999999999999999999")
        st.conn.execute("DROP TABLE windows")
        rid = new_run(st)
        with pytest.raises(StoreError) as e:
            sr.get_run(st, rid)
        assert "no such table" in e.value.one_line()


def test_stored_values_pass_one_redaction_pass(tmp_path):
    from decodescope.redact import clear_registered_secrets, register_secret

    secret = "LiteralCanary42x"
    register_secret(secret)
    try:
        with open_store(tmp_path / "s.sqlite") as st:
            rid = new_run(st, url=f"http://u:{secret}@h:1", meta={"note": f"key {secret}"})
            tr = RequestTrace(t_send_s=1.0, t_headers_s=1.1,
                              chunks=(Chunk(1.2, content=f"say {secret}", tokens=1),
                                      Chunk(1.3, content="api_key = x", tokens=1)),
                              status_code=400, prompt_tokens=1, completion_tokens=2,
                              reasoning_tokens=None, finish_reason=None,
                              error=f"HTTP 400 (http://u:pw@h:1/v1): {secret}", t_done_s=2.0)
            sr.add_trial(st, rid, 0, status="failed", started_at=1.0, wall_anchor_s=0.0,
                         result=None, requests=[tr])
            sr.add_series(st, rid, "prometheus", {"url": "http://u:pw@h:1/metrics", "n": 3})
            run = sr.get_run(st, rid)
        assert run.url == "http://<redacted>@h:1" and run.meta["note"] == "key <redacted>"
        got = run.trials[0].requests[0]
        assert got.error == "HTTP 400 (http://<redacted>@h:1/v1): <redacted>"
        # chunk texts: only registered secrets (model output keeps its words and lengths)
        assert [c.content for c in got.chunks] == ["say <redacted>", "api_key = x"]
        assert run.series["prometheus"] == {"url": "http://<redacted>@h:1/metrics", "n": 3}
    finally:
        clear_registered_secrets()
