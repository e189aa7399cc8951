"""The streaming client against scripted servers (httpx MockTransport) and a scripted clock."""

import asyncio
import contextlib
import json
import socket
import threading
import time

import httpx
import pytest

from decodescope.probe import h1
from decodescope.probe.client import make_client, raise_for_trace, stream_request
from decodescope.probe.sse import SSEParser
from decodescope.records.request_metrics import compute

URL = "http://127.0.0.1:9"


class Blocks(httpx.AsyncByteStream):
    def __init__(self, blocks):
        self.blocks = blocks

    async def __aiter__(self):
        for b in self.blocks:
            yield b


class Clock:
    """Advances 10 ms on every reading."""

    def __init__(self):
        self.t = 100.0

    def __call__(self):
        self.t += 0.01
        return self.t


def sse(obj):
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def chunk(content="", reasoning="", usage=None, finish=None):
    delta = {}
    if content:
        delta["content"] = content
    if reasoning:
        delta["reasoning_content"] = reasoning
    d = {"id": "cmpl-1", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        d["usage"] = usage
    return d


def usage(completion, prompt=20):
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def run(handler, clock=None):
    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as c:
            return await stream_request(c, URL, "/v1/chat/completions", {"model": "m"},
                                        clock=clock or Clock())
    return asyncio.run(go())


def sse_response(blocks, ctype="text/event-stream"):
    def handler(request):
        return httpx.Response(200, headers={"content-type": ctype}, stream=Blocks(blocks))
    return handler


def test_multi_token_chunks_counted_from_continuous_usage():
    # vLLM with spec decoding: chunks carry 1..5 tokens; reasoning first, then content.
    sizes = [1, 3, 4, 2, 5, 4]
    blocks, total = [sse(chunk(usage=usage(0)))], 0
    for i, n in enumerate(sizes):
        total += n
        kind = {"reasoning": "r" * n} if i < 2 else {"content": "c" * n}
        blocks.append(sse(chunk(**kind, usage=usage(total))))
    blocks.append(sse(chunk(finish="stop", usage=usage(total))))
    blocks.append(sse({"id": "cmpl-1", "choices": [], "usage": usage(total)}))
    blocks.append(b"data: [DONE]\n\n")
    tr = run(sse_response(blocks))
    assert tr.ok and tr.completion_tokens == total == sum(c.tokens or 0 for c in tr.chunks)
    m = compute(tr, steady_state_start=0)
    assert m.tokens_per_chunk_source == "usage"
    assert m.itl_count == total - 1
    assert m.reasoning_tokens == 4  # 1 + 3 tokens in reasoning chunks
    # the invariant: time from first to last token == sum of ITL samples
    pts = [c for c in tr.chunks if (c.tokens or 0) > 0]
    assert m.itl_sum_s == pytest.approx(pts[-1].t_recv_s - pts[0].t_recv_s)
    assert m.ttft_s < m.ttfot_s
    assert m.mean_tokens_per_chunk == pytest.approx(total / len(sizes))


def test_one_token_per_chunk_with_final_usage_and_timings():
    # llama.cpp: one chunk per token, usage + timings only at the end.
    blocks = [sse(chunk(content=f"t{i} ")) for i in range(10)]
    final = chunk(finish="length")
    final["usage"] = usage(10)
    final["timings"] = {"predicted_n": 10, "draft_n": 6, "draft_n_accepted": 4}
    blocks += [sse(final), b"data: [DONE]\n\n"]
    tr = run(sse_response(blocks))
    m = compute(tr, steady_state_start=2)
    assert tr.timings["draft_n_accepted"] == 4
    assert m.tokens_per_chunk_source == "one-per-chunk" and m.itl_count == 9
    # steady state after 2 tokens: tokens 3..10 over the 7 gaps of 10 ms
    assert m.decode_rate == pytest.approx(8 / 0.08)


def test_sse_parser_handles_split_lines_and_comments():
    p = SSEParser()
    out = p.feed(b": keepalive\n\ndata: {\"a\"")
    out += p.feed(b": 1}\r\n\r\ndata: x\n")
    out += p.close()
    assert out == ['{"a": 1}', "x"]


@pytest.mark.parametrize("handler,kind,needle", [
    (lambda r: httpx.Response(200, headers={"content-type": "text/html"}, text="<html>login</html>"),
     "NotSSEError", "HTML"),
    (lambda r: httpx.Response(401, json={"error": "bad key"}), "AuthError", "--api-key-env"),
    (lambda r: httpx.Response(404, json={"error": {"message": "The model `x` does not exist."}}),
     "ModelNotServedError", "--model"),
    (lambda r: httpx.Response(503, text="overloaded"), "ServerError", "HTTP 503"),
    (sse_response([b"data: {not json\n\n"]), "MalformedSSEError", "not JSON"),
    (sse_response([sse(chunk(content="a", usage=usage(1)))]), "StreamClosedError", "closed the stream"),
    (sse_response([b"data: [1, 2]\n\n"]), "MalformedSSEError", "not a JSON object"),
])
def test_bad_servers_give_one_line_errors(handler, kind, needle):
    tr = run(handler)
    assert not tr.ok and tr.error_kind == kind and needle in tr.error
    assert "\n" not in tr.error
    with pytest.raises(Exception) as e:
        raise_for_trace(tr)
    assert type(e.value).__name__ == kind


def test_connection_refused_is_unreachable():
    def handler(request):
        raise httpx.ConnectError("Connection refused", request=request)
    tr = run(handler)
    assert tr.error_kind == "UnreachableError" and "doctor" in tr.error


def test_mid_stream_disconnect_keeps_received_chunks():
    class Broken(httpx.AsyncByteStream):
        async def __aiter__(self):
            yield sse(chunk(content="a", usage=usage(1)))
            raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")

    tr = run(lambda r: httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Broken()))
    assert tr.error_kind == "StreamClosedError" and len(tr.chunks) == 1


# ---- the lean HTTP/1.1 path (make_client without a proxy, plain http) -------------------


class Scripted:
    """A threaded HTTP server on 127.0.0.1: every connection runs `script(sock, index)`."""

    def __init__(self, script):
        self.script = script
        self.conns = 0
        self.requests = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns += 1
            t = threading.Thread(target=self._one, args=(c, self.conns - 1), daemon=True)
            self.threads.append(t)
            t.start()

    def _one(self, c, index):
        with c, contextlib.suppress(OSError):
            self.script(self, c, index)

    def read_request(self, c):
        buf = b""
        while b"\r\n\r\n" not in buf:
            data = c.recv(65536)
            if not data:
                return None
            buf += data
        head, _, body = buf.partition(b"\r\n\r\n")
        length = int(next((ln.split(b":")[1] for ln in head.split(b"\r\n")
                           if ln.lower().startswith(b"content-length:")), b"0"))
        while len(body) < length:
            body += c.recv(65536)
        self.requests.append((head.decode("latin-1"), json.loads(body)))
        return head

    def close(self):
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        self.sock.close()
        for t in self.threads:
            t.join(5)


def h1_run(server, n=1, **kw):
    async def go():
        async with make_client(**kw) as c:
            return [await stream_request(c, server.url, "/v1/chat/completions", {"model": "m"})
                    for _ in range(n)]
    try:
        return asyncio.run(go())
    finally:
        server.close()


def hchunk(data):
    return b"%x\r\n%s\r\n" % (len(data), data)


SSE_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nx-request-id: rid-7\r\n"
            b"transfer-encoding: chunked\r\n\r\n")


def spec_stream(sizes=(1, 3, 4, 2)):
    events, total = [sse(chunk(usage=usage(0)))], 0
    for i, n in enumerate(sizes):
        total += n
        events.append(sse(chunk(content="c" * n, usage=usage(total),
                                finish="length" if i == len(sizes) - 1 else None)))
    events += [sse({"id": "cmpl-1", "choices": [], "usage": usage(total)}), b"data: [DONE]\n\n"]
    return events, total


def test_h1_chunked_stream_split_at_every_awkward_boundary():
    events, total = spec_stream()
    wire = SSE_HEAD + b"".join(hchunk(e) for e in events) + b"0\r\nx-trailer: 1\r\n\r\n"

    def script(srv, c, i):
        srv.read_request(c)
        for k in range(0, len(wire), 7):  # 7-byte pieces: size lines, CRLFs and data all split
            c.sendall(wire[k:k + 7])
            time.sleep(0.0005)

    srv = Scripted(script)
    (tr,) = h1_run(srv)
    assert tr.ok, tr.error
    assert tr.request_id == "rid-7" and tr.completion_tokens == total
    assert sum(c.tokens or 0 for c in tr.chunks) == total
    times = [c.t_recv_s for c in tr.chunks]
    assert times == sorted(times) and tr.t_send_s <= times[0] <= times[-1] <= tr.t_done_s
    head, body = srv.requests[0]
    assert head.startswith("POST /v1/chat/completions HTTP/1.1") and body == {"model": "m"}


@pytest.mark.parametrize("framing", ["length", "close"])
def test_h1_content_length_and_close_delimited_bodies(framing):
    events, total = spec_stream()
    body = b"".join(events)
    head = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            + (b"content-length: %d\r\n\r\n" % len(body) if framing == "length"
               else b"connection: close\r\n\r\n"))

    def script(srv, c, i):
        srv.read_request(c)
        c.sendall(head + body)
        if framing == "close":
            c.shutdown(socket.SHUT_WR)

    (tr,) = h1_run(Scripted(script))
    assert tr.ok, tr.error
    assert tr.completion_tokens == total


def test_h1_keeps_connections_alive_and_retries_one_the_server_closed():
    events, _ = spec_stream()
    wire = SSE_HEAD + b"".join(hchunk(e) for e in events) + b"0\r\n\r\n"

    def script(srv, c, i):
        for _ in range(2 if i == 0 else 1):  # the first connection serves two, then closes
            if srv.read_request(c) is None:
                return
            c.sendall(wire)

    srv = Scripted(script)
    traces = h1_run(srv, n=3)
    assert all(t.ok for t in traces), [t.error for t in traces]
    assert srv.conns == 2 and len(srv.requests) == 3


@pytest.mark.parametrize("reply,kind,needle", [
    (b"HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: 21\r\n\r\n"
     b'{"error": "bad key"}\n', "AuthError", "--api-key-env"),
    (b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: 18\r\n\r\n<html>login</html>",
     "NotSSEError", "HTML"),
    (SSE_HEAD + hchunk(sse(chunk(content="a", usage=usage(1)))), "StreamClosedError", "mid-stream"),
    (b"HTTP/1.1 100 Continue\r\n\r\n" + SSE_HEAD + hchunk(b"data: {not json\n\n") + b"0\r\n\r\n",
     "MalformedSSEError", "not JSON"),
    (b"NOT-HTTP\r\n\r\n", "StreamClosedError", "bad status line"),
])
def test_h1_bad_servers_give_the_same_errors(reply, kind, needle):
    def script(srv, c, i):
        srv.read_request(c)
        c.sendall(reply)

    (tr,) = h1_run(Scripted(script))
    assert not tr.ok and tr.error_kind == kind and needle in tr.error, tr.error
    if kind == "StreamClosedError" and "mid-stream" in needle:
        assert len(tr.chunks) == 1  # what arrived is kept


def test_h1_connection_refused_and_read_timeout():
    s = socket.create_server(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()

    async def refused():
        async with make_client() as c:
            return await stream_request(c, f"http://127.0.0.1:{port}", "/v1/x", {})
    tr = asyncio.run(refused())
    assert tr.error_kind == "UnreachableError" and "cannot connect" in tr.error

    def stall(srv, c, i):
        srv.read_request(c)
        c.sendall(SSE_HEAD + hchunk(sse(chunk(content="a", usage=usage(1)))))
        time.sleep(1.0)

    (tr,) = h1_run(Scripted(stall), timeout_s=0.2)
    assert tr.error_kind == "StreamClosedError" and "timed out" in tr.error
    assert len(tr.chunks) == 1


def test_make_client_with_a_proxy_goes_through_httpx():
    async def go():
        async with make_client(proxy="http://127.0.0.1:9") as c:
            return getattr(c, "h1", "absent")
    assert asyncio.run(go()) is None
    assert h1.H1Pool.accepts("http://h:1/x") and not h1.H1Pool.accepts("https://h/x")


@pytest.mark.skipif(h1.SO_TIMESTAMPNS is None, reason="kernel receipt times: Linux x86_64/aarch64")
def test_h1_receipt_time_is_when_bytes_arrived_not_when_read():
    # The second event arrives while the client is busy for 0.2 s (in on_chunk); its receipt
    # time is when the kernel got it, not when the client got round to reading it.
    sent = []

    def script(srv, c, i):
        srv.read_request(c)
        c.sendall(SSE_HEAD + hchunk(sse(chunk(content="a", usage=usage(1)))))
        time.sleep(0.05)
        sent.append(time.perf_counter())
        c.sendall(hchunk(sse(chunk(content="b", usage=usage(2), finish="length"))) + b"0\r\n\r\n")

    srv = Scripted(script)

    def busy(ch):
        if ch.content == "a":
            time.sleep(0.2)

    async def go():
        async with make_client() as c:
            return await stream_request(c, srv.url, "/v1/chat/completions", {}, on_chunk=busy)
    try:
        tr = asyncio.run(go())
    finally:
        srv.close()
    assert tr.ok, tr.error
    b = next(c for c in tr.chunks if c.content == "b")
    assert abs(b.t_recv_s - sent[0]) < 0.01  # read ~0.15 s later, stamped on arrival


# ---- bounded responses (issue 13) -----------------------------------------------------------

class Endless(httpx.AsyncByteStream):
    """An endless body; counts the blocks it was asked for."""

    def __init__(self, block):
        self.block = block
        self.yielded = 0

    async def __aiter__(self):
        while True:
            self.yielded += 1
            yield self.block


def run_body(handler, body):
    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as c:
            return await stream_request(c, URL, "/v1/chat/completions", body, clock=Clock())
    return asyncio.run(go())


def test_sse_parser_is_linear_in_a_line_that_never_ends():
    # 15,000 blocks of 1 KiB without a newline: the old parser copied the whole buffer per
    # block (~115 GB of copying); this one keeps pieces and joins once.
    p = SSEParser()
    piece = b"x" * 1024
    t0 = time.monotonic()
    assert p.feed(b"data: ") == []
    for _ in range(15_000):
        assert p.feed(piece) == []
    assert p.pending_bytes == 6 + 15_000 * 1024
    (event,) = p.feed(b"\n\n")
    assert len(event) == 15_000 * 1024
    assert time.monotonic() - t0 < 30  # generous: linear takes milliseconds


def test_sse_parser_refuses_an_event_past_its_limit():
    from decodescope.errors import MalformedSSEError

    p = SSEParser(max_event_bytes=1000)
    p.feed(b"data: " + b"y" * 500)
    with pytest.raises(MalformedSSEError):
        p.feed(b"y" * 600)
    p2 = SSEParser(max_event_bytes=1000)  # many data lines of one event count together
    with pytest.raises(MalformedSSEError):
        for _ in range(20):
            p2.feed(b"data: " + b"z" * 100 + b"\n")


def test_body_cap_follows_max_tokens():
    from decodescope.probe.client import BODY_BYTES_NO_MAX_TOKENS, MIN_BODY_BYTES, body_cap

    assert body_cap({"max_tokens": 100}) == (264, MIN_BODY_BYTES)
    assert body_cap({"max_tokens": 32768}) == (65600, 32768 * 16 * 1024)
    assert body_cap({}) == (None, BODY_BYTES_NO_MAX_TOKENS)


def test_endless_stream_is_cut_at_the_chunk_cap_and_keeps_what_came():
    stream = Endless(sse(chunk(content="a")) * 10)
    tr = run_body(lambda r: httpx.Response(200, headers={"content-type": "text/event-stream"},
                                           stream=stream), {"max_tokens": 20})
    assert tr.error_kind == "ResponseTooLargeError" and "max_tokens" in tr.error
    assert len(tr.chunks) == 2 * 20 + 64 and stream.yielded < 20


def test_usage_beyond_the_cap_is_cut_too():
    blocks = [sse(chunk(content="a", usage=usage(n))) for n in (1, 50, 500)]
    tr = run_body(sse_response(blocks), {"max_tokens": 10})
    assert tr.error_kind == "ResponseTooLargeError" and "500 tokens by usage" in tr.error


def test_stream_without_events_is_cut_by_bytes():
    stream = Endless(b": ping\n" * 1000)
    tr = run_body(lambda r: httpx.Response(200, headers={"content-type": "text/event-stream"},
                                           stream=stream), {"max_tokens": 10})
    assert tr.error_kind == "ResponseTooLargeError" and "bytes" in tr.error
    assert stream.yielded * 7000 < 5 * 1024 * 1024


def test_non_sse_200_is_refused_at_the_headers_and_error_bodies_are_capped():
    page = Endless(b"<p>login</p>" * 100)
    tr = run_body(lambda r: httpx.Response(200, headers={"content-type": "text/html"}, stream=page),
                  {"max_tokens": 10})
    assert tr.error_kind == "NotSSEError" and "HTML" in tr.error and page.yielded == 0
    err = Endless(b"E" * 4096)
    tr = run_body(lambda r: httpx.Response(500, headers={"content-type": "text/plain"}, stream=err),
                  {"max_tokens": 10})
    assert tr.error_kind == "ServerError" and "HTTP 500" in tr.error
    assert err.yielded <= 64 * 1024 // 4096 + 1


def test_deadline_ends_a_request_that_never_answers():
    class Stall(httpx.AsyncByteStream):
        async def __aiter__(self):
            await asyncio.sleep(3600)
            yield b""

    async def handler(request):
        await asyncio.sleep(3600)  # no headers, ever
        return httpx.Response(200)

    async def go(h, deadline):
        async with httpx.AsyncClient(transport=httpx.MockTransport(h)) as c:
            return await stream_request(c, URL, "/v1/chat/completions", {"max_tokens": 5},
                                        deadline_s=deadline)
    t0 = time.monotonic()
    tr = asyncio.run(go(handler, 0.2))
    assert tr.error_kind == "UnreachableError" and "no answer within the deadline of 0.2 s" in tr.error
    tr = asyncio.run(go(lambda r: httpx.Response(200, headers={"content-type": "text/event-stream"},
                                                 stream=Stall()), 0.2))
    assert tr.error_kind == "StreamClosedError" and "did not finish within the deadline" in tr.error
    assert time.monotonic() - t0 < 30


def test_h1_chunk_size_line_that_never_ends_is_refused():
    def script(srv, c, i):
        srv.read_request(c)
        c.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                  b"transfer-encoding: chunked\r\n\r\n")
        with contextlib.suppress(OSError):
            for _ in range(100):
                c.sendall(b"f" * 4096)

    (tr,) = h1_run(Scripted(script))
    assert tr.error_kind == "StreamClosedError" and "too long" in tr.error
