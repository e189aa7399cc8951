"""A replay emitter for the capacity runs of bench_client.py: it serves pre-rendered SSE
streams at a fixed step rate, fast enough that the client under test, not the server, decides
the capacity.

    python bench/_emitter.py --body JSON --step-rate HZ --truth-dir DIR [--procs N --cpus 1,2]

At start it asks the simulator (`decodescope.sim`, in a thread, flat out) for one stream of
the given request body and keeps its SSE events, grouped per engine step (role chunk with the
first token event; usage chunk, [DONE] and the last HTTP chunk with the last), framed as HTTP
chunks: the same bytes the simulator would send. Then it serves every POST with those bytes,
the response id swapped in, one step per stream per tick at `--step-rate` Hz: at each tick a
tight loop of one `send()` per stream from a pre-rendered buffer (no formatting, no JSON, no
event loop), and the true emit time of each step (`time.monotonic()` right after its last byte
went to the socket, as the simulator stamps it) next to its deadline (the tick).

Truth goes to `--truth-dir`, one JSON file per request (the simulator's /sim/truth/ID shape:
response_id, chunks of t_emit_monotonic_s, t_deadline_monotonic_s, tokens), written when its
stream ends; emission counters (tokens, sends, CPU seconds of the emitting loop, ticks, late
ticks) go to `stats-PID.json` there after every stream. `--procs N` runs N emitter processes
on one port (SO_REUSEPORT; the kernel spreads connections), each pinned to one of `--cpus`.
`--step-rate 0` emits flat out (one tick after another, no sleeping): the ceiling run.

Prints one JSON line {"url": ...} once every process listens.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import errno
import json
import os
import selectors
import signal
import socket
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PLACEHOLDER_XID = "X" * 32  # the X-Request-Id the captured stream is rendered with
PR_SET_TIMERSLACK = 29  # prctl: wake-ups within 1 ns of the asked time, not the default 50 us
READ_BYTES = 65536
MAX_REQUEST_BYTES = 1 << 20


# ---- capture: the simulator's bytes for one body ------------------------------------------
def capture_events(body: dict[str, Any]) -> list[list[bytes]]:
    """The SSE events (`data: ...\\n\\n`, unframed) the simulator sends for `body`, grouped
    per step: every group holds exactly one token-carrying event."""
    from decodescope.sim.config import SimConfig
    from decodescope.sim.server import SimServer

    cfg = SimConfig(time_scale=1e-6, prefill_overhead_s=0.0)  # flat out: no waiting
    with SimServer(cfg).start_in_thread() as sim:
        raw = _post_raw(sim.port, "/v1/chat/completions", json.dumps(body).encode(),
                        {"X-Request-ID": PLACEHOLDER_XID})
    events = _unchunk(raw)
    steps: list[list[bytes]] = []
    pending: list[bytes] = []
    done = 0
    for ev in events:
        pending.append(ev)
        tokens = _completion_tokens(ev)
        if tokens is not None and tokens > done:
            steps.append(pending)
            pending, done = [], tokens
    if not steps:
        raise SystemExit(f"the simulator sent no token-carrying event for {json.dumps(body)[:200]}")
    steps[-1] += pending  # usage chunk and [DONE] go with the last step, as the simulator sends
    return steps


def _completion_tokens(event: bytes) -> int | None:
    text = event.strip()
    if not text.startswith(b"data:") or text.endswith(b"[DONE]"):
        return None
    obj = json.loads(text[5:])
    choices = obj.get("choices") or []
    if not choices:  # the final usage chunk carries no tokens of its own
        return None
    usage = obj.get("usage") or {}
    ct = usage.get("completion_tokens")
    return ct if isinstance(ct, int) else None


def _post_raw(port: int, path: str, body: bytes, headers: dict[str, str]) -> bytes:
    head = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Content-Type: application/json",
            f"Content-Length: {len(body)}", "Connection: close"]
    head += [f"{k}: {v}" for k, v in headers.items()]
    with socket.create_connection(("127.0.0.1", port), timeout=600) as s:
        s.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        parts = []
        while True:
            got = s.recv(1 << 20)
            if not got:
                break
            parts.append(got)
            if b"".join(parts[-2:]).endswith(b"\r\n0\r\n\r\n"):
                break
    data = b"".join(parts)
    head_end = data.find(b"\r\n\r\n")
    if not data.startswith(b"HTTP/1.1 200") or b"chunked" not in data[:head_end].lower():
        raise SystemExit(f"simulator answered {data[:300]!r}")
    return data[head_end + 4:]


def _unchunk(raw: bytes) -> list[bytes]:
    """HTTP chunks of a chunked body (the simulator frames one SSE event per chunk)."""
    out: list[bytes] = []
    pos = 0
    while True:
        eol = raw.index(b"\r\n", pos)
        size = int(raw[pos:eol], 16)
        if size == 0:
            return out
        out.append(raw[eol + 2:eol + 2 + size])
        pos = eol + 2 + size + 2


def frame(steps: list[list[bytes]]) -> tuple[bytes, list[int]]:
    """One buffer of every step's HTTP chunks, with the last chunk after the last step, and
    the end offset of each step in it."""
    parts: list[bytes] = []
    ends: list[int] = []
    n = 0
    for i, group in enumerate(steps):
        for ev in group:
            parts.append(b"%x\r\n%s\r\n" % (len(ev), ev))
            n += len(parts[-1])
        if i == len(steps) - 1:
            parts.append(b"0\r\n\r\n")
            n += 5
        ends.append(n)
    return b"".join(parts), ends


@dataclass
class Template:
    """The captured stream, rendered per length of the response id (chunk sizes depend on it)."""

    steps: list[list[bytes]]
    tokens: list[int]  # tokens per step
    _by_len: dict[int, tuple[bytes, list[int]]] = field(default_factory=dict)

    @classmethod
    def capture(cls, body: dict[str, Any]) -> Template:
        steps = capture_events(body)
        tokens, done = [], 0
        for group in steps:
            ct = max(t for t in (_completion_tokens(e) for e in group) if t is not None)
            tokens.append(ct - done)
            done = ct
        return cls(steps, tokens)

    def render(self, xid: str) -> tuple[bytes, list[int]]:
        """The framed body for a request whose X-Request-Id is `xid`."""
        n = len(xid)
        if n not in self._by_len:
            ph = ("Y" * n).encode()
            steps = [[e.replace(PLACEHOLDER_XID.encode(), ph) for e in g] for g in self.steps]
            self._by_len[n] = frame(steps)
        buf, ends = self._by_len[n]
        return buf.replace(("Y" * n).encode(), xid.encode()), ends


# ---- serving ----------------------------------------------------------------------------
class Stream:
    __slots__ = ("conn", "sock", "view", "ends", "step", "sent", "response_id", "xid", "emits",
                 "t_arrival")

    def __init__(self, conn: Conn, sock: socket.socket, buf: bytes, ends: list[int], response_id: str,
                 xid: str | None, t_arrival: float):
        self.conn = conn
        self.sock = sock
        self.view = memoryview(buf)
        self.ends = ends
        self.step = 0  # the next step to send
        self.sent = 0  # bytes of buf sent
        self.response_id = response_id
        self.xid = xid
        self.emits: list[tuple[float, float]] = []  # (t_emit, t_deadline) per step
        self.t_arrival = t_arrival


class Conn:
    __slots__ = ("sock", "buf", "stream")

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buf = b""
        self.stream: Stream | None = None


class Emitter:
    def __init__(self, lsock: socket.socket, template: Template, step_rate_hz: float,
                 truth_dir: Path):
        self.lsock = lsock
        self.template = template
        self.period = 1.0 / step_rate_hz if step_rate_hz > 0 else 0.0
        self.truth_dir = truth_dir
        self.sel = selectors.DefaultSelector()
        self.sel.register(lsock, selectors.EVENT_READ, None)
        self.active: list[Stream] = []
        self.joining: list[Stream] = []
        self.stats = {"pid": os.getpid(), "tokens": 0, "steps": 0, "sends": 0, "ticks": 0,
                      "late_ticks": 0, "emit_cpu_s": 0.0, "streams": 0}
        self.running = True

    # one poll of sockets: accept, read requests (never blocks)
    def poll(self) -> None:
        for key, _ in self.sel.select(0):
            if key.data is None:
                self._accept()
            else:
                self._read(key.data)

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.lsock.accept()
            except (BlockingIOError, InterruptedError):
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sel.register(sock, selectors.EVENT_READ, Conn(sock))

    def _read(self, conn: Conn) -> None:
        try:
            data = conn.sock.recv(READ_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        if conn.stream is not None:  # a pipelined request: not served by this emitter
            return
        conn.buf += data
        if len(conn.buf) > MAX_REQUEST_BYTES:
            self._drop(conn)
            return
        end = conn.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        lines = conn.buf[:end].decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        length = int(headers.get("content-length", "0") or 0)
        if len(conn.buf) < end + 4 + length:
            return
        conn.buf = conn.buf[end + 4 + length:]
        method, path = (lines[0].split(" ") + ["", ""])[:2]
        if method != "POST" or not path.startswith("/v1/chat/completions"):
            body = b'{"detail":"Not Found"}'
            conn.sock.sendall(b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\n"
                              b"content-length: %d\r\n\r\n%s" % (len(body), body))
            return
        xid = headers.get("x-request-id") or None
        response_id = "chatcmpl-" + (xid or uuid.uuid4().hex)
        buf, ends = self.template.render(response_id.removeprefix("chatcmpl-"))
        head = ("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
                f"x-request-id: {xid or response_id}\r\nserver: decodescope-bench-emitter\r\n"
                "transfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n").encode()
        conn.sock.sendall(head)
        conn.stream = Stream(conn, conn.sock, buf, ends, response_id, xid, time.monotonic())
        self.joining.append(conn.stream)

    def _drop(self, conn: Conn) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(conn.sock)
        if conn.stream is not None and conn.stream in self.active:
            self.active.remove(conn.stream)
        conn.sock.close()

    # one tick: every active stream sends its next step
    def tick(self, deadline: float) -> None:
        cpu0 = time.process_time()
        mono = time.monotonic
        still: list[Stream] = []
        tokens = self.template.tokens
        sends = 0
        emitted = 0
        done: list[Stream] = []
        for s in self.active:
            end = s.ends[s.step]
            try:
                n = s.sock.send(s.view[s.sent:end])
            except (BlockingIOError, InterruptedError):
                n = 0
            except OSError:
                continue  # the client went away; its truth stays incomplete
            sends += 1
            s.sent += n
            if s.sent < end:  # the client's socket is full: the rest goes next tick
                still.append(s)
                continue
            s.emits.append((mono(), deadline))
            emitted += tokens[s.step]
            s.step += 1
            if s.step < len(s.ends):
                still.append(s)
            else:
                done.append(s)
        self.active = still
        st = self.stats
        st["sends"] += sends
        st["tokens"] += emitted
        st["ticks"] += 1
        st["emit_cpu_s"] += time.process_time() - cpu0
        for s in done:  # truth files after the tick: writing them must not delay its sends
            self._finish(s)
        if self.joining:
            self.active += self.joining
            self.joining = []

    def _finish(self, s: Stream) -> None:
        s.conn.stream = None
        rec = {"response_id": s.response_id, "x_request_id": s.xid,
               "t_arrival_monotonic_s": s.t_arrival, "t_emit_monotonic_s": [e for e, _ in s.emits],
               "t_deadline_monotonic_s": [d for _, d in s.emits],
               "tokens": self.template.tokens[:len(s.emits)]}
        tmp = self.truth_dir / f".{s.response_id}.tmp"
        tmp.write_text(json.dumps(rec))
        tmp.replace(self.truth_dir / f"{s.response_id}.json")  # whole, or not there yet
        self.stats["steps"] += len(s.emits)
        self.stats["streams"] += 1
        self._write_stats()

    def _write_stats(self) -> None:
        st = dict(self.stats)
        tmp = self.truth_dir / f".stats-{os.getpid()}.tmp"
        tmp.write_text(json.dumps(st))
        tmp.replace(self.truth_dir / f"stats-{os.getpid()}.json")

    def run(self) -> None:
        next_tick = time.monotonic()
        period = self.period
        while self.running:
            self.poll()
            if not self.active and not self.joining:
                self.sel.select(0.001)  # idle: wait for a request (ms resolution is fine here)
                next_tick = time.monotonic()
                continue
            now = time.monotonic()
            if period and now < next_tick:
                time.sleep(next_tick - now)
                now = time.monotonic()
            if now - next_tick > period and period:
                self.stats["late_ticks"] += 1
            self.tick(next_tick if period else now)
            next_tick = next_tick + period if period else now
            if now - next_tick > 4 * period:  # far behind: do not burst to catch up
                next_tick = now


def _set_timerslack() -> None:
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)


def _listen(port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind(("127.0.0.1", port))
    s.listen(1024)
    s.setblocking(False)
    return s


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--body", required=True, help="the request body to capture, as JSON")
    ap.add_argument("--step-rate", type=float, required=True, help="steps per second per stream (0: flat out)")
    ap.add_argument("--truth-dir", type=Path, required=True)
    ap.add_argument("--procs", type=int, default=1)
    ap.add_argument("--cpus", default="", help="comma-separated cores, one per process")
    args = ap.parse_args(argv)
    args.truth_dir.mkdir(parents=True, exist_ok=True)
    template = Template.capture(json.loads(args.body))
    cpus = [int(c) for c in args.cpus.split(",") if c.strip()]
    lsock = _listen(0)
    port = lsock.getsockname()[1]
    children: list[int] = []
    for i in range(1, args.procs):
        pid = os.fork()
        if pid == 0:  # a child: its own listening socket on the same port
            lsock.close()
            _serve(_listen(port), template, args, cpus[i] if i < len(cpus) else None)
            os._exit(0)
        children.append(pid)

    print(json.dumps({"url": f"http://127.0.0.1:{port}", "port": port, "procs": args.procs,
                      "steps": len(template.steps), "tokens": sum(template.tokens)}), flush=True)
    try:
        _serve(lsock, template, args, cpus[0] if cpus else None)
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        for pid in children:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, 0)
    return 0


def _serve(lsock: socket.socket, template: Template, args: argparse.Namespace, cpu: int | None) -> None:
    if cpu is not None:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, {cpu})
    _set_timerslack()
    em = Emitter(lsock, template, args.step_rate, args.truth_dir)

    def stop(*_: Any) -> None:
        em.running = False

    signal.signal(signal.SIGTERM, stop)
    try:
        em.run()
    except OSError as exc:
        if exc.errno != errno.EBADF:
            raise
    em._write_stats()


if __name__ == "__main__":
    sys.exit(main())
