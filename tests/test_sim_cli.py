"""`decodescope sim`: help, foreground run, subprocess use, bad options."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

from decodescope.cli.main import main


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--help"]) == 0
    out = capsys.readouterr().out
    assert "SIMULATED" in out and "--time-scale" in out and "--fault" in out


def test_foreground_run_prints_url(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--port", "0", "--duration", "0.2", "--fault", "no_usage"]) == 0
    out = capsys.readouterr().out
    assert "SIMULATED" in out and "http://127.0.0.1:" in out and "no_usage=True" in out


def test_json_banner(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--port", "0", "--duration", "0.1", "--json", "--k", "3"]) == 0
    info = json.loads(capsys.readouterr().out.splitlines()[0])
    assert info["simulated"] is True and info["k"] == 3 and info["url"].startswith("http://")


def test_bad_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--port", "0", "--fault", "explode"]) == 2
    assert "unknown simulator fault" in capsys.readouterr().err
    assert main(["sim", "--port", "0", "--time-scale", "0"]) == 2
    assert "time_scale" in capsys.readouterr().err


def test_subprocess_serves_requests() -> None:
    cmd = [sys.executable, "-m", "decodescope.sim", "--port", "0", "--json",
           "--time-scale", "0.05", "--seed", "5"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = json.loads(proc.stdout.readline())["url"]
        with httpx.Client(trust_env=False, timeout=10) as c:
            r = c.post(url + "/v1/chat/completions", json={
                "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8})
            assert r.json()["usage"]["completion_tokens"] == 8
            truth = c.get(f"{url}/sim/truth/{r.json()['id']}").json()
            assert truth["completion_tokens"] == 8 and len(truth["chunks"]) >= 2
            assert c.get(url + "/sim/truth").json()["requests"][0]["response_id"] == r.json()["id"]
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err


def test_module_entry_point(capsys: pytest.CaptureFixture[str]) -> None:
    from decodescope.sim.__main__ import main as sim_main

    assert sim_main(["--port", "0", "--fault", "explode"]) == 2
    assert "unknown simulator fault" in capsys.readouterr().err
    assert sim_main(["--help"]) == 0
    assert sim_main(["--port", "0", "--duration", "0.1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["simulated"] is True
