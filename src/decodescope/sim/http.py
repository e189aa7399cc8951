"""A minimal HTTP/1.1 layer on asyncio streams: request parsing (Content-Length or chunked
bodies, Expect: 100-continue, keep-alive) and response framing. Small on purpose, so faults
(HTML pages, malformed SSE, a connection closed mid-stream) and timing stay under control.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024  # long prompts (32K tokens ≈ 128 KB) fit with room to spare


class HttpParseError(Exception):
    pass


@dataclass(frozen=True)
class HttpRequest:
    method: str
    path: str
    query: str
    version: str
    headers: dict[str, str]  # lower-case names
    body: bytes

    @property
    def keep_alive(self) -> bool:
        conn = self.headers.get("connection", "").lower()
        if self.version == "HTTP/1.0":
            return conn == "keep-alive"
        return conn != "close"

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8"))


async def read_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> HttpRequest | None:
    """The next request on a connection, or None at a clean end of the connection."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial.strip():
            raise HttpParseError("connection closed inside the request head") from exc
        return None
    except asyncio.LimitOverrunError as exc:
        raise HttpParseError("request head too large") from exc
    lines = head.decode("latin-1").split("\r\n")
    try:
        method, target, version = lines[0].split(" ", 2)
    except ValueError as exc:
        raise HttpParseError(f"bad request line {lines[0]!r}") from exc
    headers: dict[str, str] = {}
    for raw in lines[1:]:
        if not raw:
            continue
        name, sep, value = raw.partition(":")
        if not sep:
            raise HttpParseError(f"bad header line {raw!r}")
        headers[name.strip().lower()] = value.strip()
    if headers.get("expect", "").lower() == "100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = await _read_chunked(reader)
    else:
        length = int(headers.get("content-length", "0") or 0)
        if length > MAX_BODY_BYTES:
            raise HttpParseError("request body too large")
        body = await reader.readexactly(length) if length else b""
    path, _, query = target.partition("?")
    return HttpRequest(method.upper(), unquote(path), query, version.upper(), headers, body)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";")[0].strip() or b"0", 16)
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                pass
            return b"".join(parts)
        total += size
        if total > MAX_BODY_BYTES:
            raise HttpParseError("request body too large")
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


def head(status: int, headers: dict[str, str]) -> bytes:
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Status"
    lines = [f"HTTP/1.1 {status} {reason}"] + [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def response(status: int, body: bytes, content_type: str, keep_alive: bool,
             extra: dict[str, str] | None = None) -> bytes:
    headers = {
        "content-type": content_type,
        "content-length": str(len(body)),
        "connection": "keep-alive" if keep_alive else "close",
        "server": "decodescope-sim",
        **(extra or {}),
    }
    return head(status, headers) + body


def json_response(status: int, obj: Any, keep_alive: bool, extra: dict[str, str] | None = None) -> bytes:
    body = json.dumps(obj, separators=(",", ":")).encode()
    return response(status, body, "application/json", keep_alive, extra)


def chunk(data: bytes) -> bytes:
    """One HTTP/1.1 chunk (Transfer-Encoding: chunked)."""
    return b"%x\r\n%s\r\n" % (len(data), data)


LAST_CHUNK = b"0\r\n\r\n"
