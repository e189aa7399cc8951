"""The client's fast paths give what the general paths give: the SSE parser's whole-event
slice, orjson with its json fallback, the one-chunk read in h1, the pool's epoll descriptor
(across event loops, and many streams at once), and the collector pause around Chunk objects.
No timing is asserted here (speed belongs to bench/)."""

import asyncio
import gc
import json
import time

import pytest
from test_probe_client import SSE_HEAD, Scripted, chunk, hchunk, spec_stream, usage

from decodescope.errors import MalformedSSEError
from decodescope.probe import client as cl
from decodescope.probe.client import make_client, stream_request
from decodescope.probe.sse import SSEParser


def general(blocks):
    """Events of `blocks` through the line-splitting path only (a byte at a time)."""
    p, out = SSEParser(), []
    for b in blocks:
        for i in range(len(b)):
            out += p.feed_raw(b[i:i + 1])
    return out + p.close_raw()


@pytest.mark.parametrize("blocks", [
    [b'data: {"a":1}\n\n'],
    [b'data: {"a":1}\n\n', b'data: {"b":2}\n\n'],
    [b'data: {"a":1}\r\n\r\n'],
    [b'data: {"a":1}\r\n\n'],
    [b"data: \n\n"],
    [b'data: {"a":\n', b'data: 1}\n\n'],
    [b'data: {"a":1}\n\ndata: {"b":2}\n\n'],
    [b": keepalive\n\n", b'data: {"a":1}\n\n'],
    [b'data: {"a"', b':1}\n\n', b'data: {"c":3}\n\n'],
    [b'data: {"a":1}\n\n', b"data: [DONE]\n\n"],
])
def test_sse_whole_event_slice_equals_the_line_parser(blocks):
    p = SSEParser()
    fast = [e for b in blocks for e in p.feed_raw(b)] + p.close_raw()
    assert fast == general(blocks)
    q = SSEParser()
    assert [e for b in blocks for e in q.feed(b)] + q.close() == [e.decode() for e in fast]


def test_events_orjson_refuses_are_read_as_json_would():
    st = cl._StreamState()
    bad_utf8 = b'{"id":"c","choices":[{"delta":{"content":"a\xffb"}}],"usage":{"completion_tokens":1}}'
    row = st.on_event(bad_utf8, 1.0, "u")
    assert row is not None and row[1] == "a\ufffdb" and row[3] == 1
    nan = b'{"id":"c","choices":[{"delta":{"content":"x"}}],"usage":{"completion_tokens":2},"t":NaN}'
    row = st.on_event(nan, 2.0, "u")
    assert row is not None and row[1] == "x" and row[3] == 1
    assert st.on_event(b"[DONE]", 3.0, "u") is None and st.done
    with pytest.raises(MalformedSSEError, match="not JSON"):
        cl._StreamState().on_event(b"{nope", 1.0, "u")
    with pytest.raises(MalformedSSEError, match="not a JSON object"):
        cl._StreamState().on_event(b"[1, 2]", 1.0, "u")


def test_bytes_and_text_events_give_the_same_row():
    ev = json.dumps(chunk(content="hé", reasoning="r", usage=usage(3), finish="stop"))
    a, b = cl._StreamState(), cl._StreamState()
    assert a.on_event(ev.encode(), 1.0, "u") == b.on_event(ev, 1.0, "u") == (1.0, "hé", "r", 3, "stop")
    assert a.request_id == b.request_id == "cmpl-1" and a.finish_reason == "stop"


def test_chunk_objects_are_built_with_the_collector_back_on():
    assert gc.isenabled()
    rows = [(float(i), "c", "", 1, None) for i in range(1000)]
    chunks = cl._chunks(rows)
    assert gc.isenabled() and len(chunks) == 1000 and chunks[5].t_recv_s == 5.0
    gc.disable()
    try:
        assert len(cl._chunks(rows)) == 1000 and not gc.isenabled()  # left as it was
    finally:
        gc.enable()


def test_freeze_heap_runs_once():
    cl.freeze_heap()
    frozen = gc.get_freeze_count()
    cl.freeze_heap()
    assert gc.get_freeze_count() == frozen and gc.isenabled()


def test_h1_one_whole_chunk_per_read_and_chunk_extensions():
    """Each HTTP chunk sent on its own (the fast path), one with a chunk extension (the
    general path), and the last step's several chunks in one read."""
    events, total = spec_stream()

    def script(srv, c, i):
        srv.read_request(c)
        c.sendall(SSE_HEAD)
        for k, e in enumerate(events[:-2]):
            framed = hchunk(e)
            if k == 2:
                framed = b"%x;ext=1\r\n%s\r\n" % (len(e), e)
            c.sendall(framed)
            time.sleep(0.002)
        c.sendall(b"".join(hchunk(e) for e in events[-2:]) + b"0\r\n\r\n")

    srv = Scripted(script)
    try:
        (tr,) = asyncio.run(_streams(srv.url, 1))
    finally:
        srv.close()
    assert tr.ok, tr.error
    assert tr.completion_tokens == total and sum(c.tokens or 0 for c in tr.chunks) == total
    assert [c.content for c in tr.chunks if c.content] == ["c", "ccc", "cccc", "cc"]


async def _streams(url, n, client=None):
    async def go(c):
        return await asyncio.gather(*[stream_request(c, url, "/v1/chat/completions", {"model": "m"})
                                      for _ in range(n)])
    if client is not None:
        return await go(client)
    async with make_client() as c:
        return await go(c)


def test_h1_many_streams_at_once_through_one_pool():
    events, total = spec_stream(sizes=(2,) * 30)
    wire = [hchunk(e) for e in events]

    def script(srv, c, i):
        srv.read_request(c)
        c.sendall(SSE_HEAD)
        for w in wire:
            c.sendall(w)
            time.sleep(0.001)
        c.sendall(b"0\r\n\r\n")

    srv = Scripted(script)
    try:
        traces = asyncio.run(_streams(srv.url, 12))
    finally:
        srv.close()
    assert all(t.ok for t in traces), [t.error for t in traces]
    assert [t.completion_tokens for t in traces] == [total] * 12
    for t in traces:
        times = [c.t_recv_s for c in t.chunks]
        assert times == sorted(times)


def test_h1_pool_serves_a_second_event_loop():
    """A client made once and used from two asyncio.run calls: the pool's epoll descriptor
    moves to the loop that is running."""
    events, total = spec_stream()
    wire = SSE_HEAD + b"".join(hchunk(e) for e in events) + b"0\r\n\r\n"

    def script(srv, c, i):
        while srv.read_request(c) is not None:
            c.sendall(wire)

    srv = Scripted(script)
    client = make_client()
    try:
        first = asyncio.run(_streams(srv.url, 2, client))
        second = asyncio.run(_streams(srv.url, 2, client))
        asyncio.run(client.aclose())
    finally:
        srv.close()
    assert all(t.ok for t in first + second), [t.error for t in first + second]
    assert {t.completion_tokens for t in first + second} == {total}

