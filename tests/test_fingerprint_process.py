"""A real child process listening on a loopback port: found by its port, its cmdline and env
read, secrets gone from every output form, restarts detected by start time."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from decodescope.fingerprint import collect_fingerprint, diff_fingerprints
from decodescope.fingerprint.render import render_fingerprint
from decodescope.fingerprint.stack import Fingerprint
from decodescope.redact import clear_registered_secrets, register_secret

CANARY_ARG = "sk-CanaryArgv0123456789abcdef"
CANARY_ENV = "CanaryEnvSecret42"
CANARY_PROXY = "CanaryProxyPass"
CANARY_URL = "CanaryUrlPass"
CANARY_HEADER = "CanaryHeaderBearer"
CANARY_PLAIN = "plaincanaryword"  # no known format: only register_secret catches it

SERVER = textwrap.dedent("""
    import json, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == "/version":
                body = {"version": "0.0.0-test"}
            elif self.path == "/v1/models":
                body = {"object": "list", "data": [{"id": "tiny", "object": "model",
                        "owned_by": "vllm", "created": 1, "max_model_len": 4096}]}
            elif self.path == "/props":
                body = {"echo_headers": dict(self.headers), "argv": sys.argv}
            else:
                self.send_response(404); self.end_headers(); return
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a):
            pass

    port = int(sys.argv[sys.argv.index("--port") + 1])
    srv = HTTPServer(("127.0.0.1", port), H)
    print(srv.server_address[1], flush=True)
    srv.serve_forever()
""")


@pytest.fixture(autouse=True)
def _clean_registry() -> Iterator[None]:
    clear_registered_secrets()
    yield
    clear_registered_secrets()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Child:
    def __init__(self, script: Path, port: int, threads: str) -> None:
        env = {"PATH": os.environ.get("PATH", ""), "HF_TOKEN": CANARY_ENV,
               "VLLM_API_KEY": CANARY_ENV, "http_proxy": f"http://me:{CANARY_PROXY}@proxy:3128",
               "VLLM_TEST_FLAG": "visible", "UNRELATED_VAR": "not-selected"}
        self.proc = subprocess.Popen(
            [sys.executable, str(script), "--port", str(port), "--api-key", CANARY_ARG,
             "--weird", CANARY_PLAIN, "-t", threads], env=env, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline().strip())

    def stop(self) -> None:
        self.proc.terminate()  # by PID: this process only
        self.proc.wait(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def script(tmp_path: Path) -> Path:
    p = tmp_path / "fake_engine.py"
    p.write_text(SERVER)
    return p


def test_canaries_absent_and_cmdline_present(script: Path) -> None:
    child = Child(script, free_port(), "2")
    register_secret(CANARY_PLAIN)
    try:
        url = f"http://u:{CANARY_URL}@127.0.0.1:{child.port}"
        with httpx.Client(trust_env=False, timeout=5,
                          headers={"Authorization": f"Bearer {CANARY_HEADER}"}) as client:
            fp = collect_fingerprint(url, client=client, sample_gpu=False)
    finally:
        child.stop()
    dumped = json.dumps(fp.to_dict())
    text = render_fingerprint(fp)
    roundtrip = json.dumps(Fingerprint.from_dict(json.loads(dumped)).to_dict())
    for canary in (CANARY_ARG, CANARY_ENV, CANARY_PROXY, CANARY_URL, CANARY_HEADER, CANARY_PLAIN):
        assert canary not in dumped, canary
        assert canary not in text, canary
        assert canary not in roundtrip, canary
    # The rest of the cmdline is there, argument by argument.
    cmdline = fp.value("process", "cmdline")
    assert cmdline[0] == sys.executable
    assert cmdline[1] == str(script)
    assert cmdline[2:4] == ["--port", str(child.port)]
    assert cmdline[cmdline.index("-t") + 1] == "2"
    assert cmdline[cmdline.index("--api-key") + 1] == "<redacted>"
    assert fp.value("process", "pid") == child.proc.pid
    env = fp.value("process", "env")
    assert env["VLLM_TEST_FLAG"] == "visible"
    assert env["HF_TOKEN"] == "<redacted>"
    assert "UNRELATED_VAR" not in env
    assert env["http_proxy"] == "http://<redacted>@proxy:3128"
    # Endpoint items came through and the echoed auth header was redacted.
    assert fp.value("endpoint", "engine") == "vllm"
    assert fp.value("endpoint", "engine_version") == "0.0.0-test"
    assert fp.value("endpoint", "models") == ["tiny"]
    assert "created" not in fp.value("endpoint", "model_card")
    assert fp.url == f"http://<redacted>@127.0.0.1:{child.port}"
    assert fp.value("packages", "interpreter")["path"] == sys.executable


def test_restart_on_same_port_is_detected(script: Path) -> None:
    port = free_port()
    first = Child(script, port, "2")
    try:
        fp1 = collect_fingerprint(f"http://127.0.0.1:{port}", sample_gpu=False)
    finally:
        first.stop()
    second = Child(script, port, "1")
    try:
        fp2 = collect_fingerprint(f"http://127.0.0.1:{port}", sample_gpu=False)
    finally:
        second.stop()
    rows = {r.check: r for r in diff_fingerprints(fp1, fp2)}
    restart = rows["did the server restart?"]
    assert restart.status == "changed"
    assert restart.result.startswith("yes")
    assert f"pid {first.proc.pid} → {second.proc.pid}" in restart.result
    cmd = rows["same launch cmdline?"]
    assert cmd.status == "changed"
    assert "-t 2 → -t 1" in cmd.result
    assert rows["engine version"].status == "same"
    same = {r.check: r for r in diff_fingerprints(fp2, fp2)}
    assert same["did the server restart?"].status == "same"
    assert same["same launch cmdline?"].status == "same"


def test_unreachable_endpoint_is_unavailable_not_an_error() -> None:
    port = free_port()
    fp = collect_fingerprint(f"http://127.0.0.1:{port}", sample_gpu=False, timeout_s=1)
    it = fp.item("endpoint", "engine")
    assert it.status == "unavailable" and "unreachable" in (it.why or "")
    assert fp.item("process", "pid").why == f"no local process listens on port {port}"
    assert fp.value("host", "hostname")


def test_remote_host_process_is_not_inspected() -> None:
    transport = httpx.MockTransport(lambda req: httpx.Response(404))
    with httpx.Client(transport=transport) as client:
        fp = collect_fingerprint("http://192.0.2.10:8000", client=client, sample_gpu=False)
    assert "not this machine" in (fp.item("process", "cmdline").why or "")
