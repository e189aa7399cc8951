"""Reading a log fast and in constant memory: keyword prefilter over big blocks, and follow.

The stats lines are a small part of a busy engine log (uvicorn access lines, request logs),
so the reader never splits the file into lines: it reads 1 MiB blocks into one reused
buffer, searches each for the engine keywords with `bytes.find` and hands on only the lines
that hold one. `follow_blocks` tails a growing file and survives rotation
(the path gets a new inode) and truncation (the file shrinks, copytruncate).

Compressed logs (gzip, also a rotated `engine.log.1.gz`; bzip2; xz), told by their first
bytes, not their name, are read through the decompressor, streaming, in the same constant
memory; offsets are then offsets in the decompressed text, and the seek
(which needs byte offsets of the file) leaves them to the sequential read. A compressed file
cannot be followed (it is written whole, once). zstd is not in Python's standard library:
refused with the command that decompresses it.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, Protocol

from decodescope.errors import UsageError
from decodescope.telemetry.logs.parse_counts import ParseCounts

READ_BYTES = 1 << 20  # read and search unit: stays in CPU cache across the keyword passes
FOLLOW_POLL_S = 0.25  # how often follow mode looks for new data, rotation and truncation
# A line longer than this is skipped and counted (ParseCounts.long_lines), never held whole: a
# 300 MB line, or a small gzip that expands to 10 GiB without a newline, must not fill memory.
# Stats lines are under 2 kB; request logs with long prompts stay far below it.
MAX_LINE_BYTES = 4 << 20


class _Buf(Protocol):
    def find(self, sub: bytes, start: int = ..., end: int = ...) -> int: ...
    def rfind(self, sub: bytes, start: int = ..., end: int = ...) -> int: ...
    def __getitem__(self, s: slice) -> bytes | bytearray: ...


def matching_lines(buf: _Buf, start: int, end: int,
                   keywords: tuple[bytes, ...]) -> list[bytes | bytearray]:
    """Lines of buf[start:end] (whole lines) holding any keyword, in file order."""
    return [buf[s:e] for s, e in _spans(buf, start, end, keywords)]


def _spans(buf: _Buf, start: int, end: int,
           keywords: tuple[bytes, ...]) -> list[tuple[int, int]]:
    """(start, end) of the lines of buf[start:end] (whole lines) holding any keyword, in file
    order; a line's end is its newline (or `end`)."""
    find, rfind = buf.find, buf.rfind
    ends: dict[int, int] = {}  # line start -> its end: a line two keywords find is one line
    for kw in keywords:
        i = find(kw, start, end)
        while i >= 0:
            s = rfind(b"\n", start, i) + 1 or start
            e = find(b"\n", i, end)
            if e < 0:
                ends[s] = end
                break
            ends[s] = e
            i = find(kw, e, end)
    if len(keywords) > 1:  # each keyword's lines are in order, not the lines of all of them
        return [(s, ends[s]) for s in sorted(ends)]
    return list(ends.items())


def _block_lines(buf: _Buf, end: int, keywords: Callable[[], tuple[bytes, ...]],
                 base: int = 0, at: list[int] | None = None,
                 start: int = 0) -> Iterator[bytes | bytearray]:
    """Candidate lines of buf[start:end]. When `keywords()` grows while they are handed out (a
    second engine found in the block: pipeline.LineReader), the rest of the block is searched
    again with the new keywords, so its other lines in this block are not missed."""
    kws = keywords()
    spans, i = _spans(buf, start, end, kws), 0
    while i < len(spans):
        s, e = spans[i]
        i += 1
        if at is not None:
            at[0] = base + s
        yield buf[s:e]
        now = keywords()
        if now is not kws:
            if not set(now) <= set(kws):
                spans, i = _spans(buf, e, end, now), 0
            kws = now


def read_lines(path: str, keywords: Callable[[], tuple[bytes, ...]],
               counts: ParseCounts, start: int = 0,
               stop: int | None = None, at: list[int] | None = None,
               tail: list[bool] | None = None) -> Iterator[bytes | bytearray]:
    """Candidate lines of a file (or of bytes [start, stop), both at line starts);
    `keywords()` is asked again for every block; `at[0]` is set to each line's byte offset
    (in the decompressed text for a compressed file) before it is handed out; `tail[0]` is
    set True before the file's last line is handed out when it has no newline (a line the
    writer may not have finished: pipeline.LineReader reads numbers from it only when it is
    complete), False otherwise.

    Blocks are read into one reused buffer (no allocation per block), small enough to stay in
    the CPU cache across the keyword passes; the buffer never grows past MAX_LINE_BYTES plus a
    block: a longer line is skipped to its newline and counted (`counts.long_lines`). Lines
    are not counted (a newline count costs as much as a keyword pass). A compressed file is
    read through its decompressor (only whole: start 0, no stop), a block at a time (a gzip
    bomb costs time, not memory); a damaged or cut one is read up to the damage
    (`counts.damaged`).
    """
    buf = bytearray(2 * READ_BYTES)
    view = memoryview(buf)
    carry = 0
    skipping = False  # inside an over-long line: drop bytes up to its newline
    kind = compression(path)
    if kind is not None and (start or stop is not None):
        raise ValueError("a compressed log is read whole")  # callers check compression()
    if tail is not None:
        tail[0] = False
    with open_log(path, kind) as f:
        pos = f.seek(start) if start else 0
        while True:
            if carry + READ_BYTES > len(buf):  # a line longer than a block: grow the buffer
                view.release()
                buf.extend(bytes(min(len(buf), MAX_LINE_BYTES + READ_BYTES - len(buf))))
                view = memoryview(buf)
            want = READ_BYTES if stop is None else min(READ_BYTES, stop - pos)
            try:
                if kind is None:
                    got = f.readinto(view[carry:carry + want]) if want > 0 else 0
                else:  # read1: what is decompressed so far, so a cut file loses no text
                    data = f.read1(want)
                    got = len(data)
                    view[carry:carry + got] = data
            except (EOFError, OSError, zlib.error, lzma.LZMAError) as exc:
                if kind is None:
                    raise
                counts.damaged = f"{type(exc).__name__}: {exc}"[:200]
                got = 0
            if not got:
                break
            pos += got
            end = carry + got
            counts.bytes_read += got
            first = 0
            if skipping:
                nl = buf.find(b"\n", 0, end)
                if nl < 0:
                    carry = 0
                    continue
                skipping, first = False, nl + 1
            cut = buf.rfind(b"\n", first, end) + 1
            if cut:
                yield from _block_lines(buf, cut, keywords, pos - end, at, first)
                first = cut
            carry = end - first
            if carry >= MAX_LINE_BYTES:  # no newline in sight: skip this line, keep no copy
                counts.long_lines += 1
                skipping, carry = True, 0
            elif carry and first:
                buf[0:carry] = view[first:end]
    if carry:
        if tail is not None:
            tail[0] = True
        yield from _block_lines(buf, carry, keywords, pos - carry, at)
        if tail is not None:
            tail[0] = False
    view.release()


# First bytes of a compressed file -> (name, opener); None: not readable here (zstd).
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x1f\x8b", "gzip"), (b"BZh", "bzip2"), (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
)
_OPEN: dict[str, Callable[[str], Any]] = {  # the caller closes what they open
    "gzip": lambda p: gzip.open(p, "rb"),  # noqa: SIM115
    "bzip2": lambda p: bz2.open(p, "rb"),  # noqa: SIM115
    "xz": lambda p: lzma.open(p, "rb"),  # noqa: SIM115
}


def compression(path: str) -> str | None:
    """"gzip" | "bzip2" | "xz" | "zstd" from the file's first bytes, or None (plain text or
    unreadable)."""
    try:
        with open(path, "rb") as f:
            head = f.read(6)
    except OSError:
        return None
    return next((name for magic, name in _MAGIC if head.startswith(magic)), None)


def open_log(path: str, kind: str | None = None) -> Any:
    """The log's bytes, decompressed when it is compressed (`kind`: compression(path))."""
    if kind is None:
        return open(path, "rb", buffering=0)  # noqa: SIM115 — the caller closes it
    return _OPEN[kind](path)


def head_bytes(path: str, n: int) -> bytes:
    """The first n bytes of the log (decompressed); b"" when it cannot be read."""
    try:
        with open_log(path, compression(path)) as f:
            return f.read(n)
    except (OSError, EOFError, zlib.error, lzma.LZMAError):
        return b""


def check_followable(path: str) -> None:
    """UsageError for a compressed file in follow mode: it is written once, whole, and
    appending to it is not how a log grows."""
    kind = compression(path) if os.path.isfile(path) else None
    if kind is not None:
        raise UsageError(f"a {kind}-compressed log cannot be followed", where=path,
                         remedy="Follow the live log (the uncompressed file the engine writes "
                                "to); read a compressed one without --follow")


class Tail(bytes):
    """The last line of a followed file, without its newline: `growing` True when the file
    may still be written (the writer is mid-line: never read for numbers), False when the file
    was replaced (rotation: the old file is finished)."""

    growing: bool = True


def _tail(data: bytes, growing: bool) -> Tail:
    t = Tail(data)
    t.growing = growing
    return t


def follow_blocks(path: str, counts: ParseCounts, *, stop: Callable[[], bool],
                  poll_s: float = FOLLOW_POLL_S, from_start: bool = True,
                  sleep: Callable[[float], object] = time.sleep, offset: int = 0
                  ) -> Iterator[bytes | Tail | None]:
    """Chunks of complete lines as the file grows; None after each idle poll; a `Tail` for a
    last line without a newline (when `stop()` ends the tail: growing; at a rotation: the old
    file's finished last line).

    Rotation: when `path` names a new file (inode change), the old one is read to its end
    and the new one from its start. Truncation: when the file shrinks below the read
    position, reading restarts at 0. `offset`: where to start (a line start). Ends when
    `stop()` is true. A line longer than
    MAX_LINE_BYTES is skipped to its newline and counted (`counts.long_lines`).
    """
    f = _open_wait(path, stop, poll_s, sleep)
    if f is None:
        return
    if not from_start:
        f.seek(0, os.SEEK_END)
    elif offset:  # from a byte offset (a probe's tail starts at the size the log had)
        f.seek(offset)
    rest = b""
    skipping = False

    def take(chunk: bytes) -> bytes:
        """Complete lines of rest + chunk; keeps the unfinished line, bounded."""
        nonlocal rest, skipping
        counts.bytes_read += len(chunk)
        if skipping:
            nl = chunk.find(b"\n")
            if nl < 0:
                return b""
            skipping, chunk = False, chunk[nl + 1:]
        block = rest + chunk if rest else chunk
        cut = block.rfind(b"\n") + 1
        rest = block[cut:]
        if len(rest) >= MAX_LINE_BYTES:
            counts.long_lines += 1
            rest, skipping = b"", True
        return block[:cut]

    try:
        while True:
            chunk = f.read(READ_BYTES)
            if chunk:
                done = take(chunk)
                if done:
                    yield done
                continue
            if stop():
                if rest:
                    yield _tail(rest, growing=True)
                return
            yield None
            sleep(poll_s)
            replaced, shrunk = _check(path, f)
            if replaced:
                while chunk := f.read(READ_BYTES):  # what the old file got before it went
                    done = take(chunk)
                    if done:
                        yield done
                if rest:
                    yield _tail(rest, growing=False)
                rest, skipping = b"", False
                f.close()
                counts.rotations += 1
                f = open(path, "rb")  # noqa: SIM115 — closed in finally / on next rotation
            elif shrunk:
                counts.truncations += 1
                rest, skipping = b"", False
                f.seek(0)
    finally:
        f.close()


def _open_wait(path: str, stop: Callable[[], bool], poll_s: float,
               sleep: Callable[[float], object]) -> BinaryIO | None:
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
    if compression(path) == "zstd":
        raise UsageError("log file is zstd-compressed, which this Python cannot read",
                         where=path, remedy="Decompress it first: zstd -d FILE (or read it "
                         "with zstdcat FILE > engine.log)")
