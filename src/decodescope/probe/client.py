"""The streaming client: one request, every chunk timestamped on arrival.

Seams: `client` (an httpx.AsyncClient — pass one with a MockTransport in tests) and `clock`.
Defaults: trust_env=False (environment proxies are ignored; see `decodescope doctor`), an
explicit `proxy` opts in.

Two transport paths, one interpretation (`_Recorder`): a client from `make_client` without a
proxy streams plain-http URLs through probe/h1.py (one read callback per socket read, kernel
receipt times on Linux); https, proxies and any other httpx client (MockTransport in tests) go
through httpx. docs/performance.md measures both against the simulator's ground truth.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from decodescope.errors import (
    AuthError,
    EndpointError,
    MalformedSSEError,
    ModelNotServedError,
    NotSSEError,
    ProtocolError,
    ServerError,
    StreamClosedError,
    UnreachableError,
)
from decodescope.probe.h1 import H1Pool
from decodescope.probe.sse import SSEParser
from decodescope.probe.trace import Chunk, RequestTrace

Clock = Callable[[], float]
_Row = tuple[float, str, str, int | None, str | None]  # a Chunk's fields, in order
_decode_json = json.JSONDecoder().decode  # json.loads minus its per-call checks (hot path)
CONNECT_TIMEOUT_S = 10.0
# No byte for this long mid-stream counts as a stalled server (long prefills of 64K prompts
# on a busy server can take minutes before the first byte).
READ_TIMEOUT_S = 600.0


class ProbeClient(httpx.AsyncClient):
    """An httpx.AsyncClient that streams plain-http requests through the lean HTTP/1.1 path
    (probe/h1.py); https, proxies and everything else go through httpx itself."""

    def __init__(self, *args: Any, h1: H1Pool | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.h1 = h1

    async def aclose(self) -> None:
        if self.h1 is not None:
            self.h1.close()
        await super().aclose()

    async def __aexit__(self, *exc: Any) -> None:
        if self.h1 is not None:
            self.h1.close()
        await super().__aexit__(*exc)


def make_client(proxy: str | None = None, timeout_s: float = READ_TIMEOUT_S,
                max_connections: int = 256) -> httpx.AsyncClient:
    return ProbeClient(
        trust_env=False,
        proxy=proxy,
        timeout=httpx.Timeout(timeout_s, connect=CONNECT_TIMEOUT_S),
        limits=httpx.Limits(max_connections=max_connections,
                            max_keepalive_connections=max_connections),
        h1=None if proxy else H1Pool(CONNECT_TIMEOUT_S, timeout_s, max_connections),
    )


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


async def stream_request(
    client: httpx.AsyncClient,
    base_url: str,
    path: str,
    body: dict[str, Any],
    *,
    api_key: str | None = None,
    clock: Clock = time.perf_counter,
    on_chunk: Callable[[Chunk], None] | None = None,
) -> RequestTrace:
    """Send one streaming request; return its trace. Failures come back as a trace with
    `error` set (never raised), so a caller can keep what was received; `raise_for_trace`
    turns such a trace into the matching exception.

    Every socket read is timestamped once (`clock()`), and each chunk it completes gets that
    time: a chunk's receipt time is when its last byte was read."""
    url = base_url.rstrip("/") + path
    t_send = clock()
    rec = _Recorder(url, body.get("model"), on_chunk)
    state, chunks = rec.state, rec.rows
    h1 = getattr(client, "h1", None)
    try:
        if isinstance(h1, H1Pool) and h1.accepts(url):
            content = json.dumps(body).encode()
            await h1.stream(url, content, auth_headers(api_key), rec, clock)
        else:
            await _stream_httpx(client, url, body, auth_headers(api_key), rec, clock)
        for data in rec.parser.close():
            rec.event(data, clock())
        if not state.done and state.finish_reason is None:
            raise StreamClosedError("server closed the stream before it finished",
                                    where=f"{url}, after {len(chunks)} chunks",
                                    remedy="Check the server log for a crash or restart; rerun the probe")
    except (EndpointError, ProtocolError) as exc:
        return state.trace(t_send, rec.t_headers, chunks, rec.status, clock(), exc)
    except httpx.ConnectError as exc:
        err = UnreachableError(f"cannot connect: {_reason(exc)}", where=url,
                               remedy="Is the server running and listening on that host:port? Try `decodescope doctor URL`")
        return state.trace(t_send, rec.t_headers, chunks, rec.status, clock(), err)
    except httpx.TimeoutException as exc:
        cls = UnreachableError if rec.t_headers is None else StreamClosedError
        err2 = cls(f"timed out ({type(exc).__name__})", where=url,
                   remedy="The server is stalled or overloaded; check its log")
        return state.trace(t_send, rec.t_headers, chunks, rec.status, clock(), err2)
    except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
        err3 = StreamClosedError(f"connection broke mid-stream: {_reason(exc)}",
                                 where=f"{url}, after {len(chunks)} chunks",
                                 remedy="Check the server log for a crash or restart; rerun the probe")
        return state.trace(t_send, rec.t_headers, chunks, rec.status, clock(), err3)
    except httpx.HTTPError as exc:
        err4 = UnreachableError(f"HTTP failure: {_reason(exc)}", where=url)
        return state.trace(t_send, rec.t_headers, chunks, rec.status, clock(), err4)
    return state.trace(t_send, rec.t_headers, chunks, rec.status, clock(), None)


async def _stream_httpx(client: httpx.AsyncClient, url: str, body: dict[str, Any],
                        headers: dict[str, str], rec: _Recorder, clock: Clock) -> None:
    async with client.stream("POST", url, json=body, headers=headers) as resp:
        rec.on_head(resp.status_code, resp.headers, clock())
        if not rec.sse:
            rec.on_body(await resp.aread(), clock())
            rec.on_end(clock())
            return
        async for block in resp.aiter_raw():
            rec.on_body(block, clock())


class _Recorder:
    """Receives one response (head, body blocks, end) from either transport path and turns
    its SSE events into chunks. Raises the endpoint and protocol errors."""

    def __init__(self, url: str, model: Any, on_chunk: Callable[[Chunk], None] | None) -> None:
        self.url = url
        self.model = model
        self.on_chunk = on_chunk
        self.state = _StreamState()
        # Chunks as plain tuples while streaming: CPython stops tracking a tuple of atomic
        # values after one young-generation pass, so thousands of them do not lengthen full
        # GC pauses (a 20-30 ms pause mid-stream would delay reads); Chunk objects are built
        # once, in trace().
        self.rows: list[_Row] = []
        self.parser = SSEParser()
        self.t_headers: float | None = None
        self.status: int | None = None
        self.sse = False
        self._ctype = ""
        self._body: list[bytes] = []

    def on_head(self, status: int, headers: Mapping[str, str], t: float) -> None:
        self.t_headers, self.status = t, status
        self._ctype = headers.get("content-type", "")
        self.sse = status == 200 and "text/event-stream" in self._ctype
        if self.sse:
            self.state.request_id = headers.get("x-request-id")

    def on_body(self, block: bytes, t: float) -> None:
        if not self.sse:
            self._body.append(block)
            return
        on_event, rows, on_chunk = self.state.on_event, self.rows, self.on_chunk
        for data in self.parser.feed(block):  # self.event, inlined: this runs for every chunk
            row = on_event(data, t, self.url)
            if row is not None:
                rows.append(row)
                if on_chunk is not None:
                    on_chunk(Chunk(*row))

    def event(self, data: str, t: float) -> None:
        row = self.state.on_event(data, t, self.url)
        if row is not None:
            self.rows.append(row)
            if self.on_chunk is not None:
                self.on_chunk(Chunk(*row))

    def on_end(self, t: float) -> None:
        if self.sse:
            return
        raw = b"".join(self._body)
        if self.status != 200:
            raise _http_error(self.status or 0, raw.decode("utf-8", "replace"), self.url, self.model)
        ctype = self._ctype
        head = raw[:200].decode("utf-8", "replace")
        kind = "HTML" if ("html" in ctype or head.lstrip().startswith("<")) else ctype or "no content-type"
        raise NotSSEError(f"server answered a streaming request with {kind}, not SSE",
                          where=self.url, remedy="Point the URL at the OpenAI-compatible server root (not a proxy or web UI)")


def _reason(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


def _http_error(status: int, text: str, url: str, model: Any) -> Exception:
    snippet = " ".join(text.split())[:160]
    if status in (401, 403):
        return AuthError(f"server refused the API key (HTTP {status})", where=url,
                         remedy="Pass the key with --api-key-env VAR (the name of an environment variable holding it)")
    if status == 404:
        if "model" in text.lower():
            return ModelNotServedError(f"model {model!r} is not served (HTTP 404: {snippet})", where=url,
                                       remedy="List served models with `curl URL/v1/models` and pass --model")
        return EndpointError("path not found (HTTP 404)", where=url,
                             remedy="Give the server root as URL, e.g. http://127.0.0.1:8000")
    if status == 429 or status >= 500:
        return ServerError(f"server error HTTP {status}: {snippet}", where=url,
                           remedy="The server is overloaded or failing; check its log and rerun")
    if status == 400 and "model" in text.lower() and ("not found" in text.lower() or "does not exist" in text.lower()):
        return ModelNotServedError(f"model {model!r} is not served (HTTP 400: {snippet})", where=url,
                                   remedy="List served models with `curl URL/v1/models` and pass --model")
    return ProtocolError(f"server rejected the request (HTTP {status}: {snippet})", where=url,
                         remedy="Check the caliber's sampling options against what this server accepts")


class _StreamState:
    """Interprets the data payloads of one stream."""

    def __init__(self) -> None:
        self.done = False
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.timings: dict[str, Any] | None = None
        self.last_completion_tokens = 0
        self.request_id: str | None = None

    def on_event(self, data: str, t: float, url: str) -> _Row | None:
        """The chunk an event carries, as (t_recv_s, content, reasoning, tokens,
        finish_reason): Chunk's fields in order."""
        try:
            obj = _decode_json(data)
        except ValueError:
            if data.strip() == "[DONE]":
                self.done = True
                return None
            raise MalformedSSEError(f"SSE data is not JSON: {data[:80]!r}", where=url,
                                    remedy="The server or a proxy corrupts the stream; probe the server directly") from None
        if not isinstance(obj, dict):
            raise MalformedSSEError(f"SSE data is not a JSON object: {data[:80]!r}", where=url)
        if "error" in obj and not obj.get("choices"):
            err = obj["error"]
            msg = err.get("message") if isinstance(err, dict) else str(err)
            raise ServerError(f"server sent an error mid-stream: {msg}", where=url)
        if self.request_id is None and isinstance(obj.get("id"), str):
            self.request_id = obj["id"]
        if isinstance(obj.get("timings"), dict):
            self.timings = obj["timings"]
        tokens: int | None = None
        usage = obj.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
            ct = usage.get("completion_tokens")
            if isinstance(ct, int):
                tokens = ct - self.last_completion_tokens
                self.last_completion_tokens = ct
        content = reasoning = ""
        finish = None
        choices = obj.get("choices")
        if isinstance(choices, list) and choices:
            ch = choices[0] if isinstance(choices[0], dict) else {}
            delta = ch.get("delta")
            if isinstance(delta, dict):
                content = delta.get("content") or ""
                reasoning = delta.get("reasoning_content") or delta.get("reasoning") or ""
            elif isinstance(ch.get("text"), str):
                content = ch["text"]
            finish = ch.get("finish_reason")
            if finish:
                self.finish_reason = finish
        elif choices is None and usage is None and "timings" not in obj:
            raise MalformedSSEError(f"SSE event is not a completion chunk: {data[:80]!r}", where=url)
        return (t, content, reasoning, tokens, finish)

    def trace(self, t_send: float, t_headers: float | None, chunks: list[_Row],
              status: int | None, t_done: float, error: Exception | None) -> RequestTrace:
        usage = self.usage or {}
        details = usage.get("completion_tokens_details") or {}
        return RequestTrace(
            t_send_s=t_send,
            t_headers_s=t_headers,
            chunks=tuple(Chunk(*row) for row in chunks),
            status_code=status,
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
            reasoning_tokens=details.get("reasoning_tokens") if isinstance(details, dict) else None,
            finish_reason=self.finish_reason,
            error=_one_line(error),
            error_kind=type(error).__name__ if error else None,
            usage=self.usage,
            timings=self.timings,
            request_id=self.request_id,
            t_done_s=t_done,
        )


def _one_line(error: Exception | None) -> str | None:
    if error is None:
        return None
    one_line = getattr(error, "one_line", None)
    return one_line() if callable(one_line) else str(error)


ERROR_CLASSES: dict[str, type[Exception]] = {
    c.__name__: c for c in (AuthError, EndpointError, MalformedSSEError, ModelNotServedError,
                            NotSSEError, ProtocolError, ServerError, StreamClosedError,
                            UnreachableError)
}


def raise_for_trace(trace: RequestTrace) -> None:
    """Re-raise the error recorded in a failed trace as its exception class."""
    if trace.error is None:
        return
    cls = ERROR_CLASSES.get(trace.error_kind or "", ProtocolError)
    raise cls(trace.error)
