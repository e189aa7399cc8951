"""Reading a log fast and in constant memory: keyword prefilter over big blocks, and follow.

The stats lines are a small part of a busy engine log (uvicorn access lines, request logs),
so the reader never splits the whole file into lines: it searches each block (a memory map
of a regular file, else 8 MiB reads) for the engine keywords with `bytes.find` and hands on
only the lines that hold one. `follow_blocks` tails a growing file and survives rotation
(the path gets a new inode) and truncation (the file shrinks, copytruncate).
"""

from __future__ import annotations

import mmap
import os
import stat
import time
from collections.abc import Callable, Iterator
from typing import BinaryIO, Protocol

from decodescope.telemetry.logs.records import ParseCounts

BLOCK_BYTES = 32 << 20  # search unit; big enough to amortize per-block work, small for memory
READ_BYTES = 8 << 20  # read size for pipes and follow mode
FOLLOW_POLL_S = 0.25  # how often follow mode looks for new data, rotation and truncation


class _Buf(Protocol):
    def find(self, sub: bytes, start: int = ..., end: int = ...) -> int: ...
    def rfind(self, sub: bytes, start: int = ..., end: int = ...) -> int: ...
    def __getitem__(self, s: slice) -> bytes: ...


def matching_lines(buf: _Buf, start: int, end: int, keywords: tuple[bytes, ...]) -> list[bytes]:
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


def read_lines(path: str, keywords: Callable[[], tuple[bytes, ...]], counts: ParseCounts,
               *, count_lines: bool = True) -> Iterator[bytes]:
    """Candidate lines of a whole file; `keywords()` is asked again for every block."""
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        if stat.S_ISREG(st.st_mode) and st.st_size > 0:
            yield from _mapped(f, st.st_size, keywords, counts, count_lines)
        elif not stat.S_ISREG(st.st_mode):
            yield from _streamed(f, keywords, counts)


def _mapped(f: BinaryIO, size: int, keywords: Callable[[], tuple[bytes, ...]],
            counts: ParseCounts, count_lines: bool) -> Iterator[bytes]:
    with mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as mm:
        pos = 0
        while pos < size:
            end = min(pos + BLOCK_BYTES, size)
            if end < size:
                cut = mm.rfind(b"\n", pos, end)
                if cut < 0:  # one line longer than a block
                    cut = mm.find(b"\n", end)
                end = size if cut < 0 else cut + 1
            if count_lines:
                counts.lines_total += mm[pos:end].count(b"\n")
            lines = matching_lines(mm, pos, end, keywords())
            counts.bytes_read += end - pos
            pos = end
            yield from lines
        if count_lines and size and mm[size - 1:size] != b"\n":
            counts.lines_total += 1


def _streamed(f: BinaryIO, keywords: Callable[[], tuple[bytes, ...]],
              counts: ParseCounts) -> Iterator[bytes]:
    rest = b""
    while True:
        chunk = f.read(READ_BYTES)
        if not chunk:
            break
        block = rest + chunk
        cut = block.rfind(b"\n") + 1
        rest = block[cut:]
        counts.bytes_read += len(chunk)
        counts.lines_total += block.count(b"\n", 0, cut)
        yield from matching_lines(block, 0, cut, keywords())
    if rest:
        counts.lines_total += 1
        yield from matching_lines(rest, 0, len(rest), keywords())


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
                    counts.lines_total += block.count(b"\n", 0, cut)
                    yield block[:cut]
                continue
            if stop():
                if rest:
                    counts.lines_total += 1
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
                    counts.lines_total += block.count(b"\n")
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
