"""A small misbehaving HTTP server for the fault suite (tests/test_faults*.py), and its own
smoke test.

It speaks just enough HTTP/1.1 on 127.0.0.1: `GET /v1/models` lists one model, other GETs and
`/tokenize` are 404, and `POST /v1/chat/completions` (or /v1/completions) misbehaves as its
`mode` says. Endless modes write until the client goes away or the server stops, so every test
is bounded by the client's limits, and `stop()` ends every handler.
"""

from __future__ import annotations

import json
import socket
import socketserver
import threading
import time
from collections.abc import Callable

MODEL = "fault-model"
CHUNK = {"id": "cmpl-f", "object": "chat.completion.chunk", "model": MODEL,
         "choices": [{"index": 0, "delta": {"content": "tok "}, "finish_reason": None}]}


class FaultServer:
    def __init__(self, mode: str, echo_auth: bool = True) -> None:
        self.mode = mode
        self.echo_auth = echo_auth
        self.stopping = threading.Event()
        self.sent_bytes = 0
        self.requests: list[str] = []  # request heads received (to check what the client sent)
        server = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                server._serve(self.request)

        self._srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler, bind_and_activate=False)
        self._srv.daemon_threads = True
        self._srv.allow_reuse_address = True
        self._srv.server_bind()
        self._srv.server_activate()
        self.port = self._srv.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._srv.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    def __enter__(self) -> FaultServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.stopping.set()
        self._srv.shutdown()
        self._srv.server_close()
        self._thread.join(timeout=10)

    # ---- one connection -------------------------------------------------------------------
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
            self.requests.append(head)
            line = head.split("\r\n", 1)[0]
            method, path = line.split(" ")[:2]
            auth = next((h.split(":", 1)[1].strip() for h in head.split("\r\n")
                         if h.lower().startswith("authorization:")), "")
            try:
                if method == "GET" and path == "/v1/models":
                    _send_json(sock, 200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
                elif method == "POST" and path.endswith("completions"):
                    self._misbehave(sock, auth)
                    return
                else:
                    _send_json(sock, 404, {"error": {"message": "not found"}})
            except OSError:
                return

    def _misbehave(self, sock: socket.socket, auth: str) -> None:
        mode = self.mode
        if mode == "hang":  # headers never come
            self._wait(60)
        elif mode == "hang_after_headers":
            sock.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n")
            self._wait(60)
        elif mode == "html_endless":
            sock.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\n\r\n<html><body>")
            self._endless(sock, lambda: b"<p>login</p>" * 512)
        elif mode == "error_endless":
            sock.sendall(b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain\r\n\r\n")
            self._endless(sock, lambda: b"trace line " * 512)
        elif mode == "sse_endless":  # valid chunks, never a finish
            sock.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n")
            event = b"data: " + json.dumps(CHUNK).encode() + b"\n\n"
            self._endless(sock, lambda: event * 64)
        elif mode == "sse_no_newline":  # one data line that never ends
            sock.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\ndata: {\"x\": \"")
            self._endless(sock, lambda: b"x" * 65536)
        elif mode == "sse_comments":  # only keep-alive comments: valid SSE, no events, forever
            sock.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n")
            self._endless(sock, lambda: b": ping\n" * 4096)
        elif mode == "chunked_endless_size":  # a chunk-size line that never ends
            sock.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                         b"transfer-encoding: chunked\r\n\r\n")
            self._endless(sock, lambda: b"f" * 4096)
        elif mode == "echo_auth":  # a 400 whose body echoes the key the client sent
            msg = f"invalid request; Authorization header was {auth!r}" if self.echo_auth else "bad"
            _send_json(sock, 400, {"error": {"message": msg, "type": "invalid_request_error"}})
        elif mode == "echo_auth_midstream":  # the error comes inside the stream
            sock.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n")
            err = {"error": {"message": f"upstream rejected key {auth.removeprefix('Bearer ')}"}}
            sock.sendall(b"data: " + json.dumps(err).encode() + b"\n\n")
        else:  # pragma: no cover
            raise ValueError(mode)

    def _endless(self, sock: socket.socket, piece: Callable[[], bytes]) -> None:
        deadline = time.monotonic() + 60  # never more than a minute, whatever the client does
        data = piece()
        while not self.stopping.is_set() and time.monotonic() < deadline:
            try:
                sock.sendall(data)
            except OSError:
                return
            self.sent_bytes += len(data)

    def _wait(self, seconds: float) -> None:
        self.stopping.wait(seconds)


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


def _send_json(sock: socket.socket, status: int, obj: object) -> None:
    body = json.dumps(obj).encode()
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 500: "Internal Server Error"}[status]
    sock.sendall(f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
                 f"content-length: {len(body)}\r\n\r\n".encode() + body)


def test_fault_server_lists_its_model_and_misbehaves_boundedly() -> None:
    import httpx

    with FaultServer("html_endless") as srv, httpx.Client(trust_env=False, timeout=5) as c:
        assert c.get(srv.url + "/v1/models").json()["data"][0]["id"] == MODEL
        assert c.get(srv.url + "/version").status_code == 404
        with c.stream("POST", srv.url + "/v1/chat/completions", json={}) as r:
            assert r.headers["content-type"] == "text/html"
            got = 0
            for block in r.iter_raw():
                got += len(block)
                if got > 100_000:
                    break
    assert got > 100_000
