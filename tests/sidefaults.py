"""A small OpenAI-like HTTP server on 127.0.0.1 whose every endpoint can misbehave, for
tests/test_faults_side_requests.py and tests/test_faults_fields.py.

By default it behaves: `/v1/models`, `/version`, `/health`, `/metrics` (a vLLM-like
exposition), `POST /tokenize` (one token per 4 characters) and a streaming
`/v1/chat/completions` of `CHUNKS` chunks with continuous usage. `faults` maps a path to how it
misbehaves instead:

- "endless": 200 application/json, no length (ends with the connection), body never ends
- "chunked": 200 application/json, chunked transfer, chunks never end
- "huge": 200 with Content-Length 10 GiB, then bytes until the client goes away
- "trickle": 200 application/json, then one byte a second
- "trickle_head": the status line itself, one byte a second
- "gzip_bomb": 256 KB of gzip that inflate to 256 MiB; "gzip_ok": a small gzip JSON answer;
  "brotli": an answer labelled Content-Encoding br
- a `dict` / `list`: answered as that JSON document; a callable: the JSON document it makes of
  the request's JSON body

`usage(i)` and `timings(i)` give the final chunk's `usage` / `timings` of the i-th
completion request (0-based), so a test can break the third request and keep the first two;
`choice(i, n)` updates the n-th chunk's choice (1-based) of the i-th request.
Endless answers stop after a minute or when the server stops, whatever the client does.
"""

from __future__ import annotations

import functools
import gzip
import json
import socket
import socketserver
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

MODEL = "side-fault-model"
CHUNKS = 32  # tokens of a healthy answer: one per chunk (the test caliber asks for 32)
METRICS_OK = (
    "# TYPE vllm:generation_tokens_total counter\n"
    'vllm:generation_tokens_total{model_name="m"} 100.0\n'
    "# TYPE vllm:num_requests_running gauge\n"
    'vllm:num_requests_running{model_name="m"} 1.0\n'
)
TEN_GIB = 10 * 1024 ** 3


def healthy_usage(i: int) -> dict[str, Any]:
    return {"prompt_tokens": 12, "completion_tokens": CHUNKS, "total_tokens": 12 + CHUNKS}


class SideFaultServer:
    def __init__(self, faults: dict[str, Any] | None = None, *,
                 usage: Callable[[int], Any] = healthy_usage,
                 timings: Callable[[int], Any] | None = None,
                 choice: Callable[[int, int], dict[str, Any] | None] | None = None,
                 metrics: str = METRICS_OK) -> None:
        self.faults = dict(faults or {})
        self.choice = choice
        self.usage, self.timings, self.metrics = usage, timings, metrics
        self.stopping = threading.Event()
        self.sent_bytes = 0
        self.completions = 0
        self.paths: list[str] = []
        self._lock = threading.Lock()
        server = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                server._serve(self.request)

        self._srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler,
                                                    bind_and_activate=False)
        self._srv.daemon_threads = True
        self._srv.allow_reuse_address = True
        self._srv.server_bind()
        self._srv.server_activate()
        self.url = f"http://127.0.0.1:{self._srv.server_address[1]}"
        self._thread = threading.Thread(target=self._srv.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> SideFaultServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self._srv.shutdown()
        self._srv.server_close()
        self._thread.join(timeout=10)

    # ---- one connection ----------------------------------------------------------------------
    def _serve(self, sock: socket.socket) -> None:
        sock.settimeout(5)
        buf = b""
        while not self.stopping.is_set():
            try:
                head, body, buf = _read_request(sock, buf)
            except (OSError, ValueError):
                return
            if head is None:
                return
            method, path = head.split("\r\n", 1)[0].split(" ")[:2]
            self.paths.append(f"{method} {path}")
            try:
                if not self._answer(sock, method, path, body):
                    return
            except OSError:
                return

    def _answer(self, sock: socket.socket, method: str, path: str, body: bytes) -> bool:
        """Answer one request; False when the connection must end."""
        fault = self.faults.get(path)
        if callable(fault):  # an answer computed from the request's JSON body
            _send(sock, 200, fault(json.loads(body or b"{}")))
            return True
        if fault is not None:
            return self._misbehave(sock, fault)
        if path == "/v1/models":
            _send(sock, 200, {"object": "list", "data": [{"id": MODEL, "object": "model",
                                                          "owned_by": "vllm"}]})
        elif path == "/version":
            _send(sock, 200, {"version": "0.0-sidefault"})
        elif path == "/health":
            _send(sock, 200, {})
        elif path == "/metrics":
            _send(sock, 200, self.metrics, ctype="text/plain; version=0.0.4")
        elif path == "/tokenize" and method == "POST":
            text = json.loads(body or b"{}").get("prompt", "")
            _send(sock, 200, {"count": max(1, len(text) // 4), "max_model_len": 4096})
        elif path.endswith("/completions") and method == "POST":
            with self._lock:
                i, self.completions = self.completions, self.completions + 1
            self._stream(sock, i)
            return False
        else:
            _send(sock, 404, {"error": {"message": "not found"}})
        return True

    def _stream(self, sock: socket.socket, i: int) -> None:
        sock.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"connection: close\r\n\r\n")
        for n in range(1, CHUNKS + 1):
            chunk: dict[str, Any] = {
                "id": f"cmpl-{i}", "object": "chat.completion.chunk", "model": MODEL,
                "choices": [{"index": 0, "delta": {"content": "tok "},
                             "finish_reason": "length" if n == CHUNKS else None}]}
            extra = self.choice(i, n) if self.choice is not None else None
            if extra:
                chunk["choices"][0].update(extra)
            if n == CHUNKS:
                chunk["usage"] = self.usage(i)
                if self.timings is not None:
                    chunk["timings"] = self.timings(i)
            # json allows NaN/Infinity out, as a careless server would send them
            sock.sendall(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            time.sleep(0.001)
        sock.sendall(b"data: [DONE]\n\n")

    def _misbehave(self, sock: socket.socket, fault: Any) -> bool:
        if isinstance(fault, (dict, list)):
            _send(sock, 200, fault)
            return True
        if fault == "endless":
            sock.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                         b"connection: close\r\n\r\n{\"data\": [")
            self._endless(sock, b'{"id": "x", "object": "model"}, ' * 2048)
        elif fault == "chunked":
            sock.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                         b"transfer-encoding: chunked\r\n\r\n")
            piece = b"x" * 65536
            self._endless(sock, f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
        elif fault == "huge":
            sock.sendall(f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                         f"content-length: {TEN_GIB}\r\n\r\n".encode())
            self._endless(sock, b" " * 65536)
        elif fault in ("gzip_bomb", "gzip_ok", "brotli"):
            if fault == "gzip_bomb":  # 256 MiB of zeros in ~256 KB
                body = _gzip_bomb()
            else:
                body = gzip.compress(json.dumps({"version": "0.0-gzip"}).encode())
            enc = "br" if fault == "brotli" else "gzip"
            sock.sendall(f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                         f"content-encoding: {enc}\r\ncontent-length: {len(body)}\r\n\r\n"
                         .encode() + body)
            self.sent_bytes += len(body)
            return True
        elif fault == "trickle":
            sock.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                         b"connection: close\r\n\r\n")
            self._trickle(sock, b'{"data": [' + b" " * 600)
        elif fault == "trickle_head":
            self._trickle(sock, b"HTTP/1.1 200 OK\r\n" + b"x-slow: " + b"y" * 600)
        else:  # pragma: no cover - a test's typo
            raise ValueError(fault)
        return False

    def _endless(self, sock: socket.socket, data: bytes) -> None:
        deadline = time.monotonic() + 60
        while not self.stopping.is_set() and time.monotonic() < deadline:
            try:
                sock.sendall(data)
            except OSError:
                return
            self.sent_bytes += len(data)

    def _trickle(self, sock: socket.socket, data: bytes) -> None:
        for b in data:
            if self.stopping.wait(1.0):
                return
            try:
                sock.sendall(bytes([b]))
            except OSError:
                return
            self.sent_bytes += 1


def _read_request(sock: socket.socket, buf: bytes) -> tuple[str | None, bytes, bytes]:
    while b"\r\n\r\n" not in buf:
        data = sock.recv(65536)
        if not data:
            return None, b"", b""
        buf += data
    head, rest = buf.split(b"\r\n\r\n", 1)
    text = head.decode("latin-1")
    length = 0
    for h in text.split("\r\n")[1:]:
        name, _, value = h.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    while len(rest) < length:
        data = sock.recv(65536)
        if not data:
            raise ValueError("short body")
        rest += data
    return text, rest[:length], rest[length:]


def _send(sock: socket.socket, status: int, obj: Any, ctype: str = "application/json") -> None:
    body = (obj if isinstance(obj, str) else json.dumps(obj)).encode()
    reason = {200: "OK", 404: "Not Found"}[status]
    sock.sendall(f"HTTP/1.1 {status} {reason}\r\ncontent-type: {ctype}\r\n"
                 f"content-length: {len(body)}\r\n\r\n".encode() + body)


@functools.cache
def _gzip_bomb() -> bytes:
    """256 MiB of zeros as gzip, built once (compressing it per request took seconds of CPU on
    a loaded 2-core machine: the client's read timeout, not the limit under test, ended it)."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = b"\0" * (1 << 20)
    return b"".join(z.compress(zeros) for _ in range(256)) + z.flush()
