"""One fleet check in a process of its own, bounded by the check's `timeout_s`.

The exporter runs each check as `python -m decodescope.exporter.worker`: the check (spec and
store, JSON) goes in on stdin, its Outcome (JSON) comes back on the last line of stdout. A
check still running at its `timeout_s` is stopped (SIGTERM to its process group, so the runs it
stored are marked interrupted and its completed trials kept; SIGKILL after GRACE_S) and
recorded as timed out: a trickling endpoint holds its own check, never the fleet's schedule.
No secret crosses a command line: the API key is read from the environment variable the
check names, inside the worker.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from decodescope.exporter.check_job import run_check
from decodescope.exporter.config import CheckSpec
from decodescope.exporter.outcome import Outcome

GRACE_S = 5.0  # after SIGTERM, time to mark the run interrupted before SIGKILL
TIMEOUT_KIND = "CheckTimeout"

_LIVE: set[subprocess.Popen[bytes]] = set()
_STOPPED: set[int] = set()  # pids stopped because the exporter stops
_LIVE_LOCK = threading.Lock()


def spec_to_dict(spec: CheckSpec) -> dict[str, Any]:
    d = asdict(spec)
    d["labels"] = [list(kv) for kv in spec.labels]
    return d


def spec_from_dict(d: dict[str, Any]) -> CheckSpec:
    d = dict(d)
    d["labels"] = tuple((str(k), str(v)) for k, v in d.get("labels") or ())
    return CheckSpec(**d)


def run_check_bounded(spec: CheckSpec, store_path: str | None,
                      clock: Callable[[], float] = time.time) -> Outcome:
    """Run the check in a worker process; stop it at spec.timeout_s. Never raises."""
    t0 = time.monotonic()
    payload = json.dumps({"spec": spec_to_dict(spec), "store": store_path}).encode()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "decodescope.exporter.worker"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
    except OSError as e:
        return Outcome(clock(), time.monotonic() - t0, error_kind="WorkerError",
                       error=f"cannot start the check's worker process: {e.strerror or e}")
    with _LIVE_LOCK:
        _LIVE.add(proc)
    try:
        try:
            out, err = proc.communicate(payload, timeout=spec.timeout_s)
        except subprocess.TimeoutExpired:
            _stop(proc)
            return Outcome(clock(), time.monotonic() - t0, error_kind=TIMEOUT_KIND,
                           error=f"no result within timeout_s = {spec.timeout_s:g} s: the check "
                                 "was stopped (its runs are kept, marked interrupted)",
                           timed_out=True)
    finally:
        with _LIVE_LOCK:
            _LIVE.discard(proc)
            stopped = proc.pid in _STOPPED
            _STOPPED.discard(proc.pid)
    if stopped:
        return Outcome(clock(), time.monotonic() - t0, error_kind="Stopped",
                       error="stopped with the exporter (its runs are kept, marked interrupted)")
    return _parse(out, err, proc.returncode, clock, time.monotonic() - t0)


def stop_all() -> None:
    """Stop every check worker still running (the exporter is stopping)."""
    with _LIVE_LOCK:
        procs = list(_LIVE)
        _STOPPED.update(p.pid for p in procs)
    for p in procs:
        _signal(p, signal.SIGTERM)


def _signal(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)  # its own session: the worker and anything it started


def _stop(proc: subprocess.Popen[bytes]) -> None:
    _signal(proc, signal.SIGTERM)
    try:
        proc.communicate(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        _signal(proc, signal.SIGKILL)
        proc.communicate()


def _parse(out: bytes, err: bytes, rc: int, clock: Callable[[], float],
           duration_s: float) -> Outcome:
    lines = out.decode("utf-8", "replace").strip().splitlines()
    if rc == 0 and lines:
        try:
            return Outcome.from_dict(json.loads(lines[-1]))
        except (ValueError, TypeError):
            pass
    from decodescope.redact import redact_text, strip_controls

    tail = [ln for ln in err.decode("utf-8", "replace").splitlines() if ln.strip()]
    why = strip_controls(redact_text(tail[-1].strip()))[:300] if tail else "no output"
    return Outcome(clock(), duration_s, error_kind="WorkerError",
                   error=f"the check's worker process ended with exit {rc}: {why}")


def main() -> int:
    from decodescope.probe.client import stream_limits
    from decodescope.signals import sigterm_as_interrupt

    data = json.loads(sys.stdin.read())
    spec = spec_from_dict(data["spec"])
    try:
        # one request never outlasts the whole check either
        with sigterm_as_interrupt(), stream_limits(deadline_s=spec.timeout_s):
            o = run_check(spec, data.get("store"))
    except KeyboardInterrupt:
        return 143
    sys.stdout.write(json.dumps(o.to_dict()) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
