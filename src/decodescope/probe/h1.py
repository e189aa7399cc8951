"""A lean HTTP/1.1 path for streaming requests to plain-http endpoints.

Each connection is a non-blocking socket with a reader callback on the event loop: every read
is timestamped and parsed (status line, headers, chunked framing) inside that callback and
handed to a `Sink`, so a chunk costs one callback instead of a trip through httpx, httpcore,
h11 and anyio with two task switches.

Receipt times come from the kernel where it can say (Linux: SO_TIMESTAMPNS, the time the last
segment of a read reached the socket), converted to the caller's clock; elsewhere from the
clock at read time. So a chunk that waits in the socket while the client serves other streams
keeps the time it arrived (docs/performance.md has the numbers).

Failures are raised as httpx exceptions (ConnectError, ConnectTimeout, ReadTimeout,
RemoteProtocolError, ReadError, WriteError), so the client maps both paths to the same
one-line errors. Idle keep-alive connections are pooled per host:port, as httpx does; a pooled
connection that the server closed before answering is retried once on a fresh one.
"""

from __future__ import annotations

import asyncio
import contextlib
import platform
import select
import socket
import struct
import sys
import time
from collections.abc import Callable
from typing import Protocol
from urllib.parse import urlsplit

import httpx

Clock = Callable[[], float]
# A response head larger than this is not an inference server's; nor is a chunk-size line or
# the trailers after the last chunk (a line that never ends must not grow the buffer forever).
MAX_HEAD_BYTES = 64 * 1024
# One read takes at most this much (a busier socket is read again on the next callback). Not
# asyncio's 256 KiB: CPython allocates the whole buffer per call, and above glibc's mmap
# threshold that costs ~15 us a read here, more than parsing the chunk.
READ_BYTES = 64 * 1024
# SO_TIMESTAMPNS has this number in asm-generic/socket.h (64-bit x86 and ARM use it; Python's
# socket module does not name it). Elsewhere receipt times fall back to the clock at read time.
SO_TIMESTAMPNS = 35 if sys.platform == "linux" and platform.machine() in ("x86_64", "aarch64") else None
ANC_BYTES = 64  # room for one struct timespec control message
MAX_KERNEL_SKEW_S = 1.0  # a kernel time this far from the clock is not trusted (and not used)
_TIMESPEC = struct.Struct("qq").unpack_from


class Sink(Protocol):
    def on_head(self, status: int, headers: dict[str, str], t: float) -> None: ...
    def on_body(self, block: bytes, t: float) -> None: ...
    def on_end(self, t: float) -> None: ...


class _Stale(Exception):
    """A pooled connection was closed by the server before any byte of the response."""


class _Mux:
    """The sockets of one pool behind one epoll descriptor that the event loop watches: one
    loop callback per wake-up reads every socket that is ready, instead of one callback (a
    Handle, a trip through the loop's ready queue) per socket. Linux only; elsewhere each
    socket is the loop's reader itself."""

    def __init__(self) -> None:
        self.ep = select.epoll()
        self.conns: dict[int, _Conn] = {}
        self.loop: asyncio.AbstractEventLoop | None = None

    def add(self, fd: int, conn: _Conn) -> None:
        loop = asyncio.get_running_loop()
        if self.loop is not loop:
            self._unwatch()
            loop.add_reader(self.ep.fileno(), self._ready)
            self.loop = loop
        self.ep.register(fd, select.EPOLLIN)
        self.conns[fd] = conn

    def remove(self, fd: int) -> None:
        if self.conns.pop(fd, None) is not None:
            with contextlib.suppress(OSError, ValueError):
                self.ep.unregister(fd)

    def _ready(self) -> None:
        get = self.conns.get
        for fd, _ in self.ep.poll(0):
            conn = get(fd)
            if conn is not None:
                conn._readable()

    def _unwatch(self) -> None:
        if self.loop is not None:
            with contextlib.suppress(RuntimeError, ValueError, OSError):  # that loop is closed
                self.loop.remove_reader(self.ep.fileno())
            self.loop = None

    def close(self) -> None:
        self._unwatch()
        self.conns.clear()
        self.ep.close()


class _Conn:
    def __init__(self, sock: socket.socket, kernel_ts: bool, mux: _Mux | None = None) -> None:
        self.sock = sock
        self.mux = mux
        self.kernel_ts = kernel_ts
        self.closed = False
        self.reusable = False
        self.reused = False
        self.clock: Clock = time.perf_counter
        self._sink: Sink | None = None
        self._done: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None

    # ---- one request --------------------------------------------------------------------
    async def request(self, data: bytes, sink: Sink, read_timeout_s: float, clock: Clock) -> None:
        loop = asyncio.get_running_loop()
        self.clock, self._sink, self.reusable = clock, sink, False
        self._buf = b""
        self._got_bytes = False
        self._head_done = False
        self._framing = ""  # "chunked" | "length" | "close"
        self._left = 0  # bytes left in the current chunk (chunked) or body (length)
        self._crlf = False  # a chunk's data was read; its CRLF is next
        self._keep_alive = True
        self._timeout_s = read_timeout_s
        self._last_rx = time.monotonic()
        self._done = loop.create_future()
        try:
            await loop.sock_sendall(self.sock, data)
        except OSError as exc:
            self.close()
            if self.reused:
                raise _Stale() from None
            raise httpx.WriteError(str(exc) or type(exc).__name__) from None
        fd = self.sock.fileno()
        if self.mux is not None:
            self.mux.add(fd, self)
        else:
            loop.add_reader(fd, self._readable)
        self._timer = loop.call_at(loop.time() + read_timeout_s, self._check_timeout)
        try:
            await self._done
        except BaseException:
            self.close()
            raise
        finally:
            if not self.closed:
                self._unwatch(fd)
            if self._timer is not None:
                self._timer.cancel()
            self._sink = self._done = None

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            # no loop (the pool closed after it), or the socket is already gone: nothing to do
            with contextlib.suppress(RuntimeError, ValueError, OSError):
                self._unwatch(self.sock.fileno())
            self.sock.close()

    def _unwatch(self, fd: int) -> None:
        if self.mux is not None:
            self.mux.remove(fd)
        else:
            asyncio.get_running_loop().remove_reader(fd)

    # ---- reading ------------------------------------------------------------------------
    def _readable(self) -> None:
        try:
            data, anc, _, _ = self.sock.recvmsg(READ_BYTES, ANC_BYTES if self.kernel_ts else 0)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lost(exc)
            return
        if not data:
            self._lost(None)
            return
        t = self.clock()
        if anc:
            t = self._kernel_time(anc, t)
        if self._done is None or self._done.done():
            return
        self._got_bytes = True
        self._last_rx = time.monotonic()
        try:
            if self._head_done:
                self._body(data, t)
            else:
                self._head(data, t)
        except BaseException as exc:  # a parse error, or one the sink raised: end this request
            self._fail(exc)

    @staticmethod
    def _kernel_time(anc: list[tuple[int, int, bytes]], t_now: float) -> float:
        """The kernel's arrival time of the read's last segment, on the caller's clock."""
        for level, kind, raw in anc:
            if kind == SO_TIMESTAMPNS and level == socket.SOL_SOCKET and len(raw) >= 16:
                sec, nsec = _TIMESPEC(raw)
                age = (time.time_ns() - sec * 1_000_000_000 - nsec) * 1e-9  # exact in integers
                if -MAX_KERNEL_SKEW_S < age < MAX_KERNEL_SKEW_S:
                    return t_now - max(age, 0.0)
        return t_now

    def _lost(self, exc: Exception | None) -> None:
        if self._done is None or self._done.done():
            self.close()
            return
        if self._head_done and self._framing == "close" and exc is None:
            self._finish(self.clock())
            self.close()
        elif not self._got_bytes and self.reused:
            self._fail(_Stale())
        elif exc is not None:
            self._fail(httpx.ReadError(str(exc) or type(exc).__name__))
        elif not self._got_bytes:
            self._fail(httpx.RemoteProtocolError("Server disconnected without sending a response."))
        else:
            self._fail(httpx.RemoteProtocolError(
                "peer closed connection without sending complete message body"))

    # ---- parsing ------------------------------------------------------------------------
    def _head(self, data: bytes, t: float) -> None:
        buf = self._buf + data
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_HEAD_BYTES:
                raise httpx.RemoteProtocolError("response head too large")
            self._buf = buf
            return
        lines = buf[:end].decode("latin-1").split("\r\n")
        rest = buf[end + 4:]
        self._buf = b""
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise httpx.RemoteProtocolError(f"bad status line {lines[0][:80]!r}")
        status = int(parts[1])
        if 100 <= status < 200:  # 100 Continue and friends: the real head follows
            if rest:
                self._head(rest, t)
            return
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        conn = headers.get("connection", "").lower()
        self._keep_alive = parts[0] != "HTTP/1.0" and "close" not in conn
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._framing = "chunked"
        elif "content-length" in headers:
            self._framing, self._left = "length", int(headers["content-length"])
        elif status in (204, 304):
            self._framing, self._left = "length", 0
        else:
            self._framing, self._keep_alive = "close", False
        self._head_done = True
        assert self._sink is not None
        self._sink.on_head(status, headers, t)
        if rest or (self._framing == "length" and self._left == 0):
            self._body(rest, t)

    def _body(self, data: bytes, t: float) -> None:
        assert self._sink is not None
        if self._framing == "close":
            if data:
                self._sink.on_body(data, t)
        elif self._framing == "length":
            take = data[:self._left]
            self._left -= len(take)
            if take:
                self._sink.on_body(take, t)
            if self._left == 0:
                self._finish(t)
        else:
            self._chunked(data, t)

    def _chunked(self, data: bytes, t: float) -> None:
        if not self._buf and not self._left and not self._crlf:
            # The usual read of a streaming server: one whole chunk, one event. Slice it out.
            eol = data.find(b"\r\n", 0, 18)
            if eol > 0:
                try:
                    size = int(data[:eol], 16)
                except ValueError:
                    size = 0  # a chunk extension, or junk: the general path below decides
                end = eol + 2 + size
                if size > 0 and len(data) == end + 2 and data[end:] == b"\r\n":
                    self._sink.on_body(data[eol + 2:end], t)  # type: ignore[union-attr]
                    return
        buf = self._buf + data if self._buf else data
        pos, n = 0, len(buf)
        out: list[bytes] = []
        ended = False
        while True:
            if self._left:
                take = min(self._left, n - pos)
                out.append(buf[pos:pos + take])
                pos += take
                self._left -= take
                if self._left:
                    break
                self._crlf = True
            if self._crlf:
                if n - pos < 2:
                    break
                if buf[pos:pos + 2] != b"\r\n":
                    raise httpx.RemoteProtocolError("chunk data not followed by CRLF")
                pos += 2
                self._crlf = False
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                break
            try:
                size = int(buf[pos:eol].split(b";", 1)[0], 16)
            except ValueError:
                raise httpx.RemoteProtocolError(f"bad chunk size {buf[pos:eol][:20]!r}") from None
            if size == 0:  # the last chunk; then optional trailer lines and an empty line
                if buf[eol + 2:eol + 4] != b"\r\n" and buf.find(b"\r\n\r\n", eol + 2) < 0:
                    break  # not all here yet: keep the size line and wait
                ended = True
                pos = n
                break
            pos = eol + 2
            self._left = size
        self._buf = buf[pos:]
        if len(self._buf) > MAX_HEAD_BYTES:
            raise httpx.RemoteProtocolError("chunk size line or trailers too long")
        if out:
            self._sink.on_body(b"".join(out) if len(out) > 1 else out[0], t)  # type: ignore[union-attr]
        if ended:
            self._finish(t)

    def _finish(self, t: float) -> None:
        assert self._sink is not None and self._done is not None
        self.reusable = self._keep_alive and not self.closed and not self._buf
        try:
            self._sink.on_end(t)
        except BaseException as exc:
            self._fail(exc)
            return
        if not self._done.done():
            self._done.set_result(None)

    def _fail(self, exc: BaseException) -> None:
        self.reusable = False
        if self._done is not None and not self._done.done():
            self._done.set_exception(exc)
        self.close()

    def _check_timeout(self) -> None:
        if self._done is None or self._done.done():
            return
        loop = asyncio.get_running_loop()
        idle = time.monotonic() - self._last_rx
        if idle >= self._timeout_s:
            self._fail(httpx.ReadTimeout(f"no data for {idle:.0f} s"))
        else:
            self._timer = loop.call_at(loop.time() + self._timeout_s - idle, self._check_timeout)


class H1Pool:
    """Connections of one client, for plain-http URLs; the caller's seam is `accepts`."""

    def __init__(self, connect_timeout_s: float, read_timeout_s: float, max_connections: int,
                 kernel_timestamps: bool = True):
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.max_connections = max_connections
        self.kernel_timestamps = kernel_timestamps and SO_TIMESTAMPNS is not None
        self._idle: dict[tuple[str, int], list[_Conn]] = {}
        self._sem: asyncio.Semaphore | None = None
        self._mux: _Mux | None = None

    @staticmethod
    def accepts(url: str) -> bool:
        u = urlsplit(url)
        return u.scheme == "http" and bool(u.hostname) and u.username is None

    async def stream(self, url: str, content: bytes, headers: dict[str, str], sink: Sink,
                     clock: Clock) -> None:
        u = urlsplit(url)
        host, port = u.hostname or "", u.port or 80
        target = (u.path or "/") + (f"?{u.query}" if u.query else "")
        host_header = f"[{host}]" if ":" in host else host
        if u.port:
            host_header += f":{u.port}"
        head = [f"POST {target} HTTP/1.1", f"Host: {host_header}", "Accept: text/event-stream",
                "Accept-Encoding: identity", "Connection: keep-alive",
                "Content-Type: application/json", f"Content-Length: {len(content)}"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + content
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.max_connections)
        async with self._sem:
            conn = self._take_idle((host, port))
            while True:
                if conn is None:
                    conn = await self._connect(host, port)
                try:
                    await conn.request(data, sink, self.read_timeout_s, clock)
                except _Stale:
                    conn = None
                    continue
                break
            if conn.reusable and not conn.closed:
                conn.reused = True
                self._idle.setdefault((host, port), []).append(conn)
            else:
                conn.close()

    def _take_idle(self, key: tuple[str, int]) -> _Conn | None:
        idle = self._idle.get(key, [])
        while idle:
            conn = idle.pop()
            if not conn.closed:
                return conn
        return None

    async def _connect(self, host: str, port: int) -> _Conn:
        try:
            sock = await asyncio.wait_for(self._open(host, port), self.connect_timeout_s)
        except asyncio.TimeoutError:
            raise httpx.ConnectTimeout(f"no connection within {self.connect_timeout_s:g} s") from None
        except OSError as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from None
        if self._mux is None and hasattr(select, "epoll"):
            self._mux = _Mux()
        kernel_ts = self.kernel_timestamps
        if kernel_ts:
            try:
                sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS or 0, 1)
            except OSError:
                kernel_ts = False
        return _Conn(sock, kernel_ts, self._mux)

    @staticmethod
    async def _open(host: str, port: int) -> socket.socket:
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        last: OSError = OSError(f"no address for {host}")
        for family, kind, proto, _, addr in infos:
            sock = socket.socket(family, kind, proto)
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                await loop.sock_connect(sock, addr)
                return sock
            except OSError as exc:
                sock.close()
                last = exc
            except BaseException:
                sock.close()
                raise
        raise last

    def close(self) -> None:
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()
        if self._mux is not None:
            self._mux.close()
            self._mux = None
