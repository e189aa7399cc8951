"""State files of engines started by decodescope: one JSON record + one log per port.

    <state dir>/engine-<port>.json   pid, process create time, cmdline, settings, log path
    <state dir>/engine-<port>.log    the server's stdout+stderr since its last start

`stop` kills a pid only when the live process still has the recorded create time and cmdline,
so a recycled pid is never touched. State dir: platformdirs.user_state_dir("decodescope")/engines,
env DECODESCOPE_ENGINE_STATE.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import platformdirs
import psutil

from decodescope.redact import REDACTED

STATE_ENV = "DECODESCOPE_ENGINE_STATE"
STATE_SCHEMA_VERSION = 1
# psutil derives create_time from boot time + clock ticks; repeated reads agree far closer
# than this, while a recycled pid would have started later by at least the engine's uptime.
CREATE_TIME_TOLERANCE_S = 0.5


@dataclass(frozen=True)
class RunningEngine:
    """An engine process decodescope started (as recorded in its state file)."""

    pid: int
    port: int
    url: str
    log_path: Path
    cmdline: tuple[str, ...]  # secrets redacted: a redacted word matches any live word
    started_at: float  # unix time
    create_time: float  # psutil create time of the process
    ready_s: float | None = None  # start -> /health 200
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def uptime_s(self) -> float:
        return max(0.0, time.time() - self.create_time)

    def to_dict(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "port": self.port,
            "url": self.url,
            "log_path": str(self.log_path),
            "cmdline": list(self.cmdline),
            "started_at": self.started_at,
            "uptime_s": round(self.uptime_s, 1),
            "ready_s": self.ready_s,
            "settings": self.settings,
        }


def state_dir(override: Path | None = None) -> Path:
    if override is not None:
        path = override
    elif os.environ.get(STATE_ENV):
        path = Path(os.environ[STATE_ENV])
    else:
        path = Path(platformdirs.user_state_dir("decodescope")) / "engines"
    path.mkdir(parents=True, exist_ok=True)
    return path


def record_path(directory: Path, port: int) -> Path:
    return directory / f"engine-{port}.json"


def log_path(directory: Path, port: int) -> Path:
    return directory / f"engine-{port}.log"


def write_record(directory: Path, engine: RunningEngine) -> None:
    data = {"schema_version": STATE_SCHEMA_VERSION, **engine.to_dict()}
    data.pop("uptime_s")
    data["create_time"] = engine.create_time
    target = record_path(directory, engine.port)
    tmp = target.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(target)


def read_record(directory: Path, port: int) -> RunningEngine | None:
    """The recorded engine on this port; None if there is no (readable) record."""
    try:
        data = json.loads(record_path(directory, port).read_text())
        return RunningEngine(
            pid=int(data["pid"]),
            port=int(data["port"]),
            url=str(data["url"]),
            log_path=Path(data["log_path"]),
            cmdline=tuple(data["cmdline"]),
            started_at=float(data["started_at"]),
            create_time=float(data["create_time"]),
            ready_s=data.get("ready_s"),
            settings=dict(data.get("settings") or {}),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remove_record(directory: Path, port: int) -> None:
    record_path(directory, port).unlink(missing_ok=True)


def recorded_ports(directory: Path) -> list[int]:
    ports = []
    for path in directory.glob("engine-*.json"):
        suffix = path.stem.removeprefix("engine-")
        if suffix.isdigit():
            ports.append(int(suffix))
    return sorted(ports)


def live_process(engine: RunningEngine) -> psutil.Process | None:
    """The live process behind a record, or None when the pid is gone, a zombie, or reused."""
    try:
        proc = psutil.Process(engine.pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        if abs(proc.create_time() - engine.create_time) > CREATE_TIME_TOLERANCE_S:
            return None
        if not _same_command(tuple(proc.cmdline()), engine.cmdline):
            return None
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
    return proc


def _same_command(actual: tuple[str, ...], recorded: tuple[str, ...]) -> bool:
    """Equal, or the recorded command run through an interpreter (a `#!` script). The record
    holds the command with its secrets redacted: a redacted word stands for any live word."""
    if not recorded or len(actual) < len(recorded):
        return False
    tail = actual[-len(recorded) :]
    return all(r == REDACTED or a == r for a, r in zip(tail, recorded, strict=True))
