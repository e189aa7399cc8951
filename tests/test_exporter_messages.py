"""Messages that say what happened (issue 23): a redirect on the completions endpoint is said
as a redirect, with its Location (redacted) and the final URL as the remedy; a store whose
filesystem fails writes is said as a write failure, never as a damaged file."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from decodescope.cli.main import main
from decodescope.errors import store_error

pytestmark = pytest.mark.timeout(300)

CANARY_PW = "CanaryPw7x"
CANARY_KEY = "CanaryTok9q"


@contextmanager
def redirecting_server(status: int) -> Iterator[str]:
    """/v1/models answers; every POST is redirected (to a URL with credentials in it)."""

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            if self.path.startswith("/v1/models"):
                body = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())
            else:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

        def do_POST(self) -> None:  # noqa: N802
            n = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(n)
            host, port = self.server.server_address[:2]
            self.send_response(status)
            self.send_header("Location", f"https://ops:{CANARY_PW}@gateway.example:8443"
                                         f"{self.path}?api_key={CANARY_KEY}")
            self.send_header("Content-Length", "0")
            self.end_headers()

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize("status", [307, 301, 302, 308])
def test_a_redirect_on_completions_is_said_as_a_redirect(tmp_path, capsys, status):
    with redirecting_server(status) as url:
        code = main(["probe", url, "--caliber", "demo-code-rewrite", "--trials", "1",
                     "--model", "m", "--no-fingerprint", "--no-scrape",
                     "--store", str(tmp_path / "s.sqlite")])
    out = capsys.readouterr()
    text = out.out + out.err
    assert code != 0
    assert f"redirected the request (HTTP {status}) to https://" in text, text
    assert "gateway.example:8443" in text and "Use the final URL" in text
    assert "sampling" not in text  # not the remedy of a rejected request
    assert CANARY_PW not in text and CANARY_KEY not in text


WRITE_FAIL = textwrap.dedent("""
    import resource, signal, sqlite3, sys
    from decodescope.errors import StoreError, store_error
    from decodescope.store.db import Store
    from decodescope.store.connect import open_store
    path, size = sys.argv[1], int(sys.argv[2])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() past the limit fails (EFBIG)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    # what sqlite says when the filesystem fails a write...
    try:
        with open_store(path) as s, s.tx() as c:
            c.execute("INSERT INTO baselines VALUES ('x', 0, 'r', ?)", ("y" * 2_000_000,))
        print("WROTE")
    except StoreError as e:
        print("WRITE:", e.one_line())
    # ...and a 'malformed' read that follows a failed write: the filesystem is checked
    print("MALFORMED:", store_error(sqlite3.DatabaseError("database disk image is malformed"),
                                    path).one_line())
""")


def test_a_store_whose_filesystem_fails_writes_is_said_as_a_write_failure(tmp_path, capsys):
    store = tmp_path / "runs.sqlite"
    assert main(["baseline", "set", "b", "--caliber", "demo-code-rewrite", "--band", "1-2",
                 "--store", str(store)]) == 0
    capsys.readouterr()
    sizes = sum(p.stat().st_size for p in tmp_path.iterdir())
    r = subprocess.run([sys.executable, "-c", WRITE_FAIL, str(store), str(sizes + 4096)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = dict(ln.split(": ", 1) for ln in r.stdout.splitlines() if ": " in ln)
    for what in ("WRITE", "MALFORMED"):
        msg = lines[what]
        assert "could not be written" in msg, msg
        assert "damaged" not in msg and "malformed" not in msg.split("(")[0], msg
    # nothing already stored was lost
    with sqlite3.connect(store) as db:
        assert db.execute("SELECT name FROM baselines").fetchall() == [("b",)]


def test_a_damaged_file_on_a_healthy_filesystem_is_still_said_damaged(tmp_path):
    store = tmp_path / "runs.sqlite"
    store.write_bytes(b"")
    msg = store_error(sqlite3.DatabaseError("database disk image is malformed"),
                      str(store)).one_line()
    assert "damaged" in msg


@pytest.mark.parametrize("text, says", [
    ("disk I/O error", "could not be written"),
    ("database or disk is full", "disk is full"),
])
def test_io_and_full_errors_are_named(tmp_path, text, says):
    msg = store_error(sqlite3.OperationalError(text), str(tmp_path / "s.sqlite")).one_line()
    assert says in msg and "damaged" not in msg, msg
