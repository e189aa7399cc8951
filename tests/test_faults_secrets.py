"""Canary tests: a URL password and an API key never reach the store (its WAL included),
stdout, stderr, exports, reports or the fingerprint, whatever the server echoes."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_faults_server import FaultServer

from decodescope.cli.main import main
from decodescope.exitcodes import ExitCode
from decodescope.redact import clear_registered_secrets
from decodescope.sim import SimConfig, SimServer
from decodescope.store.db import Store

pytestmark = pytest.mark.timeout(300)

# No known key format and short of the generic-run length: only the real mechanisms catch
# them (URL userinfo, registered literals), not a lucky pattern.
PASSWORD = "pwCanary7Zq"
ENCODED_PASSWORD = "pw%40Canary9Xk"  # percent-encoded "@": the decoded form must not leak either
API_KEY = "keyCanary-4Rt8"


@pytest.fixture(autouse=True)
def _forget_secrets() -> Iterator[None]:
    clear_registered_secrets()
    yield
    clear_registered_secrets()


class WalKeeper:
    """Holds a second connection on the store, so its WAL file survives the command (SQLite
    deletes it when the last connection closes): the canary check reads the WAL too."""

    def __init__(self, db: Path) -> None:
        Store.open(db).close()
        self.conn = sqlite3.connect(db)
        self.conn.execute("SELECT count(*) FROM runs").fetchone()

    def close(self) -> None:
        self.conn.close()


def assert_absent(secrets: list[str], texts: dict[str, str], files: list[Path]) -> None:
    for secret in secrets:
        for name, text in texts.items():
            assert secret not in text, f"{secret!r} leaked into {name}"
        for f in files:
            if f.exists():
                assert secret.encode() not in f.read_bytes(), f"{secret!r} leaked into {f.name}"


def store_files(db: Path) -> list[Path]:
    files = [db, Path(f"{db}-wal"), Path(f"{db}-shm")]
    assert files[1].exists() and files[1].stat().st_size > 0  # the WAL was really checked
    return files


def test_url_password_never_written_or_printed(tmp_path, capsys):
    """A full probe with scraping and fingerprint on, through a URL with userinfo; then every
    way the run leaves the store."""
    db = tmp_path / "s.sqlite"
    keeper = WalKeeper(db)
    texts: dict[str, str] = {}
    try:
        with SimServer(SimConfig(time_scale=0.02)).start_in_thread() as sim:
            port = sim.url.rsplit(":", 1)[1]
            url = f"http://probe:{PASSWORD}@127.0.0.1:{port}"
            rc = main(["probe", url, "--caliber", "demo-code-rewrite", "--trials", "1",
                       "--scrape-interval", "0.1", "--store", str(db)])
            out = capsys.readouterr()
            assert rc == 0, out.err
            texts["probe stdout"], texts["probe stderr"] = out.out, out.err
            assert main(["probe", url, "--caliber", "demo-code-rewrite", "--trials", "1",
                         "--no-scrape", "--store", str(db), "--json"]) == 0
            out = capsys.readouterr()
            texts["probe --json stdout"], texts["probe --json stderr"] = out.out, out.err
            enc_url = f"http://probe:{ENCODED_PASSWORD}@127.0.0.1:1"
            assert main(["probe", enc_url, "--caliber", "demo-code-rewrite", "--store", str(db),
                         "--no-scrape", "--no-fingerprint"]) == ExitCode.UNREACHABLE
            texts["unreachable stderr"] = capsys.readouterr().err
            assert main(["fingerprint", url]) == 0
            texts["fingerprint"] = capsys.readouterr().out
        files = store_files(db)
        for cmd in (["runs", "list"], ["runs", "show", "1"], ["runs", "show", "1", "--json"],
                    ["runs", "export", "1"]):
            assert main([*cmd, "--store", str(db)]) == 0
            texts[" ".join(cmd)] = capsys.readouterr().out
        export, report = tmp_path / "run.json", tmp_path / "report.html"
        assert main(["runs", "export", "1", "-o", str(export), "--store", str(db)]) == 0
        assert main(["report", "1", "2", "-o", str(report), "--store", str(db)]) in (0, 1, 3)
        capsys.readouterr()
        assert report.exists()
        # The run did store the metrics-series URL and the fingerprint, redacted.
        assert '"url":"http://<redacted>@127.0.0.1' in db.read_bytes().decode("utf-8", "replace") + \
            files[1].read_bytes().decode("utf-8", "replace")
        assert "http://<redacted>@127.0.0.1" in texts["runs export 1"]
        assert_absent([PASSWORD, "pw@Canary9Xk", ENCODED_PASSWORD], texts,
                      [*files, export, report])
    finally:
        keeper.close()


@pytest.mark.parametrize("mode, code", [
    ("echo_auth", ExitCode.PROTOCOL),  # HTTP 400 whose body quotes the Authorization header
    ("echo_auth_midstream", ExitCode.PROTOCOL),  # an SSE error event quoting the bare key
])
def test_api_key_echoed_by_the_server_is_redacted(tmp_path, capsys, monkeypatch, mode, code):
    monkeypatch.setenv("FAULT_KEY", API_KEY)
    db = tmp_path / "s.sqlite"
    keeper = WalKeeper(db)
    texts: dict[str, str] = {}
    try:
        with FaultServer(mode) as srv:
            rc = main(["probe", srv.url, "--caliber", "demo-code-rewrite", "--trials", "1",
                       "--api-key-env", "FAULT_KEY", "--no-scrape", "--store", str(db)])
            assert any(API_KEY in h for h in srv.requests)  # the key was sent...
        out = capsys.readouterr()
        assert rc == code, out.err
        assert "<redacted>" in out.err  # ...and the echo was printed, redacted
        texts["stdout"], texts["stderr"] = out.out, out.err
        files = store_files(db)
        assert main(["runs", "export", "last", "--store", str(db)]) == 0
        texts["export"] = capsys.readouterr().out
        assert_absent([API_KEY], texts, files)
    finally:
        keeper.close()
