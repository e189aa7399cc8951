"""What comes from outside, taken in at the edge: bounded side requests and checked numbers.

Side requests are every request decodescope makes to a server besides the measured stream:
`/v1/models`, `/version`, `/props`, `/get_server_info`, `/server_info`, `/health`, `/metrics`,
`POST /tokenize`. Each goes through `side_request`, which

- reads at most what the endpoint can legitimately return (`SideEndpoint.max_bytes`, one
  named limit per endpoint with its reason); a larger Content-Length is refused before the body
  is read, a body that passes the limit is cut there (ResponseTooLargeError, exit 5);
- holds the whole request to one deadline, from send to the last byte: a server that trickles a
  byte a second is cut at the deadline, not only by the per-read timeout (exit 4 when nothing
  answered, exit 5 when an answer began and did not finish);
- takes the CLI's `--timeout` (no byte for this long) and `--deadline` (the whole request) from
  `stream_limits`, the same limits the measured stream runs under.

Transport failures (refused, reset) stay httpx exceptions: each caller decides whether a missing
endpoint is fatal. Numbers a server sends are checked by `count_field` / `seconds_field` (type,
sign, range) before anything derives from them; a bad one is a ProtocolError (exit 5) that names
the field and the endpoint.
"""

from __future__ import annotations

import math
import threading
import zlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any

import httpx

from decodescope.errors import ProtocolError, ResponseTooLargeError, UnreachableError

# ---- limits of time -------------------------------------------------------------------------

# No byte for this long mid-stream counts as a stalled server (long prefills of 64K prompts
# on a busy server can take minutes before the first byte).
READ_TIMEOUT_S = 600.0
# A side request's whole deadline when the command line gives none: every answer below is a
# small JSON document the server has ready; 30 s covers a loaded server and a slow proxy.
SIDE_DEADLINE_S = 30.0


@dataclass(frozen=True)
class StreamLimits:
    """The time limits of a request (the measured stream and every side request)."""

    idle_timeout_s: float = READ_TIMEOUT_S  # no byte for this long ends the request
    deadline_s: float | None = None  # the request may take this long in all, from send


DEFAULT_LIMITS = StreamLimits()
_LIMITS: ContextVar[StreamLimits | None] = ContextVar("decodescope_stream_limits", default=None)


def current_limits() -> StreamLimits:
    return _LIMITS.get() or DEFAULT_LIMITS


@contextmanager
def stream_limits(idle_timeout_s: float | None = None,
                  deadline_s: float | None = None) -> Iterator[StreamLimits]:
    """Limits for the clients made and requests sent inside this block (the CLI's --timeout
    and --deadline reach every request this way); None keeps the current value."""
    cur = current_limits()
    new = replace(cur, idle_timeout_s=cur.idle_timeout_s if idle_timeout_s is None else idle_timeout_s,
                  deadline_s=cur.deadline_s if deadline_s is None else deadline_s)
    token = _LIMITS.set(new)
    try:
        yield new
    finally:
        _LIMITS.reset(token)


@contextmanager
def deadline_at_most(seconds: float) -> Iterator[StreamLimits]:
    """The current limits with the deadline lowered to `seconds` (a command whose --timeout
    is "seconds per request", as doctor's and fingerprint's)."""
    cur = current_limits().deadline_s
    with stream_limits(deadline_s=seconds if cur is None else min(cur, seconds)) as new:
        yield new


# ---- limits of size, per endpoint -----------------------------------------------------------

KiB, MiB = 1024, 1024 * 1024


@dataclass(frozen=True)
class SideEndpoint:
    """A side endpoint, the most bytes its answer may carry, and why that is enough."""

    path: str
    max_bytes: int
    why: str


# A list of model cards: vLLM with a few hundred LoRA adapters answers ~100 KB.
MODELS = SideEndpoint("/v1/models", 4 * MiB, "a list of model cards is a few KB, "
                      "~100 KB with hundreds of LoRA adapters")
# {"version": "0.11.0"} (vLLM).
VERSION = SideEndpoint("/version", 64 * KiB, "a version answer is a few dozen bytes")
# llama.cpp: generation settings plus the chat template (Jinja, up to ~100 KB).
PROPS = SideEndpoint("/props", 4 * MiB, "llama.cpp's /props is settings plus a chat "
                     "template, ~200 KB at most")
# SGLang: server arguments and internal states.
SERVER_INFO = SideEndpoint("/get_server_info", 4 * MiB, "SGLang's server info is its "
                           "arguments and states, ~50 KB")
SERVER_INFO_ALT = replace(SERVER_INFO, path="/server_info")
HEALTH = SideEndpoint("/health", 64 * KiB, "a health answer is empty or a short status")
# A vLLM exposition is ~100-500 KB (histograms per model); data-parallel ranks and many models
# multiply it. 32 MiB is ~60 such engines; more is not an engine's exposition.
METRICS = SideEndpoint("/metrics", 32 * MiB, "an engine's exposition is 100-500 KB")
# {"count": n, "tokens": [ids], "max_model_len": m}: a token covers at least one byte of text
# (byte-level BPE, SentencePiece byte fallback) and an id is at most ~9 characters in JSON.
TOKENIZE_BYTES_PER_TEXT_BYTE = 12
TOKENIZE_BASE_BYTES = 64 * KiB


def tokenize_endpoint(text: str) -> SideEndpoint:
    """POST /tokenize for this text: at most one token id per byte of it, plus the envelope."""
    n = len(text.encode("utf-8", "replace"))
    return SideEndpoint("/tokenize", TOKENIZE_BASE_BYTES + TOKENIZE_BYTES_PER_TEXT_BYTE * n,
                        f"the answer for {n} bytes of text lists at most {n} tokens")


# ---- one bounded reader ----------------------------------------------------------------------

@dataclass(frozen=True)
class Reply:
    """A side request's answer, read to its end within the limits."""

    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        """The body as JSON (ValueError when it is not); NaN and infinities, which JSON does
        not have, read as None."""
        import json

        return json.loads(self.body, parse_constant=lambda _name: None)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


def _size(n: int) -> str:
    return f"{n // MiB} MiB" if n >= MiB and n % MiB == 0 else (
        f"{n // KiB} KiB" if n % KiB == 0 else f"{n} bytes")


def too_large(method: str, url: str, ep: SideEndpoint, length: int | None = None
              ) -> ResponseTooLargeError:
    said = f" (Content-Length {length})" if length is not None else ""
    return ResponseTooLargeError(
        f"{method} {ep.path} answered more than {_size(ep.max_bytes)}{said}, more than that "
        f"endpoint can hold ({ep.why})",
        where=url,
        remedy=f"The server or a proxy in front of it sends junk on {ep.path}; decodescope "
               f"stopped reading at the limit. Check it with `curl -s URL{ep.path} | head -c 2000`")


def side_request(client: httpx.Client, method: str, base_url: str, ep: SideEndpoint, *,
                 json: Any = None, deadline_s: float | None = None) -> Reply:
    """Send one side request and read its answer within the endpoint's size limit and one
    deadline (the smaller of `deadline_s` or SIDE_DEADLINE_S and the current --deadline).

    Raises httpx.HTTPError when the transport fails (refused, reset, no byte for --timeout),
    ResponseTooLargeError past the size limit, UnreachableError when nothing answered within
    the deadline and ProtocolError when an answer began and did not finish within it."""
    limits = current_limits()
    deadline = deadline_s if deadline_s is not None else SIDE_DEADLINE_S
    if limits.deadline_s is not None:
        deadline = min(deadline, limits.deadline_s)
    url = base_url.rstrip("/") + ep.path
    own = client.timeout.read  # the client's own per-read timeout, when it has one
    idle = min(limits.idle_timeout_s, deadline, *(() if own is None else (own,)))
    box = _Fetch(client, method, url, ep, json, idle)
    worker = threading.Thread(target=box.run, name=f"decodescope-side{ep.path.replace('/', '-')}",
                              daemon=True)
    worker.start()
    worker.join(deadline)
    if worker.is_alive():  # the deadline passed: the worker stops at its next read
        box.give_up.set()
        if box.status is None:
            raise UnreachableError(
                f"{method} {ep.path}: no answer (status and headers) within the deadline of "
                f"{deadline:g} s", where=url,
                remedy="The server is stalled or overloaded; check its log, or give a longer --deadline")
        raise ProtocolError(
            f"{method} {ep.path}: the answer did not finish within the deadline of {deadline:g} s "
            f"({box.received} bytes came)", where=url,
            remedy="The server trickles its answer; check it and any proxy in front of it, "
                   "or give a longer --deadline")
    if box.error is not None:
        raise box.error
    assert box.status is not None and box.headers is not None
    return Reply(box.status, box.headers, box.body)


class _Fetch:
    """One side request, run in a worker thread so that the caller's deadline holds even
    while a read blocks (a header trickled byte by byte never reaches a check of ours)."""

    def __init__(self, client: httpx.Client, method: str, url: str, ep: SideEndpoint,
                 json: Any, idle_s: float) -> None:
        self.client, self.method, self.url, self.ep = client, method, url, ep
        self.json, self.idle_s = json, idle_s
        self.give_up = threading.Event()
        self.status: int | None = None
        self.headers: Mapping[str, str] | None = None
        self.body = b""
        self.received = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # handed to the caller, raised there
            self.error = exc

    def _run(self) -> None:
        ep, cap = self.ep, self.ep.max_bytes
        with self.client.stream(self.method, self.url, json=self.json,
                                headers={"accept-encoding": "identity"},
                                timeout=httpx.Timeout(self.idle_s)) as resp:
            length = resp.headers.get("content-length", "")
            if length.strip().isdigit() and int(length) > cap:
                raise too_large(self.method, self.url, ep, int(length))
            self.headers, self.status = resp.headers, resp.status_code
            if resp.is_stream_consumed:  # read already by the transport (httpx.MockTransport)
                self.received = len(resp.content)
                if self.received > cap:
                    raise too_large(self.method, self.url, ep)
                self.body = resp.content
                return
            decode = _decoder(resp.headers.get("content-encoding", ""),
                              f"{self.method} {ep.path}", self.url)
            parts: list[bytes] = []
            for raw in resp.iter_raw():
                block = decode(raw, cap + 1 - self.received)
                self.received += len(block)
                if self.received > cap:
                    raise too_large(self.method, self.url, ep)
                parts.append(block)
                if self.give_up.is_set():
                    return
            self.body = b"".join(parts)


def _decoder(encoding: str, what: str, url: str) -> Callable[[bytes, int], bytes]:
    """Bytes as sent -> bytes of the answer, at most `room` of them per call: identity, or
    gzip / deflate inflated only as far as the size limit (a small compressed bomb never
    expands in memory). The request asks for identity; any other encoding is refused."""
    enc = encoding.strip().lower()
    if enc in ("", "identity"):
        return lambda raw, room: raw
    if enc not in ("gzip", "x-gzip", "deflate"):
        raise ProtocolError(f"{what} answered with Content-Encoding {encoding[:40]!r}, not "
                            "identity as asked", where=url,
                            remedy="Check the proxy or server in front of the endpoint")
    inflate = zlib.decompressobj(47 if enc != "deflate" else 15)  # 47: gzip or zlib header

    def decode(raw: bytes, room: int) -> bytes:
        try:  # more than `room` means past the limit: the caller stops there
            return inflate.decompress(raw, max(room, 1))
        except zlib.error as exc:
            raise ProtocolError(f"{what}: the answer's {enc} data is damaged: {exc}", where=url,
                                remedy="Check the proxy or server in front of the endpoint") from None
    return decode


# ---- numbers from outside --------------------------------------------------------------------

# A token count no model comes near: ten times the largest context window announced (10M).
MAX_TOKEN_COUNT = 100_000_000
# A duration no request comes near (a week), in seconds.
MAX_DURATION_S = 7 * 86400.0


def count_field(value: Any, field: str, where: str, *, limit: int = MAX_TOKEN_COUNT) -> int | None:
    """A count the server sent (tokens, drafts): None when absent, else an integer in
    [0, limit]; an integral float (96.0) is taken as the integer. Anything else raises a
    ProtocolError that names the field."""
    if value is None:
        return None
    if type(value) is int:
        if 0 <= value <= limit:
            return value
    elif (type(value) is float and math.isfinite(value) and value.is_integer()
          and 0 <= value <= limit):
        return int(value)
    raise bad_field(field, value, f"a whole number from 0 to {limit:,}", where)


def seconds_field(value: Any, field: str, where: str, *, scale: float = 1.0,
                  limit_s: float = MAX_DURATION_S) -> float | None:
    """A duration the server sent (`scale` = 1e-3 for milliseconds), in seconds: None when
    absent, else a finite number in [0, limit_s]; anything else raises a ProtocolError."""
    if value is None:
        return None
    if type(value) in (int, float) and math.isfinite(value) and 0 <= value * scale <= limit_s:
        return float(value) * scale
    unit = "ms" if scale == 1e-3 else "s"
    raise bad_field(field, value, f"a finite duration from 0 to {limit_s / scale:g} {unit}", where)


def bad_field(field: str, value: Any, expected: str, where: str) -> ProtocolError:
    shown = repr(value)
    if len(shown) > 40:
        shown = shown[:37] + "..."
    return ProtocolError(
        f"the server sent {field} = {shown} ({type(value).__name__}), not {expected}",
        where=where,
        remedy="The server, or a proxy in front of it, sends a value no server should; check "
               "its version and options")


def finite_or_none(obj: Any) -> Any:
    """`obj` with every NaN or infinite float replaced by None (JSON has no such numbers)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_or_none(v) for v in obj]
    return obj
