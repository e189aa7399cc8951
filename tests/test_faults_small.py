"""Issue 13, item 8 (the small ones; the log-file items are in test_logs_gzip.py and
test_logs_mixed.py): `--watch-repo` runs git with
the repository's programs switched off; terminal control in server-supplied strings is never
printed; `probe notaurl` is bad input (exit 2). docs/faults.md has the table."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from decodescope.cli.main import main
from decodescope.console import RedactingStream, raw_stream, redacted_output
from decodescope.exitcodes import ExitCode
from decodescope.fingerprint import repos
from decodescope.redact import clear_registered_secrets, register_secret, strip_controls

pytestmark = pytest.mark.timeout(120)

# ---- git: a watched repository runs nothing of its own ------------------------------------------

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@example.com", "-c", "user.name=t",
                    *args], check=True, capture_output=True)


@pytest.fixture()
def hostile_repo(tmp_path: Path) -> tuple[Path, Path]:
    """A repository whose config runs a program on `git status` (fsmonitor, a clean filter, a
    process filter), on `git log` (gpg under log.showSignature) and from hooks; each program
    leaves a marker file."""
    repo, marks = tmp_path / "repo", tmp_path / "marks"
    repo.mkdir()
    marks.mkdir()
    _git(repo, "init", "-q")
    (repo / "a.txt").write_text("one\n")
    (repo / "b.dat").write_text("two\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "init")
    for key, name in [("core.fsmonitor", "fsmonitor"), ("filter.evil.clean", "clean"),
                      ("filter.evil2.process", "process"), ("gpg.program", "gpg")]:
        _git(repo, "config", key, f"touch {marks / name}; false")
    _git(repo, "config", "log.showSignature", "true")
    _git(repo, "config", "filter.evil.required", "true")
    (repo / ".git" / "info" / "attributes").write_text("a.txt filter=evil\nb.dat filter=evil2\n")
    hooks = repo / ".git" / "hooks"
    for hook in ("post-index-change", "reference-transaction", "pre-auto-gc"):
        (hooks / hook).write_text(f"#!/bin/sh\ntouch {marks / hook}\n")
        (hooks / hook).chmod(0o755)
    # same size, new content: status must rehash both files through their filters to tell
    (repo / "a.txt").write_text("ONE\n")
    (repo / "b.dat").write_text("TWO\n")
    return repo, marks


@needs_git
def test_watch_repo_runs_no_program_the_repository_names(hostile_repo, monkeypatch):
    repo, marks = hostile_repo
    # our own environment cannot redirect git either
    monkeypatch.setenv("GIT_DIR", str(repo.parent / "elsewhere"))
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", "'core.fsmonitor'='touch /nonexistent/x'")
    item = repos.git_head(repo)
    assert item.status == "collected", item.why
    assert item.value["subject"] == "init" and len(item.value["sha"]) >= 7
    assert item.value["dirty_files"] == 2
    assert sorted(p.name for p in marks.iterdir()) == []


@needs_git
def test_the_same_repository_does_run_them_under_plain_git(hostile_repo):
    """The fixture is really hostile: plain `git status` runs its programs."""
    repo, marks = hostile_repo
    subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True)
    ran = {p.name for p in marks.iterdir()}
    assert {"fsmonitor", "clean"} <= ran, ran


def test_git_argv_and_env_are_locked_down(monkeypatch, tmp_path):
    monkeypatch.setenv("GIT_EXTERNAL_DIFF", "evil")
    monkeypatch.setenv("GIT_SSH_COMMAND", "evil")
    argv = repos._git_argv(tmp_path, ("status",))
    pairs = {argv[i + 1] for i, a in enumerate(argv) if a == "-c"}
    assert {"core.fsmonitor=false", "core.hooksPath=/dev/null", "log.showSignature=false"} <= pairs
    env = repos.git_env()
    assert not [k for k in env if k.startswith("GIT_") and k not in repos.GIT_SAFE_ENV]
    assert env["GIT_OPTIONAL_LOCKS"] == "0" and env["GIT_TERMINAL_PROMPT"] == "0"


# ---- terminal control in what a server sends -------------------------------------------------

EVIL_MODEL = "m\x1b]0;owned\x07\x1b[2J\x9b31m-\x1bcmodel"
EVIL_ERROR = "\x1b[31mboom\x1b[0m\r\x1b[2Kall good\x08\x08\x1b]8;;http://evil/\x1b\\click\x1b]8;;\x1b\\"
CONTROL = [chr(c) for c in range(0x20) if chr(c) not in "\n\t"] + ["\x7f"] + \
    [chr(c) for c in range(0x80, 0xA0)]


class _Hostile(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def _json(self, status: int, obj: object) -> None:
        body = json.dumps(obj).encode()  # control characters travel as \u001b ... in JSON
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": EVIL_MODEL, "object": "model"}]})
        else:
            self._json(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.path.endswith("completions"):  # a plain-text error body, control bytes raw
            body = EVIL_ERROR.encode()
            self.send_response(400)
            self.send_header("content-type", "text/plain; charset=utf-8")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self._json(404, {"error": {"message": "not found"}})


@pytest.fixture()
def hostile_server() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(timeout=10)


def _no_control(text: str) -> None:
    bad = sorted({f"U+{ord(c):04X}" for c in text if c in CONTROL})
    assert not bad, (bad, text)


def test_server_strings_reach_the_terminal_without_control_sequences(hostile_server, tmp_path,
                                                                     capsys):
    db = tmp_path / "s.sqlite"
    rc = main(["probe", hostile_server, "--caliber", "demo-code-rewrite", "--store", str(db),
               "--no-scrape", "--no-fingerprint", "--trials", "1", "--warmup", "0"])
    out, err = capsys.readouterr()
    assert rc in (ExitCode.UNREACHABLE, ExitCode.PROTOCOL), err
    _no_control(out + err)
    assert "m-model" in err  # the model id, printed without its escapes
    line = next(ln for ln in err.splitlines() if ln.startswith("error:"))
    assert "boom" in line and "all goodclick" in line

    for args in (["runs", "show", "last"], ["runs", "list"]):
        assert main([*args, "--store", str(db)]) == 0
        out, err = capsys.readouterr()
        _no_control(out + err)
    assert main(["runs", "show", "last", "--store", str(db)]) == 0
    out = capsys.readouterr().out
    failed = next(ln for ln in out.splitlines() if ln.startswith("failed:"))
    assert "model m-model" in out and "boom" in failed and "all goodclick" in failed
    # JSON keeps the server's exact strings, escaped (\u001b), never raw
    assert main(["runs", "show", "last", "--store", str(db), "--json"]) == 0
    out = capsys.readouterr().out
    _no_control(out)
    assert json.loads(out)["model"] == EVIL_MODEL


@pytest.mark.parametrize("raw, shown", [
    ("plain text, ünïcode 中文\n\ttab", "plain text, ünïcode 中文\n\ttab"),
    ("a\x1b[1;31mred\x1b[0m", "ared"),
    ("t\x1b]0;title\x07x", "tx"),
    ("t\x1b]0;title\x1b\\x", "tx"),
    ("t\x1b]0;never ends\nnext", "t\nnext"),
    ("\x1bP1$qm\x1b\\dcs", "dcs"),
    ("c1\x9b2Jcsi\x9d0;t\x9cend", "c1csiend"),
    ("over\rwrite", "overwrite"),
    ("crlf\r\nline", "crlf\nline"),
    ("bell\x07 nul\x00 del\x7f bs\x08", "bell nul del bs"),
    ("lone esc\x1b", "lone esc"),
    ("\x1b(0charset\x1b(B", "charset"),
])
def test_strip_controls(raw, shown):
    assert strip_controls(raw) == shown
    _no_control(strip_controls(raw))


def test_the_output_pass_redacts_then_strips_and_progress_bars_get_the_raw_stream():
    register_secret("s3cr3t-canary-value")
    try:
        buf = io.StringIO()
        stream = RedactingStream(buf)  # type: ignore[arg-type]
        stream.write("key s3cr3t-canary-value \x1b[2Jmodel\x1b]0;t\x07\n")
        assert buf.getvalue() == "key <redacted> model\n"
        # a secret split by an escape sequence is caught: the escapes go first
        stream.write("s3cr3t-\x1b[0mcanary-\rvalue\n")
        assert buf.getvalue().endswith("\n<redacted>\n")
        with redacted_output():
            assert isinstance(sys.stderr, RedactingStream)
            assert raw_stream(err=True) is sys.stderr.raw
            assert raw_stream(err=False) is sys.stdout.raw  # type: ignore[attr-defined]
        assert raw_stream(err=True) is sys.stderr
    finally:
        clear_registered_secrets()


# ---- probe notaurl ---------------------------------------------------------------------------

@pytest.mark.parametrize("url, needle", [
    ("notaurl", "has no http:// or https://"),
    ("localhost:8000", "has no http:// or https://"),
    ("ftp://127.0.0.1/x", "has scheme 'ftp'"),
    ("http://:8000", "has no host"),
    ("http://127.0.0.1:99999", "not a valid URL"),
    ("http://127.0.0.1:0", "port 0"),
])
def test_probe_of_something_that_is_not_a_url_is_usage(tmp_path, capsys, url, needle):
    db = tmp_path / "s.sqlite"
    rc = main(["probe", url, "--caliber", "demo-code-rewrite", "--store", str(db)])
    err = capsys.readouterr().err
    assert rc == ExitCode.USAGE, err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and needle in lines[0] and "http://127.0.0.1:8000" in lines[0]
    assert not db.exists()  # refused before the store is opened


def test_a_password_in_a_bad_url_is_not_printed(tmp_path, capsys):
    rc = main(["probe", "http://user:hunter2-canary@", "--caliber", "demo-code-rewrite",
               "--store", str(tmp_path / "s.sqlite")])
    err = capsys.readouterr().err
    assert rc == ExitCode.USAGE
    assert "hunter2-canary" not in err and "has no host" in err


# ---- check and sweep validate their URL like probe ----------------------------------------------

@pytest.mark.parametrize("args", [
    ["check", "nightly", "{url}"],
    ["sweep", "{url}", "--calibers", "demo-code-rewrite,demo-varied-prose"],
])
@pytest.mark.parametrize("url, needle", [
    ("notaurl", "has no http:// or https://"),
    ("ftp://127.0.0.1/x", "has scheme 'ftp'"),
    ("http://127.0.0.1:99999", "not a valid URL"),
])
def test_check_and_sweep_refuse_what_is_not_a_url(tmp_path, capsys, args, url, needle):
    db = tmp_path / "s.sqlite"
    rc = main([a.format(url=url) for a in args] + ["--store", str(db)])
    err = capsys.readouterr().err
    assert rc == ExitCode.USAGE, err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and needle in lines[0] and "http://127.0.0.1:8000" in lines[0]
    assert not db.exists()  # refused before the store is opened or a probe sent


# ---- bidirectional overrides ("Trojan Source") -------------------------------------------------

BIDI = [chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))]


@pytest.mark.parametrize("raw, shown", [
    ("model\u202egnp.exe", "modelgnp.exe"),
    ("\u2066isolate\u2069 \u2067rtl\u2069 \u2068first\u2069", "isolate rtl first"),
    ("\u202aemb\u202c\u202bedded\u202c\u202doverride", "embeddedoverride"),
    ("עברית and العربية stay", "עברית and العربية stay"),  # RTL text itself is kept
    ("\u200f\u200e marks stay", "\u200f\u200e marks stay"),  # LRM / RLM do not override
    ("\x1b[31m\u202ered\u202c\x1b[0m", "red"),
])
def test_strip_controls_removes_bidi_overrides(raw, shown):
    assert strip_controls(raw) == shown
    assert not [c for c in strip_controls(raw) if c in BIDI]


def test_a_bidi_override_in_a_model_id_is_not_printed():
    buf = io.StringIO()
    stream = RedactingStream(buf)  # type: ignore[arg-type]
    stream.write("model: evil\u202e4pm.exe\u2066x\u2069\n")
    assert buf.getvalue() == "model: evil4pm.exex\n"
