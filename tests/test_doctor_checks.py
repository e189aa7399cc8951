"""Doctor checks beyond proxies: endpoint, served model, /metrics, engine log, timers, exit
codes, rendering and the CLI."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest

from decodescope.cli.main import main
from decodescope.doctor.checks import check_endpoint, check_log, check_timer, min_clock_step
from decodescope.doctor.diagnose import DoctorReport, render_doctor, run_doctor
from decodescope.exitcodes import DOCTOR_ERRORS, DOCTOR_OK, DOCTOR_WARNINGS
from decodescope.records.findings import Finding

VLLM_METRICS = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="qwen-flash-nvfp4"} 1234.0
vllm:generation_tokens_total{engine="0",model_name="qwen-flash-nvfp4"} 5678.0
""" + "".join(
    f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",position="{i}"}} {900 - 100 * i}.0\n'
    for i in range(6))


def engine(routes: dict[str, tuple[int, Any]]) -> httpx.Client:
    def handler(req: httpx.Request) -> httpx.Response:
        status, body = routes.get(req.url.path, (404, "not found"))
        if isinstance(body, str):
            return httpx.Response(status, text=body)
        return httpx.Response(status, json=body)
    return httpx.Client(transport=httpx.MockTransport(handler))


VLLM = {"/health": (200, ""), "/version": (200, {"version": "0.11.2.dev499"}),
        "/v1/models": (200, {"data": [{"id": "qwen-flash-nvfp4", "owned_by": "vllm"}]}),
        "/metrics": (200, VLLM_METRICS)}


def codes(findings: list[Finding]) -> dict[str, Finding]:
    return {f.code: f for f in findings}


def test_healthy_vllm_with_spec() -> None:
    with engine(VLLM) as c:
        found = codes(check_endpoint(c, "http://127.0.0.1:8000", "qwen-flash-nvfp4"))
    assert found["endpoint.healthy"].severity == "info"
    assert found["model.served"].cause == "serves qwen-flash-nvfp4"
    assert found["engine.detected"].cause == "engine: vllm 0.11.2.dev499"
    assert "speculative decoding on (k=6, 2 spec metrics" in found["metrics.spec"].cause
    assert all(f.severity == "info" for f in found.values())


def test_stale_model_slug_is_an_error() -> None:
    with engine(VLLM) as c:
        found = codes(check_endpoint(c, "http://127.0.0.1:8000", "custom:127-0-0-1-8000"))
    err = found["model.not_served"]
    assert err.severity == "error"
    assert err.remedy == "use --model qwen-flash-nvfp4"


def test_llamacpp_without_metrics_and_loading() -> None:
    routes = {"/health": (503, {"error": "loading"}),
              "/v1/models": (200, {"data": [{"id": "g", "owned_by": "llamacpp"}]}),
              "/props": (200, {"build_info": "b6000-0c1e570"})}
    with engine(routes) as c:
        found = codes(check_endpoint(c, "http://127.0.0.1:8080", None))
    assert found["endpoint.loading"].severity == "warning"
    assert found["metrics.unavailable"].remedy == "start llama-server with --metrics"
    routes["/metrics"] = (200, "llamacpp:n_decode_total 5\n")
    with engine(routes) as c:
        found = codes(check_endpoint(c, "http://127.0.0.1:8080", None))
    assert "no speculative-decoding counters" in found["metrics.no_spec"].cause


def test_unreachable_and_auth() -> None:
    def refuse(req: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=req)
    with httpx.Client(transport=httpx.MockTransport(refuse)) as c:
        found = check_endpoint(c, "http://u:Secr3tCanary@127.0.0.1:1", None)
    assert [f.code for f in found] == ["endpoint.unreachable"]
    assert found[0].severity == "error" and "Secr3tCanary" not in found[0].cause
    with engine({"/health": (200, ""), "/v1/models": (401, {"error": "no key"})}) as c:
        assert codes(check_endpoint(c, "http://h:1", None))["endpoint.auth"].severity == "warning"


def test_log_checks(tmp_path: Path) -> None:
    assert codes(check_log(str(tmp_path / "nope.log")))["log.missing"].severity == "error"
    vllm = tmp_path / "vllm.log"
    vllm.write_text("INFO 09-15 23:30:00 [loggers.py:271] Engine 000: Avg prompt throughput: 0.0 "
                    "tokens/s, Avg generation throughput: 100.2 tokens/s\n")
    found = codes(check_log(str(vllm)))
    assert found["log.recognised"].cause.startswith("engine log readable: vllm format")
    assert "log.no_spec_lines" in found
    sglang = tmp_path / "sglang.log"
    sglang.write_text("[2025-10-22 10:00:01 TP0] Decode batch, #running-req: 1, accept len: 2.17\n")
    assert "sglang format" in codes(check_log(str(sglang)))["log.recognised"].cause
    other = tmp_path / "other.log"
    other.write_text("hello\n")
    assert codes(check_log(str(other)))["log.unrecognised"].severity == "warning"
    empty = tmp_path / "empty.log"
    empty.write_text("")
    assert codes(check_log(str(empty)))["log.empty"].severity == "warning"
    if os.geteuid() != 0:  # root reads anything
        unreadable = tmp_path / "locked.log"
        unreadable.write_text("x")
        unreadable.chmod(0)
        assert codes(check_log(str(unreadable)))["log.unreadable"].severity == "error"


def test_timer() -> None:
    ticks = iter([0.0, 0.0, 0.002, 0.002, 0.004])
    assert min_clock_step(lambda: next(ticks), calls=4) == 0.002
    frozen = iter([1.0] * 5)
    assert min_clock_step(lambda: next(frozen), calls=4) is None
    found = check_timer()
    assert [f.code for f in found] == ["timer.ok", "timer.ok"]  # this host's clocks are fine
    assert "smallest measured step" in found[0].cause


def test_exit_codes_and_render() -> None:
    info = Finding("a", "fine", severity="info")
    warn = Finding("b", "hmm", remedy="do x", severity="warning")
    err = Finding("c", "bad", remedy="do y", context="ctx", severity="error")
    assert DoctorReport(None, (), (info,)).exit_code == DOCTOR_OK
    assert DoctorReport(None, (), (info, warn)).exit_code == DOCTOR_WARNINGS
    report = DoctorReport(None, (), (info, warn, err))
    assert report.exit_code == DOCTOR_ERRORS
    assert render_doctor(report) == "\n".join([
        "errors", "  ✗ bad", "    ctx", "    Fix: do y",
        "warnings", "  ! hmm", "    Fix: do x",
        "info", "  ✓ fine",
        "exit 2"])
    d = report.to_dict()
    assert d["exit_code"] == 2 and [f["code"] for f in d["errors"]] == ["c"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in list(os.environ):
        if name.lower().endswith("_proxy"):
            monkeypatch.delenv(name)
    return monkeypatch


def test_cli_clean_and_json(no_proxy_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
                            ) -> None:
    assert main(["doctor"]) == DOCTOR_OK
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "info" and out.rstrip().endswith("exit 0")
    no_proxy_env.setenv("no_proxy", "127.0.0.0/8")
    no_proxy_env.setenv("http_proxy", "http://proxy.invalid:3128")
    assert main(["doctor", "--json"]) == DOCTOR_ERRORS
    data = json.loads(capsys.readouterr().out)
    assert data["exit_code"] == 2
    assert data["errors"][0]["code"] == "proxy.no_proxy_cidr"
    assert {r["client"]: r["direct"] for r in data["routes"]} == {
        "httpx": False, "requests": True, "curl": True}


def test_cli_unreachable_url(no_proxy_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
                             ) -> None:
    port = free_port()
    assert main(["doctor", f"http://127.0.0.1:{port}", "--timeout", "1"]) == DOCTOR_ERRORS
    out = capsys.readouterr().out
    assert f"✗ http://127.0.0.1:{port} is unreachable" in out


def test_run_doctor_with_client_and_log(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("Avg generation throughput: 1.0 tokens/s\nSpecDecoding metrics: Mean acceptance "
                   "length: 2.53\n")
    with engine(VLLM) as c:
        report = run_doctor("http://127.0.0.1:8000", model="qwen-flash-nvfp4", log_path=str(log),
                            env={}, client=c, check_timers=False)
    assert report.exit_code == DOCTOR_OK, render_doctor(report)
    assert "log.no_spec_lines" not in {f.code for f in report.findings}
