"""One exception tree. Every user-facing failure says cause, where, and remedy.

    DecodescopeError                 (exit code carried by the class)
    ├── UsageError                   bad input from the user: options, files, selectors  -> 2
    │   ├── CaliberError             unknown caliber, malformed caliber file             -> 2
    │   ├── StoreError               unknown run, bad store path, schema too new         -> 2
    │   └── ResourceLimitError       the machine's limits (open files) cannot carry it   -> 2
    ├── EndpointError                cannot talk to the server                           -> 4
    │   ├── UnreachableError         connection refused / DNS / timeout                  -> 4
    │   ├── AuthError                401 / 403                                           -> 4
    │   └── ModelNotServedError      404 on model / model not in /v1/models              -> 4
    ├── ProtocolError                server answered but broke the protocol              -> 5
    │   ├── NotSSEError              non-SSE or HTML response to a streaming request
    │   ├── MalformedSSEError        SSE data that is not JSON / not a chunk
    │   ├── ServerError              5xx / 429 response
    │   ├── StreamClosedError        connection closed mid-stream (no [DONE], no finish)
    │   └── ResponseTooLargeError    more than the caliber can produce (tokens or bytes)
    ├── CaliberMissedError           realized run did not meet its caliber               -> 6
    └── EngineError                  embedded engine install/start/stop failed           -> 7

The CLI catches DecodescopeError and prints `error: {cause} ({where}). {remedy}` on one line;
tracebacks only with --debug. Any other exception is a bug: one line, exit 70
(ExitCode.INTERNAL), never 1 (docs/faults.md).
"""

from __future__ import annotations

import sqlite3

from decodescope.exitcodes import ExitCode


class DecodescopeError(Exception):
    exit_code: ExitCode = ExitCode.USAGE

    def __init__(self, cause: str, *, where: str | None = None, remedy: str | None = None):
        super().__init__(cause)
        self.cause = cause
        self.where = where
        self.remedy = remedy

    def one_line(self) -> str:
        text = self.cause
        if self.where:
            text += f" ({self.where})"
        text = text.rstrip(".") + "."
        if self.remedy:
            text += f" {self.remedy.rstrip('.')}."
        return text


class UsageError(DecodescopeError):
    exit_code = ExitCode.USAGE


class CaliberError(UsageError):
    pass


class StoreError(UsageError):
    pass


class ResourceLimitError(UsageError):
    pass


class EndpointError(DecodescopeError):
    exit_code = ExitCode.UNREACHABLE


class UnreachableError(EndpointError):
    pass


class AuthError(EndpointError):
    pass


class ModelNotServedError(EndpointError):
    pass


class ProtocolError(DecodescopeError):
    exit_code = ExitCode.PROTOCOL


class NotSSEError(ProtocolError):
    pass


class MalformedSSEError(ProtocolError):
    pass


class ServerError(ProtocolError):
    pass


class StreamClosedError(ProtocolError):
    pass


class ResponseTooLargeError(ProtocolError):
    pass


class CaliberMissedError(DecodescopeError):
    exit_code = ExitCode.CALIBER_MISSED


class EngineError(DecodescopeError):
    exit_code = ExitCode.ENGINE


DAMAGED_REMEDY = ("Move the file aside and let the next probe start a new store; "
                  "`sqlite3 FILE .recover` can salvage its runs")


WRITE_FAILED_REMEDY = ("Free space or fix the disk under the store (see `dmesg`), or pass "
                       "another --store; what was stored before is kept (the failed write was "
                       "rolled back)")
# errno names that say the filesystem, not the file, failed a write
_WRITE_FAULTS = {"EIO", "ENOSPC", "EROFS", "EFBIG", "EDQUOT"}
_PROBE_BYTES = 1 << 20  # written (and removed) next to the store to see whether writes fail


def filesystem_write_fault(path: str) -> str | None:
    """Whether the filesystem under `path` fails writes now: 'ENOSPC: No space left on device'
    (the errno of a 1 MiB write, fsync'd, next to the file, then removed), or None when the
    write succeeds or failed for another reason (permissions are not a filesystem fault)."""
    import contextlib
    import errno
    import os
    import tempfile

    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return None
    name = None
    try:
        fd, name = tempfile.mkstemp(prefix=".decodescope-write-check-", dir=folder)
        with os.fdopen(fd, "wb") as f:
            block = b"\0" * 65536
            for _ in range(_PROBE_BYTES // len(block)):
                f.write(block)
            f.flush()
            os.fsync(f.fileno())
        return None
    except OSError as e:
        code = errno.errorcode.get(e.errno or 0, "")
        return f"{code}: {e.strerror}" if code in _WRITE_FAULTS else None
    finally:
        if name is not None:
            with contextlib.suppress(OSError):
                os.unlink(name)


def store_error(exc: sqlite3.Error, where: str) -> StoreError:
    """The one-line StoreError for an SQLite failure: cause + path + what to do. A filesystem
    that fails writes (EIO, ENOSPC, EROFS) is said as a write failure, also where SQLite's own
    words were 'malformed' (it can read back a page whose write failed)."""
    text = str(exc) or type(exc).__name__
    low = text.lower()
    code = str(getattr(exc, "sqlite_errorname", "") or "")  # Python >= 3.11
    if code.startswith("SQLITE_FULL") or "database or disk is full" in low:
        return StoreError(f"the run store could not be written: the disk is full ({text})",
                          where=where, remedy=WRITE_FAILED_REMEDY)
    if code.startswith("SQLITE_IOERR") or "disk i/o error" in low:
        fault = filesystem_write_fault(where)
        how = f"the filesystem fails writes: {fault}" if fault else "an I/O error"
        return StoreError(f"the run store could not be written or read: {how} ({text})",
                          where=where, remedy=WRITE_FAILED_REMEDY)
    if "malformed" in low or "not a database" in low or "corrupt" in low:
        fault = filesystem_write_fault(where)
        if fault:
            return StoreError(f"the run store could not be written: the filesystem fails "
                              f"writes ({fault}; SQLite then read: {text})", where=where,
                              remedy=WRITE_FAILED_REMEDY)
        return StoreError(f"the run store is damaged: {text}", where=where, remedy=DAMAGED_REMEDY)
    if "readonly" in low or "read-only" in low:
        return StoreError(f"the run store is read-only: {text}", where=where,
                          remedy="Read commands (runs list/show/export) work on it; write with another --store")
    if "locked" in low or "busy" in low:
        return StoreError(f"the run store stayed locked by another process: {text}", where=where,
                          remedy="Wait for the other decodescope process to finish, then rerun")
    if "no such table" in low or "no such column" in low:
        return StoreError(f"the run store lacks a table this command needs: {text}", where=where,
                          remedy="Run any write command (e.g. `decodescope probe`) once to upgrade it")
    return StoreError(f"run store error: {text}", where=where,
                      remedy="Check the file and its permissions, or pass another --store")
