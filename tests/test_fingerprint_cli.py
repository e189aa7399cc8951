"""`decodescope fingerprint`: text and --json, exit 0 even when the endpoint is down."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from decodescope.cli.main import main


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_json_output(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text("INFO 09-15 23:27:01 [api_server.py:1] vLLM API server version 0.11.2\n"
                   "INFO 09-15 23:27:40 [nvfp4.py:203] Using 'MARLIN' NvFp4 MoE backend out of "
                   "potential backends: ['MARLIN'].\n")
    port = free_port()
    rc = main(["fingerprint", f"http://127.0.0.1:{port}", "--json", "--log", str(log),
               "--watch-repo", str(tmp_path), "--timeout", "1"])
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema_version"] == 1
    sections = data["sections"]
    assert sections["backend"]["lines"]["value"] == [
        "Using 'MARLIN' NvFp4 MoE backend out of potential backends: ['MARLIN']."]
    assert sections["endpoint"]["engine"]["status"] == "unavailable"
    assert sections["host"]["hostname"]["status"] == "collected"
    assert any(k.startswith("git:") for k in sections["repos"])


def test_text_output(capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    assert main(["fingerprint", f"http://127.0.0.1:{port}", "--timeout", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"fingerprint of http://127.0.0.1:{port}")
    assert "endpoint: unavailable — endpoint unreachable" in out
    assert f"process: unavailable — no local process listens on port {port}" in out
    assert "host (8/8 collected)" in out
    assert "repos: unavailable — no repo watched (--watch-repo PATH)" in out


def test_help() -> None:
    assert main(["fingerprint", "--help"]) == 0
