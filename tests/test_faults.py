"""The fault suite: misbehaving servers, bad files and crashes end in one line and the
documented exit code, bounded in time and memory (docs/faults.md has the table).

Servers: the simulator (`decodescope sim`) and a small misbehaving HTTP server
(tests/test_faults_server.py) on 127.0.0.1. Time bounds are generous (a fault that is not
handled takes 600 s, or never ends); every request is bounded by --timeout / --deadline.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_faults_server import FaultServer

from decodescope.cli.main import main
from decodescope.exitcodes import ExitCode
from decodescope.probe import client as cl
from decodescope.sim import SimConfig, SimServer
from decodescope.store import runs as sr
from decodescope.store.connect import open_store

CALIBER = "demo-code-rewrite"  # max_tokens 384: at most 832 chunks, 6 MiB per response
FAST = ["--no-scrape", "--no-fingerprint", "--trials", "1"]
BOUND_S = 60  # generous: an unhandled fault takes 600 s (the old read timeout) or forever

pytestmark = pytest.mark.timeout(180)


def probe(url: str, store: Path, *extra: str) -> tuple[int, float]:
    t0 = time.monotonic()
    rc = main(["probe", url, "--caliber", CALIBER, "--store", str(store), *FAST, *extra])
    return rc, time.monotonic() - t0


def one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith(("error:", "internal error:"))]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


# ---- 3. bounded responses -------------------------------------------------------------------

@pytest.mark.parametrize("mode, extra, code, needle", [
    # a server that lists models and never answers the completion
    ("hang", ["--timeout", "1"], ExitCode.UNREACHABLE, "timed out"),
    ("hang", ["--deadline", "1"], ExitCode.UNREACHABLE, "no answer within the deadline of 1 s"),
    # headers, then silence: the idle timeout would be 600 s, the deadline ends it
    ("hang_after_headers", ["--deadline", "1.5"], ExitCode.PROTOCOL, "did not finish within the deadline"),
    # an endless 200 text/html page is refused at its headers
    ("html_endless", [], ExitCode.PROTOCOL, "with HTML, not SSE"),
    # an endless error body is read only far enough to say why
    ("error_endless", [], ExitCode.PROTOCOL, "server error HTTP 500"),
    # a valid SSE stream that never ends is cut at what max_tokens allows
    ("sse_endless", [], ExitCode.PROTOCOL, "more than max_tokens allows"),
    # SSE data without a newline, keep-alive comments forever: cut by bytes
    ("sse_no_newline", [], ExitCode.PROTOCOL, "more than the request can produce"),
    ("sse_comments", [], ExitCode.PROTOCOL, "more than the request can produce"),
    # a chunk-size line that never ends
    ("chunked_endless_size", [], ExitCode.PROTOCOL, "chunk size line or trailers too long"),
])
def test_misbehaving_server_is_bounded(tmp_path, capsys, mode, extra, code, needle):
    db = tmp_path / "s.sqlite"
    with FaultServer(mode) as srv:
        rc, took = probe(srv.url, db, *extra)
    err = capsys.readouterr().err
    line = one_error_line(err)
    assert rc == code, err
    assert needle in line
    assert took < BOUND_S
    # The failed trial is kept with what arrived, bounded by the caliber.
    with open_store(db, read_only=True) as st:
        run = sr.get_run(st, sr.resolve_run_id(st, "last"))
    assert run.status == "failed"
    trace = run.trials[0].requests[0]
    assert trace.error is not None and len(trace.chunks) <= 2 * 384 + 64


def test_endless_sse_is_cut_near_the_cap_not_after_gigabytes(tmp_path, capsys):
    with FaultServer("sse_endless") as srv:
        rc, _ = probe(srv.url, tmp_path / "s.sqlite")
        sent = srv.sent_bytes
    assert rc == ExitCode.PROTOCOL
    # The server wrote until the client hung up: the cap (832 chunks, ~200 KB here) plus what
    # sat in socket buffers, never the ~1 GB the unbounded client took in 30 s.
    assert sent < 64 * 1024 * 1024, sent


def test_timeout_and_deadline_reach_check_and_sweep():
    from decodescope.cli.check import command as check_cmd
    from decodescope.cli.sweep import command as sweep_cmd

    for cmd in (check_cmd, sweep_cmd):
        names = {p.name for p in cmd.params}
        assert {"timeout_s", "deadline_s"} <= names


def test_stream_limits_scope_the_clients_made_inside():
    with cl.stream_limits(idle_timeout_s=2.5, deadline_s=9.0):
        assert cl.current_limits() == cl.StreamLimits(2.5, 9.0)
        client = cl.make_client()
        try:
            assert client.h1 is not None and client.h1.read_timeout_s == 2.5  # type: ignore[attr-defined]
        finally:
            client.h1.close()  # type: ignore[attr-defined]
    assert cl.current_limits() == cl.StreamLimits()


# ---- 2. exit codes --------------------------------------------------------------------------

def test_unexpected_exception_is_exit_70_never_1(tmp_path, capsys, monkeypatch):
    db = tmp_path / "s.sqlite"
    open_store(db).close()

    def boom(*a, **k):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(sr, "list_runs", boom)
    assert main(["runs", "list", "--store", str(db)]) == ExitCode.INTERNAL == 70
    err = capsys.readouterr().err
    line = one_error_line(err)
    assert line.startswith("internal error: RuntimeError: boom second line.")
    assert "run with --debug for the traceback" in line
    assert main(["--debug", "runs", "list", "--store", str(db)]) == ExitCode.INTERNAL
    err = capsys.readouterr().err
    assert "Traceback" in err and "internal error: RuntimeError" in err


def test_debug_keeps_the_exit_code_of_a_known_error(tmp_path, capsys):
    assert main(["--debug", "runs", "list", "--store", str(tmp_path / "nope.sqlite")]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "Traceback" in err and "no run store at this path" in err


@pytest.mark.parametrize("selector", ["99999999999999999999999", "9223372036854775808", "0"])
def test_run_id_too_large_for_sqlite_is_usage(tmp_path, capsys, selector):
    db = tmp_path / "s.sqlite"
    open_store(db).close()
    for cmd in (["runs", "show", selector], ["runs", "export", selector]):
        assert main([*cmd, "--store", str(db)]) == ExitCode.USAGE
        assert f"no run {int(selector)}" in one_error_line(capsys.readouterr().err)


def damaged_store(tmp_path: Path) -> Path:
    db = tmp_path / "s.sqlite"
    with open_store(db) as st:
        for i in range(300):  # several pages of runs
            sr.create_run(st, url=None, model=None, engine=None, caliber={"pad": "x" * 400},
                          caliber_ref=f"c{i}@1", caliber_identity=None, labels={})
        st.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    raw = bytearray(db.read_bytes())
    page = 4096
    for off in range(2 * page, len(raw), page):  # every page after the schema: garbage
        raw[off:off + page] = bytes([0xA5]) * page
    db.write_bytes(bytes(raw))
    return db


def test_malformed_store_pages_are_usage_with_the_cause(tmp_path, capsys):
    db = damaged_store(tmp_path)
    rc = main(["runs", "list", "--store", str(db)])
    line = one_error_line(capsys.readouterr().err)
    assert rc == ExitCode.USAGE
    assert "damaged" in line and "malformed" in line and str(db) in line


def test_too_many_open_files_is_a_clear_error(tmp_path):
    """Concurrency 200 under an open-file limit of 64 the process cannot raise: exit 2 and a
    line that names the limit, not a traceback or 'unreachable'."""
    cal = tmp_path / "wide.toml"
    cal.write_text('name = "wide"\nversion = 1\nconcurrency = 200\n[prompt]\ntask = "Say hi."\n'
                   '[output]\nmax_tokens = 8\n', encoding="utf-8")
    script = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))\n"
        "from decodescope.cli.main import main\n"
        "sys.exit(main(sys.argv[1:]))\n")
    with SimServer(SimConfig(time_scale=0.02)).start_in_thread() as sim:
        p = subprocess.run([sys.executable, "-c", script, "probe", sim.url, "--caliber", str(cal),
                            "--store", str(tmp_path / "s.sqlite"), *FAST, "--timeout", "20"],
                           capture_output=True, text=True, timeout=120)
    assert p.returncode == ExitCode.USAGE, p.stderr
    line = one_error_line(p.stderr)
    assert "too many open files" in line and "ulimit -n" in line


def test_open_file_limit_is_raised_for_wide_probes():
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        want = soft + 10 if hard == resource.RLIM_INFINITY else min(soft + 10, hard)
        assert cl.raise_open_file_limit(want) >= want
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert cl.too_many_files(OSError(24, "Too many open files"))
    assert not cl.too_many_files(OSError(111, "Connection refused"))


# ---- 4. caliber limits ----------------------------------------------------------------------

def test_absurd_caliber_fails_fast_before_any_material(tmp_path, capsys, monkeypatch):
    import decodescope.caliber.material as mat

    def no_material(*a, **k):
        raise AssertionError("material generated before validation")

    monkeypatch.setattr(mat, "blocks", no_material)
    cases = {"blocks = 100000000": "prompt.blocks", "blocks = -3": "prompt.blocks",
             "target_tokens = 999999999999": "prompt.target_tokens"}
    for line, needle in cases.items():
        f = tmp_path / "big.toml"
        f.write_text(f'name = "big"\nversion = 1\n[prompt]\nmaterial = "code"\n{line}\ntask = "x"\n',
                     encoding="utf-8")
        t0 = time.monotonic()
        assert main(["calibers", "show", str(f)]) == ExitCode.USAGE
        assert time.monotonic() - t0 < 10
        assert needle in one_error_line(capsys.readouterr().err)


@pytest.mark.parametrize("name", ["../evil", "a/b", "a\\b", 'q"uote', "q'uote", "x@2", "", ".hidden", "n.toml", "a b"])
def test_calibers_new_refuses_unsafe_names(tmp_path, capsys, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    assert main(["calibers", "new", name]) == ExitCode.USAGE
    assert "is not allowed" in one_error_line(capsys.readouterr().err)
    assert list(tmp_path.iterdir()) == []


# ---- 5. the store ---------------------------------------------------------------------------

def test_read_command_on_a_missing_store_says_so_and_creates_nothing(tmp_path, capsys):
    db = tmp_path / "typo" / "runs.sqlite"
    for cmd in (["runs", "list"], ["runs", "show", "last"], ["runs", "export", "1"]):
        assert main([*cmd, "--store", str(db)]) == ExitCode.USAGE
        assert "no run store at this path" in one_error_line(capsys.readouterr().err)
    assert not db.parent.exists()


def test_newer_schema_and_foreign_database_are_refused_untouched(tmp_path, capsys):
    newer = tmp_path / "newer.sqlite"
    open_store(newer).close()
    c = sqlite3.connect(newer)
    c.execute("PRAGMA user_version = 99")
    c.close()
    foreign = tmp_path / "foreign.sqlite"
    c = sqlite3.connect(foreign)
    c.execute("CREATE TABLE notes (body TEXT)")
    c.commit()
    c.close()
    for db, needle in ((newer, "newer decodescope (schema 99"), (foreign, "not a decodescope store")):
        before = db.read_bytes()
        for cmd in (["runs", "list"], ["probe", "http://127.0.0.1:9", "--caliber", CALIBER]):
            assert main([*cmd, "--store", str(db)]) == ExitCode.USAGE
            assert needle in one_error_line(capsys.readouterr().err)
        assert db.read_bytes() == before
        assert not Path(str(db) + "-wal").exists()


def test_read_commands_take_no_write_lock(tmp_path, capsys):
    """A writer holding the store's write lock does not stop `runs list` (the old open waited
    up to 30 s for BEGIN IMMEDIATE, and failed on a read-only file)."""
    db = tmp_path / "s.sqlite"
    with open_store(db) as st:
        sr.create_run(st, url=None, model=None, engine=None, caliber=None, caliber_ref="c@1",
                      caliber_identity=None, labels={"k": "v"})
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # the strongest lock a writer can hold
    try:
        holder.execute("PRAGMA journal_mode").fetchone()
        t0 = time.monotonic()
        assert main(["runs", "list", "--store", str(db), "--json"]) == 0
        assert time.monotonic() - t0 < 20
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert json.loads(capsys.readouterr().out)[0]["labels"] == {"k": "v"}


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions")
def test_read_only_store_can_be_listed(tmp_path, capsys):
    d = tmp_path / "ro"
    d.mkdir()
    db = d / "s.sqlite"
    with open_store(db) as st:
        sr.create_run(st, url=None, model=None, engine=None, caliber=None, caliber_ref="c@1",
                      caliber_identity=None, labels={})
    db.chmod(0o444)
    d.chmod(0o555)
    try:
        assert main(["runs", "list", "--store", str(db)]) == 0
        assert "c@1" in capsys.readouterr().out
        assert main(["runs", "show", "last", "--store", str(db)]) == 0
    finally:
        d.chmod(0o755)
        db.chmod(0o644)


def test_not_sqlite_and_unwritable_output_are_usage(tmp_path, capsys):
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not sqlite" * 100)
    before = junk.read_bytes()
    for cmd in (["runs", "list"], ["probe", "http://127.0.0.1:9", "--caliber", CALIBER]):
        assert main([*cmd, "--store", str(junk)]) == ExitCode.USAGE
        assert "not a decodescope store" in one_error_line(capsys.readouterr().err)
    assert junk.read_bytes() == before
    db = tmp_path / "s.sqlite"
    with open_store(db) as st:
        sr.create_run(st, url=None, model=None, engine=None, caliber=None, caliber_ref="c@1",
                      caliber_identity=None, labels={})
    out = tmp_path / "missing-dir" / "run.json"
    assert main(["runs", "export", "1", "-o", str(out), "--store", str(db)]) == ExitCode.USAGE
    assert f"cannot use {out}" in one_error_line(capsys.readouterr().err)
