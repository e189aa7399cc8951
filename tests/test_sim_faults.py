"""Every simulator fault knob does what it says (header X-Sim-Fault and config)."""

from __future__ import annotations

import contextlib
import json
import statistics
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from decodescope.sim import FaultSpec, SimConfig, SimHandle, SimServer

MSGS = [{"role": "user", "content": "Tell me something."}]
BODY = {"messages": MSGS, "max_tokens": 40, "ignore_eos": True, "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True}}


@pytest.fixture(scope="module")
def sim() -> Iterator[SimHandle]:
    with SimServer(SimConfig(time_scale=0.05)).start_in_thread() as handle:
        yield handle


@pytest.fixture()
def client() -> Iterator[httpx.Client]:
    with httpx.Client(trust_env=False, timeout=10) as c:
        yield c


def post(client: httpx.Client, url: str, fault: str, body: dict[str, Any] | None = None) -> httpx.Response:
    return client.post(url + "/v1/chat/completions", json=body or BODY, headers={"X-Sim-Fault": fault})


def read_lines(client: httpx.Client, url: str, fault: str, body: dict[str, Any] | None = None
               ) -> tuple[httpx.Response, list[tuple[float, str]]]:
    lines: list[tuple[float, str]] = []
    with client.stream("POST", url + "/v1/chat/completions", json=body or BODY,
                       headers={"X-Sim-Fault": fault}) as r:
        for line in r.iter_lines():
            if line:
                lines.append((time.monotonic(), line))
    return r, lines


def last_usage(lines: list[tuple[float, str]]) -> int:
    n = 0
    for _, line in lines:
        with contextlib.suppress(json.JSONDecodeError):
            n = json.loads(line[6:]).get("usage", {}).get("completion_tokens", n)
    return n


def scrape(client: httpx.Client, url: str) -> dict[str, float]:
    return {s.name: s.value for f in text_string_to_metric_families(client.get(url + "/metrics").text)
            for s in f.samples if "position" not in s.labels and "finished_reason" not in s.labels}


def scheduled_interval(chunks: list[Any]) -> float:
    """The median gap between step deadlines: a schedule restarted after a starved tick (a
    busy host) adds its lateness to one gap, never to the others."""
    d = [c.t_deadline_monotonic_s for c in chunks[1:]]
    return statistics.median(b - a for a, b in zip(d, d[1:], strict=False))


def test_drop_after_tokens(sim: SimHandle, client: httpx.Client) -> None:
    lines: list[str] = []
    with pytest.raises(httpx.RemoteProtocolError), client.stream(
        "POST", sim.url + "/v1/chat/completions", json=BODY, headers={"X-Sim-Fault": "drop_after=10"}
    ) as r:
        lines.extend(r.iter_lines())
    assert "data: [DONE]" not in lines
    assert last_usage([(0.0, ln) for ln in lines if ln.startswith("data: {")]) == 10
    truth = sim.truth[r.headers["x-request-id"]]
    assert truth.aborted and truth.completion_tokens == 10 and truth.finish_reason is None
    plain = dict(BODY, stream=False)
    del plain["stream_options"]
    with pytest.raises(httpx.RemoteProtocolError):
        post(client, sim.url, "drop_after=5", plain)


@pytest.mark.parametrize("status", [500, 503, 429, 401])
def test_status_faults(sim: SimHandle, client: httpx.Client, status: int) -> None:
    r = post(client, sim.url, f"status={status}")
    assert r.status_code == status
    assert r.json()["error"]["code"] == status
    assert (r.headers.get("retry-after") == "1") == (status == 429)


def test_api_key(client: httpx.Client) -> None:
    with SimServer(SimConfig(time_scale=0.05, api_key="s3cret")).start_in_thread() as sim:
        body = {"messages": MSGS, "max_tokens": 3}
        url = sim.url + "/v1/chat/completions"
        assert client.post(url, json=body).status_code == 401
        assert client.post(url, json=body, headers={"Authorization": "Bearer nope"}).status_code == 401
        assert client.get(sim.url + "/v1/models").status_code == 401
        ok = client.post(url, json=body, headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 3
        assert client.get(sim.url + "/health").status_code == 200
        assert client.get(sim.url + "/metrics").status_code == 200


def test_stall_mid_stream(sim: SimHandle, client: httpx.Client) -> None:
    r, lines = read_lines(client, sim.url, "stall=4, stall_after=8")  # 4 s simulated = 0.2 s real
    truth = sim.truth[r.headers["x-request-id"]]
    assert truth.stalled_s == pytest.approx(0.2)
    assert lines[-1][1] == "data: [DONE]" and last_usage(lines) == 40
    sent, stall_at = 0, None  # the stall follows the chunk that took the stream to >= 8 tokens
    for i, c in enumerate(truth.chunks):
        sent += c.tokens
        if sent >= 8:
            stall_at = i
            break
    assert stall_at is not None
    emits = [c.t_emit_monotonic_s for c in truth.chunks]
    gaps = [b - a for a, b in zip(emits, emits[1:], strict=False)]
    assert gaps[stall_at] >= 0.2
    times = [t for t, ln in lines if ln.startswith("data: {")]  # the client sees it too
    assert max(b - a for a, b in zip(times, times[1:], strict=False)) >= 0.15


def test_malformed_sse(sim: SimHandle, client: httpx.Client) -> None:
    _, lines = read_lines(client, sim.url, "malformed=6")
    bad = []
    for _, ln in lines:
        if ln.startswith("data: {"):
            try:
                json.loads(ln[6:])
            except json.JSONDecodeError:
                bad.append(ln)
    assert len(bad) == 1
    assert lines[-1][1] == "data: [DONE]" and last_usage(lines) == 40


def test_html_response(sim: SimHandle, client: httpx.Client) -> None:
    r = post(client, sim.url, "html")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert r.text.lstrip().lower().startswith("<!doctype html>")


def test_missing_usage(sim: SimHandle, client: httpx.Client) -> None:
    _, lines = read_lines(client, sim.url, "no_usage")
    assert lines[-1][1] == "data: [DONE]"
    assert not any('"usage"' in ln for _, ln in lines)
    plain = post(client, sim.url, "no_usage", {"messages": MSGS, "max_tokens": 4}).json()
    assert "usage" not in plain


def test_counter_reset(client: httpx.Client) -> None:
    with SimServer(SimConfig(time_scale=0.05)).start_in_thread() as sim:
        read_lines(client, sim.url, "")
        before = scrape(client, sim.url)
        assert before["vllm:generation_tokens_total"] == 40
        time.sleep(0.01)
        read_lines(client, sim.url, "counter_reset", dict(BODY, max_tokens=7))
        after = scrape(client, sim.url)
        assert after["vllm:generation_tokens_total"] == 7
        assert after["vllm:generation_tokens_created"] > before["vllm:generation_tokens_created"]
        sim.reset_counters()
        assert scrape(client, sim.url)["vllm:spec_decode_num_drafts_total"] == 0


def test_counter_reset_by_time(client: httpx.Client) -> None:
    cfg = SimConfig(time_scale=0.05, counter_reset_at_s=10.0)  # 0.5 s real after start
    with SimServer(cfg).start_in_thread() as sim:
        read_lines(client, sim.url, "")
        assert scrape(client, sim.url)["vllm:generation_tokens_total"] == 40
        time.sleep(0.55)
        assert scrape(client, sim.url)["vllm:generation_tokens_total"] == 0


def test_foreign_load(client: httpx.Client) -> None:
    cfg = SimConfig(time_scale=0.05, batch_slowdown=0.5)
    with SimServer(cfg).start_in_thread() as sim:
        r0, _ = read_lines(client, sim.url, "")
        seen_running = []
        with client.stream("POST", sim.url + "/v1/chat/completions", json=dict(BODY, max_tokens=400),
                           headers={"X-Sim-Fault": "foreign_load=3"}) as r1:
            for i, _ in enumerate(r1.iter_lines()):
                if i == 6:
                    seen_running.append(scrape(client, sim.url)["vllm:num_requests_running"])
                if i == 30:
                    break  # the request ends (aborted), and its foreign load with it
        assert seen_running == [4.0]
        clean, loaded = sim.truth[r0.headers["x-request-id"]], sim.truth[r1.headers["x-request-id"]]
        # Scheduled step intervals (deadlines) are load-independent: batch 4 -> 1 + 0.5 * 3.
        ratio = scheduled_interval(loaded.chunks) / scheduled_interval(clean.chunks)
        assert ratio == pytest.approx(2.5, rel=0.01)
        deadline = time.monotonic() + 2
        while not loaded.aborted and time.monotonic() < deadline:
            time.sleep(0.01)
        m = scrape(client, sim.url)
        assert m["vllm:generation_tokens_total"] > clean.completion_tokens + loaded.completion_tokens
        assert m["vllm:num_requests_running"] == 0  # foreign load ends with its request
        sim.set_foreign_load(2)
        assert scrape(client, sim.url)["vllm:num_requests_running"] == 2


def test_config_level_faults_and_bad_header(client: httpx.Client) -> None:
    cfg = SimConfig(time_scale=0.05, faults=FaultSpec.parse("status=503"))
    with SimServer(cfg).start_in_thread() as sim:
        assert post(client, sim.url, "").status_code == 503
        assert post(client, sim.url, "status=429").status_code == 429  # header wins
        r = post(client, sim.url, "explode")
        assert r.status_code == 400 and "unknown simulator fault" in r.json()["error"]["message"]


def test_close_delimited_sse(client: httpx.Client) -> None:
    with SimServer(SimConfig(time_scale=0.05, sse_framing="close")).start_in_thread() as sim:
        r, lines = read_lines(client, sim.url, "")
        assert "transfer-encoding" not in r.headers and r.headers["connection"] == "close"
        assert lines[-1][1] == "data: [DONE]" and last_usage(lines) == 40
