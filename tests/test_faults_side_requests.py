"""Side requests are bounded (issue 22, parts 1 and 8): every request decodescope makes to a
server besides the measured stream reads at most what its endpoint can hold, within one
deadline, and fails with exit 5 (4 when nothing answered) naming the endpoint.

Servers: tests/sidefaults.py (an endless, chunked-endless, 10 GiB Content-Length or trickling
answer on any path). Commands that read a whole answer run in a subprocess under a 1 GiB
address-space limit: before the fix each of them ended in MemoryError (exit 70).
"""

from __future__ import annotations

import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import sidefaults
from sidefaults import SideFaultServer

from decodescope import edge
from decodescope.errors import ProtocolError, ResponseTooLargeError, UnreachableError
from decodescope.exitcodes import DOCTOR_ERRORS, ExitCode
from decodescope.run.observers import PrometheusObserver
from decodescope.store import runs as sr
from decodescope.store.connect import open_store

pytestmark = pytest.mark.timeout(300)

CLI = [sys.executable, "-c", "import sys; from decodescope.cli.main import main; sys.exit(main(sys.argv[1:]))"]
CALIBER = ('name = "side"\nversion = 1\n[prompt]\ntask = "Say hi."\n[output]\nmax_tokens = 32\n'
           'min_tokens = 32\nsteady_state_start = 4\n')
AS_LIMIT = 1 << 30  # 1 GiB of address space, as the held-out tests ran them
BOUND_S = 90  # generous on a loaded 2-core box; an unbounded read takes minutes or never ends


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


def run_cli(*args: str, cap: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=BOUND_S,
                          preexec_fn=_cap_memory if cap else None)


def caliber(tmp_path: Path) -> str:
    path = tmp_path / "side.toml"
    path.write_text(CALIBER, encoding="utf-8")
    return str(path)


def one_error_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith(("error:", "internal error:"))]
    assert len(lines) == 1, err
    return lines[0]


# ---- the reader itself ------------------------------------------------------------------------

SMALL = edge.SideEndpoint("/v1/models", 64 * 1024, "a test limit")


@pytest.mark.parametrize("mode", ["endless", "chunked", "huge"])
def test_reader_stops_at_the_endpoints_limit(mode):
    with SideFaultServer({"/v1/models": mode}) as srv, \
            httpx.Client(trust_env=False, timeout=5) as c, \
            pytest.raises(ResponseTooLargeError) as info:
        edge.side_request(c, "GET", srv.url, SMALL, deadline_s=20)
    assert "GET /v1/models answered more than 64 KiB" in info.value.cause
    assert info.value.where == srv.url + "/v1/models"
    if mode == "huge":  # refused at its Content-Length, before the body
        assert "Content-Length 10737418240" in info.value.cause


def test_reader_never_inflates_a_compressed_answer_past_the_limit():
    """Asked for identity, answered with a gzip that inflates to 256 MiB: inflated only up to
    the limit; a small gzip answer still reads; an encoding it cannot bound is refused."""
    faults = {"/v1/models": "gzip_bomb", "/version": "gzip_ok", "/props": "brotli"}
    sidefaults._gzip_bomb()  # built before the server answers: its CPU is not the client's wait
    with SideFaultServer(faults) as srv, httpx.Client(trust_env=False, timeout=30) as c:
        with pytest.raises(ResponseTooLargeError, match="answered more than 64 KiB"):
            edge.side_request(c, "GET", srv.url, SMALL)
        assert edge.side_request(c, "GET", srv.url, edge.VERSION).json() == {"version": "0.0-gzip"}
        with pytest.raises(ProtocolError, match="Content-Encoding 'br', not identity"):
            edge.side_request(c, "GET", srv.url, edge.PROPS)


def test_reader_cuts_a_trickle_at_the_deadline_not_the_read_timeout():
    """One byte a second never trips a 5 s read timeout; the whole-request deadline ends it."""
    with SideFaultServer({"/v1/models": "trickle", "/version": "trickle_head"}) as srv, \
            httpx.Client(trust_env=False, timeout=5) as c:
        with pytest.raises(ProtocolError) as body:
            edge.side_request(c, "GET", srv.url, SMALL, deadline_s=2.5)
        with pytest.raises(UnreachableError) as head:  # the status line itself trickles
            edge.side_request(c, "GET", srv.url, edge.VERSION, deadline_s=2.5)
    assert "did not finish within the deadline of 2.5 s" in body.value.cause
    assert "/v1/models" in body.value.cause
    assert "no answer (status and headers) within the deadline of 2.5 s" in head.value.cause
    assert body.value.exit_code == ExitCode.PROTOCOL and head.value.exit_code == ExitCode.UNREACHABLE


def test_the_command_lines_deadline_bounds_side_requests():
    with SideFaultServer({"/v1/models": "trickle"}) as srv, \
            httpx.Client(trust_env=False, timeout=5) as c, \
            edge.stream_limits(idle_timeout_s=5, deadline_s=1.5), \
            pytest.raises(ProtocolError, match="deadline of 1.5 s"):
        edge.side_request(c, "GET", srv.url, edge.MODELS)  # its own default is 30 s


def test_reader_returns_a_good_answer_whole():
    with SideFaultServer() as srv, httpx.Client(trust_env=False, timeout=5) as c:
        r = edge.side_request(c, "GET", srv.url, edge.MODELS)
        t = edge.side_request(c, "POST", srv.url, edge.tokenize_endpoint("x" * 40),
                              json={"prompt": "x" * 40})
    assert r.status == 200 and r.json()["data"][0]["id"] == "side-fault-model"
    assert t.json()["count"] == 10


def test_tokenize_limit_follows_the_text():
    """One token id per byte of text at most: the limit grows with the text, from a floor."""
    short, long_ = edge.tokenize_endpoint("hi"), edge.tokenize_endpoint("é" * 100_000)
    assert short.max_bytes == edge.TOKENIZE_BASE_BYTES + 2 * edge.TOKENIZE_BYTES_PER_TEXT_BYTE
    assert long_.max_bytes == edge.TOKENIZE_BASE_BYTES + 200_000 * edge.TOKENIZE_BYTES_PER_TEXT_BYTE


# ---- every side endpoint of a probe, under 1 GiB ---------------------------------------------

# /get_server_info is tried before /props and /version (engine detection): its faults fire
# first; /props and /version are read when it answers 404, as the server's default does.
SIDE_PATHS = ["/v1/models", "/get_server_info", "/props", "/version", "/tokenize"]


@pytest.mark.parametrize("mode", ["endless", "chunked", "huge"])
@pytest.mark.parametrize("path", SIDE_PATHS)
def test_probe_side_endpoint_is_bounded_under_1gib(tmp_path, path, mode):
    db = tmp_path / "s.sqlite"
    with SideFaultServer({path: mode}) as srv:
        p = run_cli("probe", srv.url, "--caliber", caliber(tmp_path), "--store", str(db),
                    "--trials", "1", "--no-fingerprint", "--no-scrape")
        sent = srv.sent_bytes
    line = one_error_line(p.stderr)
    assert p.returncode == ExitCode.PROTOCOL, p.stderr
    method = "POST" if path == "/tokenize" else "GET"
    assert f"{method} {path} answered more than" in line
    # the client hung up near the limit, never after gigabytes (socket buffers on top)
    assert sent < edge.MODELS.max_bytes + 64 * 1024 * 1024


@pytest.mark.parametrize("path", ["/tokenize", "/props"])
def test_probe_trickling_side_request_ends_at_its_deadline(tmp_path, path):
    """--timeout 5 --deadline 3: a byte a second on a side request ends at the deadline."""
    with SideFaultServer({path: "trickle"}) as srv:
        p = run_cli("probe", srv.url, "--caliber", caliber(tmp_path), "--store",
                    str(tmp_path / "s.sqlite"), "--trials", "1", "--no-fingerprint",
                    "--no-scrape", "--timeout", "5", "--deadline", "3")
    line = one_error_line(p.stderr)
    assert p.returncode == ExitCode.PROTOCOL, p.stderr
    assert path in line and "within the deadline of 3 s" in line


@pytest.mark.parametrize("mode", ["endless", "chunked", "huge"])
@pytest.mark.parametrize("path", ["/health", "/v1/models"])
def test_doctor_side_endpoint_is_bounded_under_1gib(path, mode):
    """Doctor keeps pyperf's 0/1/2: the broken answer is one of its errors (exit 2), named
    with the endpoint, and the checks that do not need the endpoint (timers) still report."""
    with SideFaultServer({path: mode}) as srv:
        p = run_cli("doctor", srv.url)
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == DOCTOR_ERRORS, (p.stdout, p.stderr)
    assert f"GET {path} answered more than" in p.stdout
    assert "timer" in p.stdout.lower()


def test_doctor_timeout_is_the_whole_request():
    with SideFaultServer({"/health": "trickle"}) as srv:
        p = run_cli("doctor", srv.url, "--timeout", "2", cap=False)
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == DOCTOR_ERRORS, (p.stdout, p.stderr)
    assert "/health" in p.stdout and "deadline of 2 s" in p.stdout


def test_fingerprint_names_an_endless_props_and_goes_on():
    """The fingerprint is best effort: an endless /props becomes that item's reason."""
    with SideFaultServer({"/props": "endless"}) as srv:
        p = run_cli("fingerprint", srv.url, "--json")
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    assert "GET /props answered more than 4 MiB" in p.stdout


# ---- /metrics: bounded in bytes and in parse time; never a traceback --------------------------

def _many_series(n: int) -> str:
    return "".join(f'vllm:num_requests_running{{engine="{i}"}} 1\n' for i in range(n))


@pytest.mark.parametrize("metrics_fault, needle", [
    ("endless", "answered more than 32 MiB"),
    ("huge", "answered more than 32 MiB"),
    ("trickle", "did not finish within the deadline"),
    (None, "more than 20000 samples"),  # 2 million series in 60 MB (cut by bytes first)
    ("series", "more than 20000 samples"),  # 200,000 series that fit the byte limit
    ("position", "position 1000000000"),
])
def test_probe_survives_a_misbehaving_metrics(tmp_path, metrics_fault, needle):
    db = tmp_path / "s.sqlite"
    faults: dict[str, object] = {}
    metrics = "vllm:generation_tokens_total 1\n"
    if metrics_fault in ("endless", "huge", "trickle"):
        faults["/metrics"] = metrics_fault
    elif metrics_fault is None:
        metrics = _many_series(2_000_000)
        needle = "answered more than 32 MiB"
    elif metrics_fault == "series":
        metrics = _many_series(200_000)
    else:
        metrics += 'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="1000000000"} 5\n'
    with SideFaultServer(faults, metrics=metrics) as srv:
        p = run_cli("probe", srv.url, "--caliber", caliber(tmp_path), "--store", str(db),
                    "--trials", "2", "--no-fingerprint", "--timeout", "5", "--deadline", "10")
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode in (ExitCode.OK, ExitCode.CALIBER_MISSED), p.stderr
    assert needle in p.stderr and "/metrics" in p.stderr
    with open_store(db, read_only=True) as st:
        run = sr.get_run(st, sr.resolve_run_id(st, "last"))
    assert run.status == "complete" and len(run.trials) == 2


def test_scraper_thread_never_raises(monkeypatch):
    """Whatever a scrape meets, the thread records it and stops; no exception leaves it (a
    thread's exception prints a raw traceback)."""
    escaped: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda a: escaped.append(a.exc_value))
    calls = [0]

    def handler(request: httpx.Request) -> httpx.Response:
        calls[0] += 1
        if calls[0] == 1:
            return httpx.Response(200, text="vllm:generation_tokens_total 1\n")
        raise MemoryError("simulated")

    ob = PrometheusObserver("http://engine.test", "vllm", interval_s=0.05,
                            transport=httpx.MockTransport(handler))
    ob.start()
    assert ob._thread is not None
    for _ in range(600):  # until the thread has met the failure a few times
        if calls[0] >= 3:
            break
        time.sleep(0.05)
    result = ob.stop()
    assert calls[0] >= 3 and not escaped
    assert not ob._thread.is_alive()
    failed = [f for f in result.findings if f.code == "telemetry.scrape_failed"]
    assert failed and "MemoryError" in failed[0].cause


def test_a_long_unspaced_answer_is_stored_in_bounded_time(tmp_path):
    """A /props of 3 MB without a space (under its 4 MiB limit) is kept in the run's engine
    info, through the redaction pass: linear, well under a second per MiB (it was quadratic:
    seconds per 4 KiB, hours for this one)."""
    props = {"build_info": "b7000", "total_slots": 1, "chat_template": "x" * 3_000_000}
    db = tmp_path / "s.sqlite"
    with SideFaultServer({"/props": props}) as srv:
        p = run_cli("probe", srv.url, "--caliber", caliber(tmp_path), "--store", str(db),
                    "--trials", "1", "--no-fingerprint", "--no-scrape")
    assert p.returncode in (ExitCode.OK, ExitCode.CALIBER_MISSED), p.stderr
    assert "engine: llamacpp b7000" in p.stderr
