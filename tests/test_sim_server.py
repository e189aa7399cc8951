"""The simulator over HTTP: endpoints, streaming, usage, thinking, /metrics, ground truth."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from decodescope.errors import UsageError
from decodescope.sim import SimConfig, SimHandle, SimServer
from decodescope.sim.tokenizer import count_tokens

CODE_PROMPT = [{"role": "user", "content": "Refactor this:\n```python\ndef f(x): return x\n```"}]
TEXT_PROMPT = [{"role": "user", "content": "Tell me about the harbour town."}]
STREAM_USAGE = {"include_usage": True, "continuous_usage_stats": True}


@pytest.fixture(scope="module")
def sim() -> Iterator[SimHandle]:
    with SimServer(SimConfig(time_scale=0.05, seed=7)).start_in_thread() as handle:
        yield handle


@pytest.fixture()
def client() -> Iterator[httpx.Client]:
    with httpx.Client(trust_env=False, timeout=10) as c:
        yield c


def stream(client: httpx.Client, url: str, body: dict[str, Any], path: str = "/v1/chat/completions",
           headers: dict[str, str] | None = None) -> tuple[httpx.Response, list[Any]]:
    events: list[Any] = []
    with client.stream("POST", url + path, json={"stream": True, **body}, headers=headers) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                payload = line[len("data: "):]
                events.append(payload if payload == "[DONE]" else json.loads(payload))
    return r, events


def metrics(client: httpx.Client, url: str) -> dict[str, float]:
    """Sample name (+ position label) -> value."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(client.get(url + "/metrics").text):
        for s in fam.samples:
            key = s.name + (f"[{s.labels['position']}]" if "position" in s.labels else "")
            if "finished_reason" in s.labels:
                key += f"[{s.labels['finished_reason']}]"
            out[key] = s.value
    return out


def test_info_endpoints(sim: SimHandle, client: httpx.Client) -> None:
    assert client.get(sim.url + "/version").json() == {"version": "0.11.2+sim", "simulated": True}
    assert client.get(sim.url + "/health").status_code == 200
    card = client.get(sim.url + "/v1/models").json()["data"][0]
    assert card["id"].startswith("sim-vllm/") and card["owned_by"] == "vllm"
    assert card["max_model_len"] == 131072
    assert client.get(sim.url + "/nope").status_code == 404
    assert client.get(sim.url + "/v1/chat/completions").status_code == 405


def test_stream_chunks_usage_and_truth(sim: SimHandle, client: httpx.Client) -> None:
    body = {"messages": CODE_PROMPT, "max_tokens": 64, "ignore_eos": True, "temperature": 0,
            "stream_options": STREAM_USAGE}
    r, events = stream(client, sim.url, body)
    assert r.headers["content-type"].startswith("text/event-stream")
    assert events[-1] == "[DONE]"
    chunks = [e for e in events[:-1] if e["choices"]]
    rid = r.headers["x-request-id"]
    assert all(e["id"] == rid for e in events[:-1])
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    token_chunks = chunks[1:]
    prev = 0
    for e in token_chunks:  # text of a chunk re-tokenizes to its usage delta
        n = e["usage"]["completion_tokens"] - prev
        prev = e["usage"]["completion_tokens"]
        assert count_tokens(e["choices"][0]["delta"]["content"]) == n
    final = events[-2]
    assert final["choices"] == [] and final["usage"]["completion_tokens"] == 64 == prev
    assert token_chunks[-1]["choices"][0]["finish_reason"] == "length"
    tok = client.post(sim.url + "/tokenize", json={"messages": CODE_PROMPT}).json()
    assert final["usage"]["prompt_tokens"] == tok["count"] == len(tok["tokens"])
    truth = sim.truth[rid]
    assert [n for _, n in truth.emits] == [
        e["usage"]["completion_tokens"] - p
        for e, p in zip(token_chunks, [0] + [c["usage"]["completion_tokens"] for c in token_chunks], strict=False)
    ]
    assert truth.content_class == "code" and truth.finish_reason == "length"
    assert max(n for _, n in truth.emits) > 1  # multi-token chunks
    assert truth.mal is not None and truth.mal >= 3.0


def test_code_class_mal_from_client_view(sim: SimHandle, client: httpx.Client) -> None:
    body = {"messages": CODE_PROMPT + [{"role": "user", "content": "again"}], "max_tokens": 300,
            "ignore_eos": True, "temperature": 0, "stream_options": STREAM_USAGE}
    _, events = stream(client, sim.url, body)
    sizes, prev = [], 0
    for e in events[:-1]:
        if e["choices"] and e["usage"]["completion_tokens"] > prev:
            sizes.append(e["usage"]["completion_tokens"] - prev)
            prev = e["usage"]["completion_tokens"]
    decode = sizes[1:-1]  # drop the prefill token and the cut last step
    assert sum(decode) / len(decode) >= 3.0


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_thinking_reasoning_then_content(field: str, client: httpx.Client) -> None:
    cfg = SimConfig(time_scale=0.05, reasoning_field=field, reasoning_tokens=20,
                    report_reasoning_tokens=True)
    with SimServer(cfg).start_in_thread() as sim:
        body = {"messages": TEXT_PROMPT, "max_tokens": 50, "ignore_eos": True,
                "chat_template_kwargs": {"enable_thinking": True}, "stream_options": STREAM_USAGE}
        r, events = stream(client, sim.url, body)
        deltas = [e["choices"][0]["delta"] for e in events[:-1] if e["choices"]][1:]
        phases = ["r" if field in d else "" for d in deltas]
        first_content = next(i for i, d in enumerate(deltas) if "content" in d)
        assert all(phases[: first_content]) and not any(phases[first_content + 1:])
        reasoning = "".join(d.get(field, "") for d in deltas)
        content = "".join(d.get("content", "") for d in deltas)
        usage = events[-2]["usage"]
        assert count_tokens(reasoning) == 20 == usage["completion_tokens_details"]["reasoning_tokens"]
        assert count_tokens(reasoning) + count_tokens(content) == usage["completion_tokens"] == 50
        assert sim.truth[r.headers["x-request-id"]].reasoning_tokens == 20
        plain = client.post(sim.url + "/v1/chat/completions", json={
            "messages": TEXT_PROMPT, "max_tokens": 50, "ignore_eos": True,
            "chat_template_kwargs": {"enable_thinking": True}}).json()
        msg = plain["choices"][0]["message"]
        assert count_tokens(msg[field]) == 20 and count_tokens(msg["content"]) == 30


def test_include_usage_only_at_end(sim: SimHandle, client: httpx.Client) -> None:
    body = {"messages": TEXT_PROMPT, "max_tokens": 12, "stream_options": {"include_usage": True}}
    _, events = stream(client, sim.url, body)
    with_usage = [e for e in events[:-1] if "usage" in e]
    assert len(with_usage) == 1 and with_usage[0]["choices"] == []
    _, events = stream(client, sim.url, {"messages": TEXT_PROMPT, "max_tokens": 12})
    assert not any("usage" in e for e in events[:-1])


def test_completions_endpoint(sim: SimHandle, client: httpx.Client) -> None:
    r = client.post(sim.url + "/v1/completions", json={"prompt": "Once upon a time", "max_tokens": 9})
    d = r.json()
    assert d["object"] == "text_completion" and d["usage"]["completion_tokens"] == 9
    assert count_tokens(d["choices"][0]["text"]) == 9 and d["usage"]["prompt_tokens"] == 4
    _, events = stream(client, sim.url, {"prompt": "x", "max_tokens": 20, "ignore_eos": True,
                                         "stream_options": STREAM_USAGE}, path="/v1/completions")
    text = "".join(e["choices"][0]["text"] for e in events[:-1] if e["choices"])
    assert count_tokens(text) == 20 == events[-2]["usage"]["completion_tokens"]
    assert client.post(sim.url + "/v1/completions", json={"prompt": "x"}).json()["usage"][
        "completion_tokens"] <= 16


def test_request_errors(sim: SimHandle, client: httpx.Client) -> None:
    url = sim.url + "/v1/chat/completions"
    r = client.post(url, json={"model": "gpt-4", "messages": TEXT_PROMPT})
    assert r.status_code == 404 and "does not exist" in r.json()["error"]["message"]
    assert r.json()["error"]["type"] == "NotFoundError"
    r = client.post(url, json={"messages": TEXT_PROMPT, "max_tokens": 200000})
    assert r.status_code == 400 and "maximum context length" in r.json()["error"]["message"]
    assert client.post(url, content=b"{not json").status_code == 400
    assert client.post(url, json={"messages": []}).status_code == 400
    r = client.post(url, json={"messages": TEXT_PROMPT, "stream_options": {"include_usage": True}})
    assert r.status_code == 400


def test_client_request_id_and_keep_alive(sim: SimHandle, client: httpx.Client) -> None:
    for i in range(3):  # one client: httpx reuses the keep-alive connection
        r, events = stream(client, sim.url, {"messages": TEXT_PROMPT, "max_tokens": 5},
                           headers={"X-Request-Id": f"trace-{i}"})
        assert r.headers["x-request-id"] == f"trace-{i}"
        assert events[0]["id"] == f"chatcmpl-trace-{i}"
        assert sim.truth[f"trace-{i}"] is sim.truth[f"chatcmpl-trace-{i}"]


def test_metrics_match_truth(client: httpx.Client) -> None:
    with SimServer(SimConfig(time_scale=0.05, seed=3)).start_in_thread() as sim:
        for i in range(3):
            stream(client, sim.url, {"messages": [{"role": "user", "content": f"def f{i}(): pass"}],
                                     "max_tokens": 40 + i, "ignore_eos": True})
        m = metrics(client, sim.url)
        reqs = sim.truth.requests()
        label = 'model_name="sim-vllm/decodescope-sim"'
        assert label in client.get(sim.url + "/metrics").text
        assert m["vllm:generation_tokens_total"] == sum(r.completion_tokens for r in reqs) == 123
        assert m["vllm:prompt_tokens_total"] == sum(r.prompt_tokens for r in reqs)
        assert m["vllm:spec_decode_num_drafts_total"] == sum(r.drafts for r in reqs)
        assert m["vllm:spec_decode_num_draft_tokens_total"] == 4 * sum(r.drafts for r in reqs)
        assert m["vllm:spec_decode_num_accepted_tokens_total"] == sum(r.accepted_tokens for r in reqs)
        per_pos = [m[f"vllm:spec_decode_num_accepted_tokens_per_pos_total[{i}]"] for i in range(4)]
        assert sum(per_pos) == m["vllm:spec_decode_num_accepted_tokens_total"]
        assert per_pos == sorted(per_pos, reverse=True)
        assert m["vllm:request_success_total[length]"] == 3
        assert m["vllm:num_requests_running"] == 0 and m["vllm:num_requests_waiting"] == 0
        assert m["vllm:iteration_tokens_total_count"] >= m["vllm:spec_decode_num_drafts_total"] / 3


def test_metrics_update_live(client: httpx.Client) -> None:
    with SimServer(SimConfig(time_scale=0.5)).start_in_thread() as sim:
        seen = []
        body = {"messages": TEXT_PROMPT, "max_tokens": 400, "ignore_eos": True, "stream": True}
        with httpx.Client(trust_env=False) as scraper, \
                client.stream("POST", sim.url + "/v1/chat/completions", json=body) as r:
            for i, _ in enumerate(r.iter_lines()):
                if i in (6, 16):
                    m = metrics(scraper, sim.url)
                    seen.append((m["vllm:generation_tokens_total"], m["vllm:num_requests_running"]))
                if i == 16:
                    break
        assert seen[0][1] == seen[1][1] == 1 and 0 < seen[0][0] < seen[1][0] < 400


def test_schedule_follows_deadlines(client: httpx.Client) -> None:
    with SimServer(SimConfig(time_scale=0.25)).start_in_thread() as sim:
        t0 = time.monotonic()
        r, _ = stream(client, sim.url, {"messages": TEXT_PROMPT, "max_tokens": 150, "ignore_eos": True})
        truth = sim.truth[r.headers["x-request-id"]]
        assert truth.t_arrival_monotonic_s >= t0
        deadlines = [c.t_deadline_monotonic_s for c in truth.chunks[1:]]
        gaps = [b - a for a, b in zip(deadlines, deadlines[1:], strict=False)]
        assert all(g == pytest.approx(0.25 / 40, rel=1e-6) for g in gaps)  # t0 + n * dt
        assert truth.step_rate_real_hz == pytest.approx(160.0, rel=0.1)
        assert truth.step_rate_sim_hz == pytest.approx(40.0, rel=0.1)


def test_class_header_overrides_prompt(sim: SimHandle, client: httpx.Client) -> None:
    r, _ = stream(client, sim.url, {"messages": TEXT_PROMPT, "max_tokens": 5},
                  headers={"X-Sim-Class": "code"})
    assert sim.truth[r.headers["x-request-id"]].content_class == "code"
    bad = client.post(sim.url + "/v1/chat/completions", json={"messages": TEXT_PROMPT},
                      headers={"X-Sim-Class": "poetry"})
    assert bad.status_code == 400


def test_waiting_queue(client: httpx.Client) -> None:
    async def run(url: str) -> list[int]:
        async with httpx.AsyncClient(trust_env=False, timeout=10) as ac:
            async def one(i: int) -> int:
                r = await ac.post(url + "/v1/chat/completions", json={
                    "messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": 150,
                    "ignore_eos": True})
                return int(r.json()["usage"]["completion_tokens"])

            async def peek() -> float:  # the most requests seen waiting
                most = 0.0
                for _ in range(100):
                    await asyncio.sleep(0.01)
                    r = await ac.get(url + "/metrics")
                    most = max(most, next(s.value for f in text_string_to_metric_families(r.text)
                                          for s in f.samples if s.name == "vllm:num_requests_waiting"))
                    if most == 2:
                        break
                return most

            results: list[Any] = await asyncio.gather(*(one(i) for i in range(4)), peek())
            return [int(x) for x in results]

    with SimServer(SimConfig(time_scale=0.2, max_num_seqs=2)).start_in_thread() as sim:
        assert asyncio.run(run(sim.url)) == [150, 150, 150, 150, 2]


def test_port_in_use_and_truth_limit(client: httpx.Client) -> None:
    with SimServer(SimConfig(time_scale=0.05, max_truth_requests=2)).start_in_thread() as sim:
        with pytest.raises(UsageError, match="cannot listen"):
            SimServer(SimConfig(port=sim.port)).start_in_thread()
        ids = [client.post(sim.url + "/v1/chat/completions", json={
            "messages": TEXT_PROMPT, "max_tokens": 2}).json()["id"] for _ in range(3)]
        assert len(sim.truth) == 2 and ids[0] not in sim.truth and ids[2] in sim.truth


def test_client_disconnect_aborts_request(client: httpx.Client) -> None:
    with SimServer(SimConfig(time_scale=0.2)).start_in_thread() as sim:
        body = {"messages": TEXT_PROMPT, "max_tokens": 500, "ignore_eos": True, "stream": True}
        with httpx.Client(trust_env=False) as short, \
                short.stream("POST", sim.url + "/v1/chat/completions", json=body) as r:
            for i, _ in enumerate(r.iter_lines()):
                if i == 4:
                    break
        rid = r.headers["x-request-id"]
        deadline = time.monotonic() + 2
        while not sim.truth[rid].aborted and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sim.truth[rid].aborted and sim.truth[rid].completion_tokens < 500
        m = metrics(client, sim.url)
        assert m["vllm:num_requests_running"] == 0 and m["vllm:request_success_total[abort]"] == 1



async def _accepted(server: SimServer) -> tuple[asyncio.StreamWriter, socket.socket]:
    """A connection as asyncio hands it to the server (a real socket), its task not yet run."""
    ours, theirs = socket.socketpair()
    reader = asyncio.StreamReader()
    proto = asyncio.StreamReaderProtocol(reader)
    loop = asyncio.get_running_loop()
    transport, _ = await loop.connect_accepted_socket(lambda: proto, ours)
    writer = asyncio.StreamWriter(transport, proto, reader, loop)
    server._accept(reader, writer)
    return writer, theirs


def test_stop_closes_a_connection_whose_task_never_ran() -> None:
    """A connection accepted just as the server stops: its task is cancelled before its first
    step, so its own `finally` never runs; stop() closes its socket all the same (else the
    garbage collector warns, and pytest fails whichever test happens to collect it)."""

    async def go() -> None:
        server = SimServer(SimConfig(port=0, time_scale=0.05, seed=3))
        await server.start()
        writer, theirs = await _accepted(server)
        await server.stop()  # no await between: the connection's task has not run a step
        assert writer.transport.is_closing() and not server._writers and not server._conns
        await asyncio.sleep(0)
        assert writer.transport.get_extra_info("socket") is None or \
            writer.transport.get_extra_info("socket").fileno() == -1
        assert theirs.recv(1) == b""  # the peer sees the close
        theirs.close()

    asyncio.run(go())


def test_connection_after_stop_is_closed_at_once() -> None:
    async def go() -> None:
        server = SimServer(SimConfig(port=0, time_scale=0.05, seed=3))
        await server.start()
        await server.stop()
        writer, theirs = await _accepted(server)
        assert writer.transport.is_closing() and not server._conns and not server._writers
        await asyncio.sleep(0)
        assert theirs.recv(1) == b""
        theirs.close()

    asyncio.run(go())


def test_handle_stop_closes_sockets_under_connection_churn() -> None:
    """Clients connecting from other threads while the threaded handle stops: every socket
    the server accepted is closed by the time stop() returns (what always holds; whether a
    connection lands mid-stop is up to the scheduler)."""
    import gc
    import sys
    import threading

    leaked: list[str] = []
    hook = sys.unraisablehook
    sys.unraisablehook = lambda u: leaked.append(repr(u.exc_value))
    try:
        for _ in range(10):
            handle = SimServer(SimConfig(port=0, time_scale=0.05, seed=3)).start_in_thread()
            stop = threading.Event()

            def hammer(port: int = handle.port, stop: threading.Event = stop) -> None:
                while not stop.is_set():
                    with contextlib.suppress(OSError), \
                            socket.create_connection(("127.0.0.1", port), timeout=1) as c:
                        c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")

            threads = [threading.Thread(target=hammer) for _ in range(2)]
            for t in threads:
                t.start()
            time.sleep(0.02)
            handle.stop()
            stop.set()
            for t in threads:
                t.join()
            gc.collect()
    finally:
        sys.unraisablehook = hook
    assert leaked == [], leaked[:3]
