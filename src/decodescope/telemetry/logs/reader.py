"""Reading a log fast and in constant memory: keyword prefilter over big blocks, and follow.

The stats lines are a small part of a busy engine log (uvicorn access lines, request logs),
so the reader never splits the file into lines: it reads 1 MiB blocks into one reused
buffer, searches each for the engine keywords with `bytes.find` and hands on only the lines
that hold one. `follow_blocks` tails a growing file and survives rotation
(the path gets a new inode) and truncation (the file shrinks, copytruncate).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import BinaryIO, Protocol

from decodescope.errors import UsageError
from decodescope.telemetry.logs.records import ParseCounts

READ_BYTES = 1 << 20  # read and search unit: stays in CPU cache across the keyword passes
FOLLOW_POLL_S = 0.25  # how often follow mode looks for new data, rotation and truncation


class _Buf(Protocol):
    def find(self, sub: bytes, start: int = ..., end: int = ...) -> int: ...
    def rfind(self, sub: bytes, start: int = ..., end: int = ...) -> int: ...
    def __getitem__(self, s: slice) -> bytes | bytearray: ...


def matching_lines(buf: _Buf, start: int, end: int,
                   keywords: tuple[bytes, ...]) -> list[bytes | bytearray]:
    """Lines of buf[start:end] (whole lines) holding any keyword, in file order."""
    find, rfind = buf.find, buf.rfind
    starts: list[int] = []
    for kw in keywords:
        i = find(kw, start, end)
        while i >= 0:
            s = rfind(b"\n", start, i) + 1 or start
            starts.append(s)
            e = find(b"\n", i, end)
            if e < 0:
                break
            i = find(kw, e, end)
    if len(keywords) > 1:
        starts = sorted(set(starts))
    out = []
    for s in starts:
        e = find(b"\n", s, end)
        out.append(buf[s:e if e >= 0 else end])
    return out


def read_lines(path: str, keywords: Callable[[], tuple[bytes, ...]],
               counts: ParseCounts) -> Iterator[bytes | bytearray]:
    """Candidate lines of a whole file; `keywords()` is asked again for every block.

    Blocks are read into one reused buffer (no allocation per block), small enough to stay in
    the CPU cache across the keyword passes. Lines are not counted (a newline count costs as
    much as a keyword pass).
    """
    buf = bytearray(2 * READ_BYTES)
    view = memoryview(buf)
    carry = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            if carry + READ_BYTES > len(buf):  # a line longer than a block: grow the buffer
                view.release()
                buf.extend(bytes(len(buf)))
                view = memoryview(buf)
            got = f.readinto(view[carry:carry + READ_BYTES])
            if not got:
                break
            end = carry + got
            counts.bytes_read += got
            cut = buf.rfind(b"\n", 0, end) + 1
            if cut:
                yield from matching_lines(buf, 0, cut, keywords())
                buf[0:end - cut] = view[cut:end]
            carry = end - cut
    view.release()
    if carry:
        yield from matching_lines(buf, 0, carry, keywords())


def follow_blocks(path: str, counts: ParseCounts, *, stop: Callable[[], bool],
                  poll_s: float = FOLLOW_POLL_S, from_start: bool = True,
                  sleep: Callable[[float], None] = time.sleep) -> Iterator[bytes | None]:
    """Chunks of complete lines as the file grows; None after each idle poll.

    Rotation: when `path` names a new file (inode change), the old one is read to its end
    and the new one from its start. Truncation: when the file shrinks below the read
    position, reading restarts at 0. Ends when `stop()` is true (after a final partial line).
    """
    f = _open_wait(path, stop, poll_s, sleep)
    if f is None:
        return
    if not from_start:
        f.seek(0, os.SEEK_END)
    rest = b""
    try:
        while True:
            chunk = f.read(READ_BYTES)
            if chunk:
                counts.bytes_read += len(chunk)
                block = rest + chunk
                cut = block.rfind(b"\n") + 1
                rest = block[cut:]
                if cut:
                    yield block[:cut]
                continue
            if stop():
                if rest:
                    yield rest + b"\n"
                return
            yield None
            sleep(poll_s)
            replaced, shrunk = _check(path, f)
            if replaced:
                tail = f.read()  # whatever the old file got before it was replaced
                if tail:
                    counts.bytes_read += len(tail)
                    block = rest + tail
                    yield block if block.endswith(b"\n") else block + b"\n"
                rest = b""
                f.close()
                counts.rotations += 1
                f = open(path, "rb")  # noqa: SIM115 — closed in finally / on next rotation
            elif shrunk:
                counts.truncations += 1
                rest = b""
                f.seek(0)
    finally:
        f.close()


def _open_wait(path: str, stop: Callable[[], bool], poll_s: float,
               sleep: Callable[[float], None]) -> BinaryIO | None:
    while True:
        try:
            return open(path, "rb")  # noqa: SIM115 — the caller closes it
        except FileNotFoundError:
            if stop():
                return None
            sleep(poll_s)


def _check(path: str, f: BinaryIO) -> tuple[bool, bool]:
    """(replaced by a new file, truncated below our position)."""
    try:
        now = os.stat(path)
    except FileNotFoundError:
        return False, False  # mid-rotation: keep the old file until the new one appears
    mine = os.fstat(f.fileno())
    if (now.st_ino, now.st_dev) != (mine.st_ino, mine.st_dev):
        return True, False
    return False, mine.st_size < f.tell()


def check_log_path(path: str) -> None:
    """UsageError with a remedy when `path` is not a readable file."""
    if not os.path.exists(path):
        raise UsageError("log file not found", where=path,
                         remedy="Check the path; for a server started by systemd or docker, "
                                "save its log first (journalctl -u NAME > engine.log, "
                                "docker logs NAME > engine.log 2>&1)")
    if os.path.isdir(path):
        raise UsageError("log path is a directory", where=path, remedy="Give the log file itself")
    if not os.access(path, os.R_OK):
        raise UsageError("log file is not readable", where=path,
                         remedy="Check its permissions (or run with sudo)")
