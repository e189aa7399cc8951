"""Canary tests: a URL password and an API key never reach the store (its WAL included),
stdout, stderr, exports, reports or the fingerprint, whatever the server echoes."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from test_faults_server import FaultServer
from test_postgres import PG_PASSWORD, PG_USER, pg_cluster

from decodescope.cli.main import main
from decodescope.exitcodes import ExitCode
from decodescope.redact import REDACTED, clear_registered_secrets
from decodescope.sim import SimConfig, SimServer
from decodescope.store.connect import open_store

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
        open_store(db).close()
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


# ---- an engine whose command line and environment hold secrets (issue 23 part 1) ----------------

# The engine's secrets in every form an engine takes them: several values of one flag (vLLM's
# nargs="+" --api-key), --api-keys, a key beginning with "-", --flag=value, SGLang's
# --admin-api-key, llama.cpp's -hft; and in its environment: arguments inside a variable, and
# secret-named variables. None is in a known key format: only the command-line rules catch them.
ENGINE_ARGV_SECRETS = ["Cn4ryEngK1", "Cn4ryEngK2", "Cn4ryEngK3", "-Cn4ryEngK4", "Cn4ryEngK5",
                       "Cn4ryEngK6", "Cn4ryEngK7"]
ENGINE_ENV_SECRETS = ["Cn4ryEnvK1", "Cn4ryEnvK2", "Cn4ryEnvK3", "Cn4ryEnvK4", "Cn4ryEnvK5",
                      "Cn4ry Env/K6"]
ENGINE_LOG_SECRETS = ["Cn4ryLogK1", "Cn4ryLogK2"]
ALL_ENGINE_SECRETS = [*ENGINE_ARGV_SECRETS, *ENGINE_ENV_SECRETS, *ENGINE_LOG_SECRETS,
                      "Cn4ryEng", "Cn4ryEnv", "Cn4ryLog"]  # no piece of any of them either
_SIM_CODE = ("import sys; from decodescope.sim.__main__ import main; "
             "sys.exit(main(['--port', '0', '--json', '--time-scale', '0.02', '--seed', '5']))")


class FakeEngine:
    """The simulator in a child process whose argv and environment look like a vLLM / SGLang /
    llama.cpp launch holding keys: what the fingerprint reads is this process."""

    def __init__(self) -> None:
        argv = [sys.executable, "-c", _SIM_CODE, "--api-key", "Cn4ryEngK1", "Cn4ryEngK2",
                "--api-keys", "Cn4ryEngK3", "--api-key", "-Cn4ryEngK4", "--hf-token=Cn4ryEngK5",
                "--admin-api-key", "Cn4ryEngK6", "-hft", "Cn4ryEngK7", "--max-num-seqs", "4"]
        env = {**os.environ, "VLLM_EXTRA_ARGS": "--api-key Cn4ryEnvK1 Cn4ryEnvK2 --port 1",
               "SGLANG_EXTRA_ARGS": "--api-key=Cn4ryEnvK3", "HF_TOKEN": "Cn4ryEnvK4",
               "VLLM_API_KEY": "Cn4ryEnvK5", "HF_ENDPOINT": "http://u:Cn4ry Env/K6@h:1/m"}
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.url = json.loads(self.proc.stdout.readline())["url"]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.communicate(timeout=30)


def engine_log(tmp_path: Path) -> Path:
    """A vLLM start as its log prints it: the non-default args hold the keys."""
    log = tmp_path / "vllm.log"
    log.write_text(
        "INFO 12-02 06:00:00 [utils.py:2] non-default args: {'model': 'm', 'api_key': "
        "['Cn4ryLogK1', 'Cn4ryLogK2'], 'max_num_seqs': 4}\n"
        "INFO 12-02 06:00:00 [api_server.py:1] vLLM API server version 0.11.0\n"
        "INFO 12-02 06:00:05 [cuda.py:3] Using FlashInfer backend.\n", encoding="utf-8")
    return log


def run_every_output(tmp_path: Path, capsys: pytest.CaptureFixture[str], url: str,
                     store: str) -> dict[str, str]:
    """Probe twice (fingerprint on), then every way the runs and the fingerprint leave."""
    log = engine_log(tmp_path)
    texts: dict[str, str] = {}
    commands = {
        "probe": ["probe", url, "--caliber", "demo-code-rewrite", "--trials", "1",
                  "--no-scrape", "--log", str(log), "--store", store],
        "probe --json": ["probe", url, "--caliber", "demo-code-rewrite", "--trials", "1",
                         "--no-scrape", "--store", store, "--json"],
        "fingerprint": ["fingerprint", url, "--log", str(log)],
        "fingerprint --json": ["fingerprint", url, "--log", str(log), "--json"],
        "runs list": ["runs", "list", "--store", store],
        "runs show": ["runs", "show", "1", "--store", store],
        "runs show --json": ["runs", "show", "1", "--json", "--store", store],
        "runs export": ["runs", "export", "1", "2", "--store", store],
        "report md": ["report", "1", "2", "--format", "md", "--store", store],
        "report json": ["report", "1", "2", "--format", "json", "--store", store],
    }
    for name, argv in commands.items():
        rc = main(argv)
        out = capsys.readouterr()
        assert rc in (0, 1, 3), (name, out.err)
        texts[f"{name} stdout"], texts[f"{name} stderr"] = out.out, out.err
    for fmt in ("html", "md", "json"):
        path = tmp_path / f"report.{fmt}"
        assert main(["report", "1", "2", "-o", str(path), "--store", store]) in (0, 1, 3)
        texts[f"report -o {fmt}"] = path.read_text(encoding="utf-8")
    export = tmp_path / "export.json"
    assert main(["runs", "export", "1", "-o", str(export), "--store", store]) == 0
    texts["export file"] = export.read_text(encoding="utf-8")
    capsys.readouterr()
    return texts


def assert_engine_read_and_redacted(texts: dict[str, str]) -> None:
    """The fingerprint did read the engine (so the canary check is not vacuous), redacted."""
    fp = json.loads(texts["fingerprint --json stdout"])
    proc = fp["sections"]["process"]
    cmdline = proc["cmdline"]["value"]
    assert cmdline[cmdline.index("--api-key") + 1:][:2] == [REDACTED, REDACTED]
    assert cmdline[-2:] == ["--max-num-seqs", "4"]  # what follows the secrets is kept
    env = proc["env"]["value"]
    assert env["VLLM_EXTRA_ARGS"] == f"--api-key {REDACTED} {REDACTED} --port 1"
    assert env["HF_TOKEN"] == REDACTED and env["HF_ENDPOINT"] == f"http://{REDACTED}@h:1/m"
    assert "--max-num-seqs" in texts["export file"]  # the stored fingerprint holds the cmdline
    start = fp["sections"]["backend"]["last_start"]["value"]["line"]
    assert f"'api_key': ['{REDACTED}'], 'max_num_seqs': 4" in start  # the log's launch line


def test_engine_secrets_never_reach_any_output_or_the_sqlite_store(tmp_path, capsys):
    db = tmp_path / "s.sqlite"
    keeper = WalKeeper(db)
    engine = FakeEngine()
    try:
        texts = run_every_output(tmp_path, capsys, engine.url, str(db))
        files = store_files(db)
        conn = sqlite3.connect(db)
        try:
            texts["sqlite dump"] = "\n".join(conn.iterdump())
        finally:
            conn.close()
    finally:
        engine.stop()
        keeper.close()
    assert_engine_read_and_redacted(texts)
    assert "Cn4ry" not in texts["sqlite dump"]
    assert_absent(ALL_ENGINE_SECRETS, texts, files)
    # ...and redaction touched nothing else the run stored: every <redacted> of the dump is a
    # value of a secret flag, a secret-named variable or a URL password
    rest = re.sub(r'"(?:--api-keys?|--admin-api-key|-hft)"(?:,"<redacted>")+', "",
                  texts["sqlite dump"])
    rest = re.sub(r'--hf-token=<redacted>|"[A-Z_]+":"<redacted>"|http://<redacted>@'
                  r"|--api-key[= ]<redacted>(?: <redacted>)*|api_key'+: \['+<redacted>'+\]", "",
                  rest)
    assert REDACTED not in rest


def test_engine_and_url_secrets_never_reach_the_postgres_store(tmp_path, capsys):
    """The same on a PostgreSQL store reached with a password holding reserved characters; the
    pg_dump of the database holds no canary, and no form of the password."""
    c = pg_cluster()
    password = "Cn4ry/Pg#@ x%?"
    role = "ds_" + uuid.uuid4().hex[:8]
    db = c.new_db()
    c.psql(f"CREATE ROLE {role} LOGIN SUPERUSER PASSWORD '{password}'")
    url = f"postgresql://{role}:{quote(password, safe='')}@127.0.0.1:{c.port}/{db}"
    engine = FakeEngine()
    try:
        texts = run_every_output(tmp_path, capsys, engine.url, url)
    finally:
        engine.stop()
    assert_engine_read_and_redacted(texts)
    dump = subprocess.run(
        [f"{c.bindir}/pg_dump", "-h", "127.0.0.1", "-p", str(c.port), "-U", PG_USER, db],
        env={**os.environ, "PGPASSWORD": PG_PASSWORD},
        capture_output=True, text=True, timeout=120, check=True).stdout
    assert "CREATE TABLE" in dump and "--max-num-seqs" in dump  # the stored fingerprint
    texts["pg_dump"] = dump
    assert "Cn4ry" not in dump
    assert_absent([*ALL_ENGINE_SECRETS, password, quote(password, safe=""), "Pg#@ x"], texts,
                  [])
