"""The streaming client: one request, every chunk timestamped on arrival.

Seams: `client` (an httpx.AsyncClient — pass one with a MockTransport in tests) and `clock`.
Defaults: trust_env=False (environment proxies are ignored; see `decodescope doctor`), an
explicit `proxy` opts in.

Two transport paths, one interpretation (`_Recorder`): a client from `make_client` without a
proxy streams plain-http URLs through probe/h1.py (one read callback per socket read, kernel
receipt times on Linux); https, proxies and any other httpx client (MockTransport in tests) go
through httpx. docs/performance.md measures both against the simulator's ground truth.

Bounded (docs/faults.md): a response may carry what its request can produce and no more. A
200 that is not SSE is refused at its headers; an error body is read up to
MAX_ERROR_BODY_BYTES; a stream is cut (ResponseTooLargeError, exit 5) past TOKEN_MARGIN x
max_tokens + TOKEN_SLACK chunks or tokens, or past BYTES_PER_TOKEN bytes per max_tokens token.
No byte for `idle_timeout_s` ends a request, and so does `deadline_s` after it was sent.
`stream_limits(...)` sets both for the requests made inside it (the CLI's --timeout and
--deadline); the caller's own arguments win.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import json
import time
from collections.abc import Callable, Mapping
from itertools import starmap
from typing import Any

import httpx

# The time limits of every request live in the foundation (side requests obey them too);
# re-exported here for the callers of the streaming client.
from decodescope.edge import DEFAULT_LIMITS as DEFAULT_LIMITS
from decodescope.edge import (
    MAX_TOKEN_COUNT,
    bad_field,
    count_field,
    finite_or_none,
    seconds_field,
)
from decodescope.edge import READ_TIMEOUT_S as READ_TIMEOUT_S
from decodescope.edge import StreamLimits as StreamLimits
from decodescope.edge import current_limits as current_limits
from decodescope.edge import stream_limits as stream_limits
from decodescope.errors import (
    AuthError,
    EndpointError,
    MalformedSSEError,
    ModelNotServedError,
    NotSSEError,
    ProtocolError,
    ResourceLimitError,
    ResponseTooLargeError,
    ServerError,
    StreamClosedError,
    UnreachableError,
)
from decodescope.probe.h1 import H1Pool
from decodescope.probe.sse import SSEParser
from decodescope.records.trace import Chunk, RequestTrace

Clock = Callable[[], float]
_Row = tuple[float, str, str, int | None, str | None]  # a Chunk's fields, in order
_decode_json = json.JSONDecoder().decode  # json.loads minus its per-call checks
_loads: Callable[[bytes | str], Any]
try:  # every event of every stream is parsed: orjson takes a third of json's time here
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - orjson is a dependency; json still does the job
    _loads = json.loads
CONNECT_TIMEOUT_S = 10.0
# What one response may carry (see the module docstring). A server that ignores max_tokens is
# broken, not slow: 2x the tokens asked for, plus room for role / finish / usage chunks.
TOKEN_MARGIN = 2
TOKEN_SLACK = 64
# A vLLM chunk with continuous usage stats is ~350 bytes, ~3 KB with 20 top logprobs.
BYTES_PER_TOKEN = 16 * 1024
MIN_BODY_BYTES = 4 * 1024 * 1024
BODY_BYTES_NO_MAX_TOKENS = 256 * 1024 * 1024  # a request without max_tokens (not a caliber's)
MAX_ERROR_BODY_BYTES = 64 * 1024  # an error answer's text, enough for any JSON error
# File descriptors kept free beside one socket per connection (store, logs, scrapes, stdio).
FD_HEADROOM = 64


def body_cap(body: Mapping[str, Any]) -> tuple[int | None, int]:
    """(max chunks or tokens, max bytes) a response to this request body may carry."""
    mt = body.get("max_tokens", body.get("max_completion_tokens"))
    if not isinstance(mt, int) or isinstance(mt, bool) or mt < 1:
        return None, BODY_BYTES_NO_MAX_TOKENS
    return TOKEN_MARGIN * mt + TOKEN_SLACK, max(MIN_BODY_BYTES, BYTES_PER_TOKEN * mt)


def raise_open_file_limit(needed: int) -> int:
    """Raise the soft open-file limit towards `needed` (up to the hard limit); return the soft
    limit now in force (a large number where there is no such limit)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Windows
        return 1 << 30
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return 1 << 30 if soft == resource.RLIM_INFINITY else soft
    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        return soft
    return target


def too_many_files(exc: BaseException) -> bool:
    """True when an exception (or one it came from) is EMFILE / ENFILE."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, OSError) and seen.errno in (errno.EMFILE, errno.ENFILE):
            return True
        if "Too many open files" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def open_files_error(where: str, max_connections: int) -> ResourceLimitError:
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except ImportError:  # pragma: no cover
        soft = -1
    return ResourceLimitError(
        f"too many open files: {max_connections} connections need more than this process's "
        f"open-file limit ({soft})", where=where,
        remedy="Lower the caliber's concurrency, or raise the limit (`ulimit -n`) and rerun")


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


_FROZEN = False


def freeze_heap() -> None:
    """Move every object alive now (imported modules, the caliber, the run's set-up) out of the
    garbage collector's reach, once per process. A full collection walks every tracked object:
    over the probe's imported heap alone that is a ~5 ms pause, and it comes every few thousand
    chunks; frozen, it walks only what was made since. Those objects are never collected, so
    this runs once, before the first client streams, not per request."""
    global _FROZEN
    if not _FROZEN:
        _FROZEN = True
        gc.collect()
        gc.freeze()


def make_client(proxy: str | None = None, timeout_s: float | None = None,
                max_connections: int = 256) -> httpx.AsyncClient:
    """A client for streaming requests; `timeout_s` (no byte for this long) defaults to the
    current `stream_limits`. Raises the open-file limit so every connection gets a socket,
    and freezes the heap made so far (`freeze_heap`)."""
    freeze_heap()
    if timeout_s is None:
        timeout_s = current_limits().idle_timeout_s
    raise_open_file_limit(max_connections + FD_HEADROOM)
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
    deadline_s: float | None = None,
    max_body_bytes: int | None = None,
) -> RequestTrace:
    """Send one streaming request; return its trace. Failures come back as a trace with
    `error` set (never raised), so a caller can keep what was received; `raise_for_trace`
    turns such a trace into the matching exception.

    Every socket read is timestamped once (`clock()`), and each chunk it completes gets that
    time: a chunk's receipt time is when its last byte was read.

    Bounded: `deadline_s` (default: the current `stream_limits`) for the whole request, and
    what the body's max_tokens allows (`body_cap`; `max_body_bytes` overrides the bytes)."""
    url = base_url.rstrip("/") + path
    if deadline_s is None:
        deadline_s = current_limits().deadline_s
    max_chunks, cap_bytes = body_cap(body)
    t_send = clock()
    rec = _Recorder(url, body.get("model"), on_chunk, max_chunks=max_chunks,
                    max_body_bytes=max_body_bytes or cap_bytes)
    state, chunks = rec.state, rec.rows
    h1 = getattr(client, "h1", None)
    try:
        if isinstance(h1, H1Pool) and h1.accepts(url):
            content = json.dumps(body).encode()
            send = h1.stream(url, content, auth_headers(api_key), rec, clock)
        else:
            send = _stream_httpx(client, url, body, auth_headers(api_key), rec, clock)
        if deadline_s is not None:
            await asyncio.wait_for(send, deadline_s)
        else:
            await send
        for data in rec.parser.close_raw():
            rec.event(data, clock())
        if not state.done and state.finish_reason is None:
            raise StreamClosedError("server closed the stream before it finished",
                                    where=f"{url}, after {len(chunks)} chunks",
                                    remedy="Check the server log for a crash or restart; rerun the probe")
    except (EndpointError, ProtocolError, ResourceLimitError) as exc:
        return state.trace(t_send, rec.t_headers, chunks, rec.status, clock(), exc)
    except asyncio.TimeoutError:
        cls0 = UnreachableError if rec.t_headers is None else StreamClosedError
        what = "no answer" if rec.t_headers is None else "the stream did not finish"
        err0 = cls0(f"{what} within the deadline of {deadline_s:g} s", where=f"{url}, after {len(chunks)} chunks",
                    remedy="The server is stalled or overloaded; check its log, or give a longer --deadline")
        return state.trace(t_send, rec.t_headers, chunks, rec.status, clock(), err0)
    except httpx.ConnectError as exc:
        if too_many_files(exc):
            limit = getattr(h1, "max_connections", 0) if isinstance(h1, H1Pool) else 0
            return state.trace(t_send, rec.t_headers, chunks, rec.status, clock(),
                               open_files_error(url, limit or 1))
        err = UnreachableError(f"cannot connect: {_reason(exc)}", where=url,
                               remedy="Is the server running and listening on that host:port? Try `decodescope doctor URL`")
        return state.trace(t_send, rec.t_headers, chunks, rec.status, clock(), err)
    except httpx.TimeoutException as exc:
        cls = UnreachableError if rec.t_headers is None else StreamClosedError
        err2 = cls(f"timed out ({type(exc).__name__}: {_reason(exc)})", where=url,
                   remedy="The server is stalled or overloaded; check its log, or give a longer --timeout")
        return state.trace(t_send, rec.t_headers, chunks, rec.status, clock(), err2)
    except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
        err3 = StreamClosedError(f"connection broke mid-stream: {_reason(exc)}",
                                 where=f"{url}, after {len(chunks)} chunks",
                                 remedy="Check the server log for a crash or restart; rerun the probe")
        return state.trace(t_send, rec.t_headers, chunks, rec.status, clock(), err3)
    except httpx.HTTPError as exc:
        err4 = UnreachableError(f"HTTP failure: {_reason(exc)}", where=url)
        return state.trace(t_send, rec.t_headers, chunks, rec.status, clock(), err4)
    except OSError as exc:
        if not too_many_files(exc):
            raise
        return state.trace(t_send, rec.t_headers, chunks, rec.status, clock(),
                           open_files_error(url, getattr(h1, "max_connections", 1)))
    return state.trace(t_send, rec.t_headers, chunks, rec.status, clock(), None)


async def _stream_httpx(client: httpx.AsyncClient, url: str, body: dict[str, Any],
                        headers: dict[str, str], rec: _Recorder, clock: Clock) -> None:
    async with client.stream("POST", url, json=body, headers=headers) as resp:
        rec.on_head(resp.status_code, resp.headers, clock())  # raises for a 200 that is not SSE
        if not rec.sse:  # an error answer: on_body raises once it has enough text to say why
            async for block in resp.aiter_bytes():
                rec.on_body(block, clock())
            rec.on_end(clock())
            return
        async for block in resp.aiter_raw():
            rec.on_body(block, clock())


class _Recorder:
    """Receives one response (head, body blocks, end) from either transport path and turns
    its SSE events into chunks. Raises the endpoint and protocol errors."""

    def __init__(self, url: str, model: Any, on_chunk: Callable[[Chunk], None] | None, *,
                 max_chunks: int | None = None,
                 max_body_bytes: int = BODY_BYTES_NO_MAX_TOKENS) -> None:
        self.url = url
        self.max_chunks = max_chunks
        self.max_body_bytes = max_body_bytes
        self.body_bytes = 0
        self.model = model
        self.on_chunk = on_chunk
        self.state = _StreamState()
        self.state.max_tokens = max_chunks if max_chunks is not None else -1
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
        self._location = ""
        self._body: list[bytes] = []

    def on_head(self, status: int, headers: Mapping[str, str], t: float) -> None:
        self.t_headers, self.status = t, status
        self._ctype = headers.get("content-type", "")
        self._location = headers.get("location", "")  # a redirect says where
        self.sse = status == 200 and "text/event-stream" in self._ctype.lower()
        if self.sse:
            self.state.request_id = headers.get("x-request-id")
        elif status == 200:  # refused here: an endless page must not be read at all
            ctype = self._ctype
            kind = "HTML" if "html" in ctype.lower() else ctype or "no content-type"
            raise NotSSEError(f"server answered a streaming request with {kind}, not SSE",
                              where=self.url,
                              remedy="Point the URL at the OpenAI-compatible server root (not a proxy or web UI)")

    def on_body(self, block: bytes, t: float) -> None:
        self.body_bytes += len(block)
        if not self.sse:
            self._body.append(block)
            if self.body_bytes >= MAX_ERROR_BODY_BYTES:  # enough to say why; stop reading
                self.on_end(t)
            return
        if self.body_bytes > self.max_body_bytes:
            raise ResponseTooLargeError(
                f"the stream passed {self.max_body_bytes} bytes, more than the request can produce",
                where=f"{self.url}, after {len(self.rows)} chunks",
                remedy="The server ignores max_tokens or sends junk; check the server or a proxy in between")
        on_event, rows, on_chunk = self.state.on_event, self.rows, self.on_chunk
        cap = self.max_chunks if self.max_chunks is not None else -1
        for data in self.parser.feed_raw(block):  # self.event, inlined: runs for every chunk
            row = on_event(data, t, self.url)
            if row is not None:
                if len(rows) == cap:
                    self._too_many(cap)
                rows.append(row)
                if on_chunk is not None:
                    on_chunk(Chunk(*row))
        if cap >= 0 and self.state.last_completion_tokens > cap:
            self._too_many(cap)

    def _too_many(self, cap: int) -> None:
        raise ResponseTooLargeError(
            f"the stream passed {cap} chunks or tokens, more than max_tokens allows "
            f"({len(self.rows)} chunks, {self.state.last_completion_tokens} tokens by usage)",
            where=self.url,
            remedy="The server ignores max_tokens; check the engine's version and options")

    def event(self, data: bytes, t: float) -> None:
        row = self.state.on_event(data, t, self.url)
        if row is not None:
            self.rows.append(row)
            if self.on_chunk is not None:
                self.on_chunk(Chunk(*row))

    def on_end(self, t: float) -> None:
        if self.sse:
            return
        raw = b"".join(self._body)[:MAX_ERROR_BODY_BYTES]
        if 300 <= (self.status or 0) < 400:
            raise _redirect_error(self.status or 0, self._location, self.url)
        raise _http_error(self.status or 0, raw.decode("utf-8", "replace"), self.url, self.model)


def _reason(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


def _redirect_error(status: int, location: str, url: str) -> EndpointError:
    """A 3xx answer to a completions request: not followed (the prompt would be sent twice and
    the timing would include the hop), said as a redirect with where to (redacted)."""
    from urllib.parse import urljoin, urlsplit, urlunsplit

    from decodescope.redact import redact_url, strip_controls

    if not location:
        return EndpointError(f"the server answered with a redirect (HTTP {status}) without a "
                             "Location", where=url,
                             remedy="Give decodescope the server's final URL (where this one "
                                    "redirects to); redirects are not followed")
    target = urljoin(url, strip_controls(location.strip()))
    path, t = urlsplit(url).path, urlsplit(target)
    base = (urlunsplit((t.scheme, t.netloc, t.path[: -len(path)], "", ""))
            if path and t.path.endswith(path) else target)  # the server root it moved to
    return EndpointError(f"the server redirected the request (HTTP {status}) to "
                         f"{redact_url(target)[:300]}", where=url,
                         remedy=f"Use the final URL: give decodescope {redact_url(base)[:300]} "
                                "instead (redirects are not followed: the prompt would be sent "
                                "again and the hop timed)")


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
        self.max_tokens = -1  # the most tokens the request allows (body_cap); -1: no cap
        self.request_id: str | None = None

    def on_event(self, data: bytes | str, t: float, url: str) -> _Row | None:
        """The chunk an event carries, as (t_recv_s, content, reasoning, tokens,
        finish_reason): Chunk's fields in order."""
        try:
            obj = _loads(data)
        except ValueError:
            obj = self._decode_slow(data, url)
            if obj is None:
                return None
        if type(obj) is not dict:
            raise MalformedSSEError(f"SSE data is not a JSON object: {_text(data)[:80]!r}", where=url)
        choices = obj.get("choices")
        if "error" in obj and not choices:
            err = obj["error"]
            msg = err.get("message") if isinstance(err, dict) else str(err)
            raise ServerError(f"server sent an error mid-stream: {msg}", where=url)
        if self.request_id is None and isinstance(obj.get("id"), str):
            self.request_id = obj["id"]
        if "timings" in obj and isinstance(obj["timings"], dict):
            self.timings = checked_timings(obj["timings"], url)
        tokens: int | None = None
        usage = obj.get("usage")
        if usage is not None and type(usage) is dict:
            ct, pt, tt = (usage.get("completion_tokens"), usage.get("prompt_tokens"),
                          usage.get("total_tokens"))
            if not (len(usage) == 3 and type(ct) is int and type(pt) is int and type(tt) is int
                    and 0 <= ct <= MAX_TOKEN_COUNT and 0 <= pt <= MAX_TOKEN_COUNT
                    and 0 <= tt <= MAX_TOKEN_COUNT):
                usage = checked_usage(usage, url)  # other shapes: every field checked
                ct = usage.get("completion_tokens")
            if type(ct) is int and ct > self.max_tokens >= 0:  # refused before it is kept:
                raise self.too_many(ct, url)  # the trace holds no count past the cap
            self.usage = usage
            if type(ct) is int:
                tokens = ct - self.last_completion_tokens
                self.last_completion_tokens = ct
        content = reasoning = ""
        finish = None
        if choices and type(choices) is list:
            ch = choices[0]
            if type(ch) is not dict:
                ch = {}
            delta = ch.get("delta")
            if type(delta) is dict:
                content = delta.get("content") or ""
                reasoning = delta.get("reasoning_content") or delta.get("reasoning") or ""
            elif isinstance(ch.get("text"), str):
                content = ch["text"]
            finish = ch.get("finish_reason")
            if finish:
                self.finish_reason = finish
            if type(content) is not str or type(reasoning) is not str \
                    or (finish is not None and type(finish) is not str):
                raise _bad_text(content, reasoning, finish, url)
        elif choices is None and usage is None and "timings" not in obj:
            raise MalformedSSEError(f"SSE event is not a completion chunk: {_text(data)[:80]!r}", where=url)
        return (t, content, reasoning, tokens, finish)

    def too_many(self, ct: int, url: str) -> ResponseTooLargeError:
        return ResponseTooLargeError(
            f"the stream passed {self.max_tokens} chunks or tokens, more than max_tokens "
            f"allows ({ct} tokens by usage)", where=url,
            remedy="The server ignores max_tokens; check the engine's version and options")

    def _decode_slow(self, data: bytes | str, url: str) -> Any:
        """What orjson refused: [DONE] (None), or JSON that json still reads (invalid UTF-8
        replaced, NaN, huge integers), or a MalformedSSEError."""
        text = _text(data)
        if text.strip() == "[DONE]":
            self.done = True
            return None
        try:
            return _decode_json(text)
        except ValueError:
            raise MalformedSSEError(f"SSE data is not JSON: {text[:80]!r}", where=url,
                                    remedy="The server or a proxy corrupts the stream; probe the server directly") from None

    def trace(self, t_send: float, t_headers: float | None, chunks: list[_Row],
              status: int | None, t_done: float, error: Exception | None) -> RequestTrace:
        usage = self.usage or {}
        details = usage.get("completion_tokens_details") or {}
        return RequestTrace(
            t_send_s=t_send,
            t_headers_s=t_headers,
            chunks=_chunks(chunks),
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


# Fields of `usage` and of llama.cpp's `timings` that counts or durations are taken from:
# each is checked at the edge (type, sign, range) before anything derives from it; a bad one
# fails the request with a ProtocolError (exit 5) and the trace keeps what came before it.
USAGE_COUNTS = ("prompt_tokens", "completion_tokens", "total_tokens")
USAGE_DETAIL_COUNTS = ("reasoning_tokens", "cached_tokens", "accepted_prediction_tokens",
                       "rejected_prediction_tokens", "audio_tokens")
TIMINGS_COUNTS = ("prompt_n", "predicted_n", "draft_n", "draft_n_accepted", "cache_n")
TIMINGS_MS = ("prompt_ms", "predicted_ms")


def checked_usage(usage: dict[str, Any], url: str) -> dict[str, Any]:
    """`usage` with its counts checked (ints from 0 to edge.MAX_TOKEN_COUNT; an integral
    float becomes an int) and every other non-finite number made None. Raises ProtocolError."""
    out = dict(usage)
    for k in USAGE_COUNTS:
        if k in out:
            out[k] = count_field(out[k], f"usage.{k}", url)
    for name in ("completion_tokens_details", "prompt_tokens_details"):
        det = out.get(name)
        if isinstance(det, dict):
            out[name] = {k: (count_field(v, f"usage.{name}.{k}", url)
                             if k in USAGE_DETAIL_COUNTS else v) for k, v in det.items()}
    return finite_or_none(out)


def checked_timings(timings: dict[str, Any], url: str) -> dict[str, Any]:
    """llama.cpp's `timings` with its counts and durations checked, every other non-finite
    number made None. Raises ProtocolError naming the field."""
    out = dict(timings)
    for k in TIMINGS_COUNTS:
        if k in out:
            out[k] = count_field(out[k], f"timings.{k}", url)
    for k in TIMINGS_MS:
        if k in out:
            ms = seconds_field(out[k], f"timings.{k}", url, scale=1e-3)
            out[k] = None if ms is None else ms * 1e3
    return finite_or_none(out)


def _bad_text(content: Any, reasoning: Any, finish: Any, url: str) -> ProtocolError:
    """The first of a chunk's text fields that is not text (a number, an object, a list)."""
    for name, v in (("content", content), ("reasoning", reasoning), ("finish_reason", finish)):
        if type(v) is not str and not (name == "finish_reason" and v is None):
            return bad_field(f"a chunk's {name}", v, "text", url)
    raise AssertionError("unreachable")  # pragma: no cover


def _chunks(rows: list[_Row]) -> tuple[Chunk, ...]:
    """Chunk objects of a finished stream, built with the collector paused: two tracked
    allocations each (object and __dict__), no cycles, so collections in between would only
    walk them; thousands of them otherwise set off young collections every few hundred and a
    full one as the heap grows."""
    if not gc.isenabled():
        return tuple(starmap(Chunk, rows))
    gc.disable()
    try:
        return tuple(starmap(Chunk, rows))
    finally:
        gc.enable()


def _text(data: bytes | str) -> str:
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else data


def _one_line(error: Exception | None) -> str | None:
    if error is None:
        return None
    one_line = getattr(error, "one_line", None)
    return one_line() if callable(one_line) else str(error)


ERROR_CLASSES: dict[str, type[Exception]] = {
    c.__name__: c for c in (AuthError, EndpointError, MalformedSSEError, ModelNotServedError,
                            NotSSEError, ProtocolError, ResourceLimitError, ResponseTooLargeError,
                            ServerError, StreamClosedError, UnreachableError)
}


def raise_for_trace(trace: RequestTrace) -> None:
    """Re-raise the error recorded in a failed trace as its exception class."""
    if trace.error is None:
        return
    cls = ERROR_CLASSES.get(trace.error_kind or "", ProtocolError)
    raise cls(trace.error)
