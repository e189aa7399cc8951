"""SIGTERM ends a command the way Ctrl-C does.

A scheduler (cron's timeout, systemd, Kubernetes, `timeout(1)`) stops a probe with SIGTERM.
Python's default for SIGTERM is to die on the spot, which left the run `running` forever. Inside
`sigterm_as_interrupt()` SIGTERM raises `Terminated`, a KeyboardInterrupt: every path that keeps
the completed trials and marks the run `interrupted` on Ctrl-C (run/runner.py) does the same
on SIGTERM, and the CLI exits 143 (128 + SIGTERM) instead of 130.

A second SIGTERM while the first is being handled ends the process at once (the default
action); the run it leaves `running` is then shown as `abandoned` (store/runs.py), like one left
by `kill -9`.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived (raised where Ctrl-C raises KeyboardInterrupt)."""

    signal_name = "SIGTERM"

    def __init__(self) -> None:
        super().__init__("terminated by SIGTERM")


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
    raise Terminated()


def stop_signal(exc: BaseException | None) -> str | None:
    """"SIGTERM" / "SIGINT" when `exc` (or what it was raised from, e.g. click's Abort) is an
    interrupt; None otherwise."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, Terminated):
            return "SIGTERM"
        if isinstance(exc, KeyboardInterrupt):
            return "SIGINT"
        exc = exc.__cause__ or exc.__context__
    return None


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Inside this block SIGTERM raises `Terminated`. Only in the main thread (where Python runs
    signal handlers); a SIGTERM the process was started with ignored stays ignored. The previous
    handler comes back on exit."""
    installed = False
    previous: object = None
    if threading.current_thread() is threading.main_thread():
        try:
            previous = signal.getsignal(signal.SIGTERM)
            if previous != signal.SIG_IGN:
                signal.signal(signal.SIGTERM, _on_sigterm)
                installed = True
        except (ValueError, OSError):  # no signals here (an embedded interpreter)
            installed = False
    try:
        yield
    finally:
        if installed:
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(signal.SIGTERM, previous if previous is not None  # type: ignore[arg-type]
                              else signal.SIG_DFL)
