"""The streaming client against scripted servers (httpx MockTransport) and a scripted clock."""

import asyncio
import json

import httpx
import pytest

from decodescope.probe.client import raise_for_trace, stream_request
from decodescope.probe.metrics import compute
from decodescope.probe.sse import SSEParser

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
