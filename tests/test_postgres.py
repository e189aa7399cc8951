"""The PostgreSQL run store against a real, throwaway PostgreSQL server.

`./dev test` installs Debian's `postgresql` package; `pg_cluster()` starts one cluster per
test session with its initdb / pg_ctl (in a temp dir, on a free loopback port, password auth),
and each test gets a database of its own. As root, the server runs as the `postgres` system
user (or `nobody`) through subprocess's `user=`: no su, no sudo. Without the binaries every
test here skips with the reason.
"""

from __future__ import annotations

import atexit
import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass

import pytest

from decodescope.errors import StoreError
from decodescope.records.trace import Chunk, RequestTrace
from decodescope.records.window import EngineWindow
from decodescope.store import runs as sr
from decodescope.store.connect import open_store
from decodescope.store.db import MIGRATIONS, SCHEMA_VERSION, Store

pytestmark = pytest.mark.timeout(300)

PG_PASSWORD = "Pg-Canary-s3cret!x"  # URL-quoted in the URLs below; must never be printed or stored
PG_PASSWORD_Q = "Pg-Canary-s3cret%21x"
PG_USER = "dsadmin"


def pg_bindir() -> str | None:
    """The newest PostgreSQL server binaries: Debian's /usr/lib/postgresql/N/bin, else PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    if found:
        return os.path.dirname(found[-1])
    initdb = shutil.which("initdb")
    return os.path.dirname(initdb) if initdb else None


@dataclass
class Cluster:
    bindir: str
    datadir: str
    port: int
    run_as: str | None  # a user name when we are root, else None (ourselves)
    log: str

    def url(self, db: str = "postgres", password: bool = True) -> str:
        cred = f"{PG_USER}:{PG_PASSWORD_Q}" if password else PG_USER
        return f"postgresql://{cred}@127.0.0.1:{self.port}/{db}"

    def psql(self, sql: str, db: str = "postgres") -> str:
        import psycopg

        with psycopg.connect(self.url(db), autocommit=True) as c:
            cur = c.execute(sql)
            return "\n".join(str(r[0]) for r in cur.fetchall()) if cur.description else ""

    def new_db(self) -> str:
        name = "t_" + uuid.uuid4().hex[:12]
        self.psql(f"CREATE DATABASE {name}")
        return name

    def stop(self) -> None:
        subprocess.run([f"{self.bindir}/pg_ctl", "-D", self.datadir, "-m", "immediate", "-w",
                        "stop"], user=self.run_as, capture_output=True, timeout=60)
        shutil.rmtree(os.path.dirname(self.datadir), ignore_errors=True)


_cluster: Cluster | None = None
_cluster_error: str | None = None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start() -> Cluster:
    bindir = pg_bindir()
    if bindir is None:
        raise RuntimeError("PostgreSQL server binaries (initdb, pg_ctl) are not installed: "
                           "`./dev test` installs Debian's postgresql package")
    run_as = None
    if os.geteuid() == 0:  # the server refuses to run as root
        for name in ("postgres", "nobody"):
            try:
                pwd.getpwnam(name)
                run_as = name
                break
            except KeyError:
                continue
        if run_as is None:
            raise RuntimeError("running as root, and no unprivileged user (postgres, nobody) "
                               "to run the PostgreSQL server as")
    top = tempfile.mkdtemp(prefix="decodescope-pg-")
    datadir, pwfile, log = f"{top}/data", f"{top}/pw", f"{top}/server.log"
    with open(pwfile, "w") as f:
        f.write(PG_PASSWORD + "\n")
    if run_as:
        ent = pwd.getpwnam(run_as)
        for p in (top, pwfile):
            os.chown(p, ent.pw_uid, ent.pw_gid)
    env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
    r = subprocess.run([f"{bindir}/initdb", "-D", datadir, "-U", PG_USER, f"--pwfile={pwfile}",
                        "--auth=scram-sha-256", "-E", "UTF8", "--no-sync"],
                       user=run_as, capture_output=True, text=True, env=env, cwd=top, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"initdb failed: {r.stderr.strip()[-400:]}")
    port = _free_port()
    opts = (f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories='' "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            "-c max_connections=60 -c shared_buffers=32MB")
    r = subprocess.run([f"{bindir}/pg_ctl", "-D", datadir, "-l", log, "-o", opts, "-w", "-t", "60",
                        "start"], user=run_as, capture_output=True, text=True, env=env, cwd=top,
                       timeout=90)
    if r.returncode != 0:
        tail = r.stderr
        if os.path.exists(log):
            with open(log) as f:
                tail = f.read()[-400:]
        raise RuntimeError(f"pg_ctl start failed: {tail.strip()}")
    return Cluster(bindir, datadir, port, run_as, log)


def pg_cluster() -> Cluster:
    """The session's cluster, started on first use and stopped when the session ends. Skips
    only where the server binaries are absent; binaries that are there but fail to start a
    cluster fail the test (with initdb's / the server's own words)."""
    global _cluster, _cluster_error
    if pg_bindir() is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are not installed: "
                    "`./dev test` installs Debian's postgresql package")
    if _cluster is None and _cluster_error is None:
        try:
            _cluster = _start()
            atexit.register(_cluster.stop)
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            _cluster_error = str(exc)
    if _cluster is None:
        pytest.fail(f"could not start a throwaway PostgreSQL cluster: {_cluster_error}")
    return _cluster


@pytest.fixture
def pg_url() -> str:
    """A new, empty database on the session's cluster, as a URL with a password."""
    c = pg_cluster()
    return c.url(c.new_db())


# ---- helpers shared with the other Postgres tests --------------------------------------------

def trace(n: int = 3, error: str | None = None) -> RequestTrace:
    return RequestTrace(t_send_s=1.0, t_headers_s=1.1,
                        chunks=tuple(Chunk(1.2 + i * 0.01, content="x", tokens=1) for i in range(n)),
                        status_code=200 if error is None else 500, prompt_tokens=5,
                        completion_tokens=n, reasoning_tokens=None,
                        finish_reason="length" if error is None else None, t_done_s=2.0,
                        error=error)


def new_run(st: Store, **kw: object) -> int:
    args: dict = dict(url="http://127.0.0.1:1", model="m", engine="vllm", caliber={"name": "c"},
                      caliber_ref="c@1", caliber_identity="abc", labels={"tag": "after-pull"})
    args.update(kw)
    return sr.create_run(st, **args)


# ---- the store on PostgreSQL -----------------------------------------------------------------

def test_schema_version_and_named_migrations(pg_url):
    with open_store(pg_url) as st:
        assert st.backend == "postgresql"
        assert st.schema_version == SCHEMA_VERSION
        assert st.migrations == [name for name, _ in MIGRATIONS]
    with open_store(pg_url) as st:  # reopening migrates nothing twice
        assert st.migrations == [name for name, _ in MIGRATIONS]
        assert st.conn.execute("SELECT count(*) FROM schema_migrations").fetchone()[0] == 2


def test_trial_roundtrip_keeps_raw_traces(pg_url):
    with open_store(pg_url) as st:
        rid = new_run(st)
        w = EngineWindow("prometheus", "vllm", 1.0, 2.0, generation_tokens=100, drafts=25,
                         accepted_tokens=75, running=1)
        sr.add_trial(st, rid, 0, status="ok", started_at=1.0, wall_anchor_s=5.0, result={"a": 1},
                     requests=[trace(4)], windows=[w])
        sr.add_series(st, rid, "prometheus", {"t": [1.0, float("nan")], "n": 3})
        sr.update_run(st, rid, status="complete", result={"client": {}}, simulated=True)
        run = sr.get_run(st, rid)
        assert run.status == "complete" and run.finished_at is not None and run.simulated
        assert run.trials[0].requests[0] == trace(4)
        assert run.windows[0] == w and run.windows[0].mal == 4.0
        assert run.series["prometheus"]["n"] == 3
        assert sr.resolve_run_id(st, "last") == rid
        assert sr.resolve_run_id(st, "tag=after-pull") == rid
        assert [r.id for r in sr.list_runs(st, caliber="c")] == [rid]
        with pytest.raises(StoreError):
            sr.resolve_run_id(st, "tag=nope")
        with pytest.raises(StoreError) as e:
            sr.get_run(st, 999)
        assert "no run 999" in e.value.one_line()


def test_failed_run_carries_its_cause_without_traces(pg_url):
    with open_store(pg_url) as st:
        rid = new_run(st)
        sr.add_trial(st, rid, 0, status="failed", started_at=1.0, wall_anchor_s=0.0,
                     result={"x": float("nan")}, requests=[trace(1), trace(1, error="HTTP 500")])
        sr.update_run(st, rid, status="failed")
        full = sr.get_run(st, rid)
        bare = sr.get_run(st, rid, with_traces=False)  # json_extract, on PostgreSQL
    assert full.failure == bare.failure == {"error": "HTTP 500", "error_kind": None,
                                            "trial": 1, "request": 2}


def test_baselines_upsert_on_postgres(pg_url):
    from decodescope.verdict.baseline import (
        Baseline,
        delete_baseline,
        get_baseline,
        list_baselines,
        save_baseline,
    )

    with open_store(pg_url) as st:
        b = Baseline("anchor", 1.0, "c@1", "abc", (90.0, 100.0), 85.0, (1, 2), "client", (95.0,),
                     None, False)
        save_baseline(st, b)
        save_baseline(st, Baseline("anchor", 2.0, "c@1", "abc", (91.0, 101.0), 86.0, (1,),
                                   "client", (96.0,), None, False))  # INSERT OR REPLACE
        got = get_baseline(st, "anchor")
        assert got is not None and got.band == (91.0, 101.0) and got.created_at == 2.0
        assert [x.name for x in list_baselines(st)] == ["anchor"]
        assert delete_baseline(st, "anchor") and not delete_baseline(st, "anchor")


def test_read_only_open_never_creates_or_writes(pg_url):
    with pytest.raises(StoreError) as e:
        open_store(pg_url, read_only=True)
    assert "empty" in e.value.one_line()
    c = pg_cluster()
    db = pg_url.rsplit("/", 1)[1]
    assert c.psql("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'", db) == "0"
    with open_store(pg_url) as st:
        rid = new_run(st)
    with open_store(pg_url, read_only=True) as st:
        assert sr.get_run(st, rid).labels == {"tag": "after-pull"}
        with pytest.raises(StoreError) as e:
            sr.create_run(st, url=None, model=None, engine=None, caliber=None, caliber_ref=None,
                          caliber_identity=None, labels={})
        assert "read-only" in e.value.one_line()


def test_foreign_database_and_newer_store_are_refused_untouched(pg_url):
    c = pg_cluster()
    db = pg_url.rsplit("/", 1)[1]
    c.psql("CREATE TABLE customers (id int)", db)
    with pytest.raises(StoreError) as e:
        open_store(pg_url)
    assert "not a decodescope store" in e.value.one_line() and "customers" in e.value.one_line()
    assert "search_path" in e.value.remedy
    c.psql("CREATE SCHEMA decodescope", db)
    scoped = pg_url + "?options=-csearch_path%3Ddecodescope"  # its own schema: fine
    with open_store(scoped) as st:
        new_run(st)
        st.conn.execute("INSERT INTO schema_migrations VALUES ('9999_future', 0)")
    for ro in (False, True):
        with pytest.raises(StoreError) as e:
            open_store(scoped, read_only=ro)
        assert "newer decodescope" in e.value.one_line()


def test_missing_table_and_bad_ids_are_store_errors(pg_url):
    with open_store(pg_url) as st:
        with pytest.raises(StoreError) as e:
            sr.get_run(st, 2**63)
        assert "run ids are 1.." in e.value.one_line()
        st.conn.execute("DROP TABLE windows")
        rid = new_run(st)
        with pytest.raises(StoreError) as e:
            sr.get_run(st, rid)
        assert "lacks a table" in e.value.one_line()


def test_the_url_password_is_never_shown_or_stored(pg_url, capsys):
    from decodescope.cli.main import main
    from decodescope.redact import clear_registered_secrets

    c = pg_cluster()
    try:
        with open_store(pg_url) as st:
            assert PG_PASSWORD_Q not in st.path and PG_PASSWORD not in st.path
            assert st.path.startswith("postgresql://") and f":{c.port}/" in st.path
            rid = new_run(st, meta={"store": pg_url, "note": f"pw {PG_PASSWORD}"})
            sr.add_trial(st, rid, 0, status="failed", started_at=1.0, wall_anchor_s=0.0,
                         result=None, requests=[trace(1, error=f"boom {PG_PASSWORD} {pg_url}")])
        db = pg_url.rsplit("/", 1)[1]
        dump = c.psql("SELECT string_agg(t::text, ' ') FROM (SELECT * FROM runs) t", db) + \
            c.psql("SELECT string_agg(trace_json, ' ') FROM requests", db)
        assert PG_PASSWORD not in dump and PG_PASSWORD_Q not in dump and "<redacted>" in dump
        # wrong password, unknown database, nothing listening: one line, URL redacted, exit 2
        bad_pw = pg_url.replace(PG_PASSWORD_Q, "Wrong-Canary-pw9")
        bad_db = pg_url.rsplit("/", 1)[0] + "/nosuchdb"
        closed = f"postgresql://{PG_USER}:{PG_PASSWORD_Q}@127.0.0.1:1/x"
        for url, words in ((bad_pw, "password"), (bad_db, "does not exist"),
                           (closed, "cannot reach")):
            for argv in (["runs", "list", "--store", url], ["baseline", "list", "--store", url]):
                capsys.readouterr()
                assert main(argv) == 2
                err = capsys.readouterr().err
                assert words in err and err.count("\n") == 1, err
                assert "Wrong-Canary-pw9" not in err and PG_PASSWORD not in err
                assert PG_PASSWORD_Q not in err and "Traceback" not in err
        # the environment variable: registered too, though it is not on the command line
        os.environ["DECODESCOPE_STORE"] = bad_pw
        clear_registered_secrets()
        try:
            with pytest.raises(StoreError) as e:
                open_store(None, read_only=True)
        finally:
            del os.environ["DECODESCOPE_STORE"]
        assert "Wrong-Canary-pw9" not in e.value.one_line()
        assert "postgresql://" in e.value.one_line()
    finally:
        clear_registered_secrets()


WRITER = """
import sys
from decodescope.store.db import Store
from decodescope.store.connect import open_store
from decodescope.store import runs as sr
from decodescope.records.trace import RequestTrace
st = open_store(sys.argv[1])
n = int(sys.argv[3])
for i in range(n):
    rid = sr.create_run(st, url=None, model=None, engine=None, caliber=None, caliber_ref=None,
                        caliber_identity=None, labels={"writer": sys.argv[2], "i": str(i)})
    sr.add_trial(st, rid, 0, status="ok", started_at=0.0, wall_anchor_s=0.0, result=None,
                 requests=[RequestTrace(0.0, None, (), 200, 1, 1, None, "stop")] * 4)
    sr.update_run(st, rid, status="complete")
print("ok")
"""


def test_several_processes_write_at_once(pg_url):
    """Six processes on an empty database: they race to create the tables (the advisory
    lock lets one), then interleave 40 runs each; every run and trace lands, ids unique."""
    writers, per = 6, 40
    t0 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, pg_url, str(i), str(per)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(writers)]
    outs = [p.communicate(timeout=240) for p in procs]
    took = time.monotonic() - t0
    assert [p.returncode for p in procs] == [0] * writers, outs
    with open_store(pg_url, read_only=True) as st:
        runs = sr.list_runs(st, limit=10_000)
        assert len(runs) == writers * per == len({r.id for r in runs})
        assert {r.labels["writer"] for r in runs} == {str(i) for i in range(writers)}
        assert all(r.status == "complete" for r in runs)
        assert st.conn.execute("SELECT count(*) FROM requests").fetchone()[0] == writers * per * 4
    print(f"{writers} writers x {per} runs in {took:.2f} s")


def test_a_run_from_another_host_is_never_called_abandoned(pg_url):
    """A shared store holds runs written on many hosts: only the writing host can tell that a
    run's process is gone; everywhere else a `running` run stays `running`."""
    dead = {"pid": 2**22 + 12345, "boot_id": None, "started": 1.0}
    with open_store(pg_url) as st:
        here = new_run(st)
        there = new_run(st)
        sr.update_run(st, here, meta={"writer": {**dead, "host": socket.gethostname()}})
        sr.update_run(st, there, meta={"writer": {**dead, "host": "gpu-node-17"}})
        assert sr.get_run(st, here).status == "abandoned"
        assert sr.get_run(st, there).status == "running"
