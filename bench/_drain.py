"""A sink client for the emitter's ceiling run (bench_client.py): `concurrency` streams, read
with `recv_into` one preallocated buffer and thrown away (no parsing, no timestamps), so the
emitter, not the reader, is the bottleneck. Prints {"bytes": N, "streams": N} when every
stream has ended (the chunked body's last chunk).

    python bench/_drain.py --url URL --body JSON --concurrency C
"""

from __future__ import annotations

import argparse
import json
import selectors
import socket
import sys
from urllib.parse import urlsplit

LAST_CHUNK = b"0\r\n\r\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--body", required=True)
    ap.add_argument("--concurrency", type=int, default=32)
    args = ap.parse_args(argv)
    u = urlsplit(args.url)
    body = args.body.encode()
    req = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {u.netloc}\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    sel = selectors.DefaultSelector()
    tails: dict[socket.socket, bytes] = {}
    for _ in range(args.concurrency):
        s = socket.create_connection((u.hostname or "127.0.0.1", u.port or 80))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        s.sendall(req)
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
        tails[s] = b""
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    total = 0
    ended = 0
    while tails:
        for key, _ in sel.select():
            s = key.fileobj  # type: ignore[assignment]
            try:
                n = s.recv_into(buf)
            except BlockingIOError:
                continue
            total += n
            tail = (tails[s] + bytes(view[max(0, n - 8):n]))[-8:] if n else tails[s]
            if n == 0 or tail.endswith(LAST_CHUNK):
                sel.unregister(s)
                s.close()
                del tails[s]
                ended += n > 0
            else:
                tails[s] = tail
    json.dump({"bytes": total, "streams": ended}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
