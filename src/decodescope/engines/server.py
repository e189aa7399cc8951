"""Start, stop and list the embedded llama-server (design.md §7).

    with running_engine(EngineSettings(port=0, spec="ngram")) as eng:
        ...  # eng.url is an OpenAI-compatible endpoint with /metrics

`start_engine` launches the server in its own session (it outlives the CLI), records pid +
process create time + cmdline in the state dir and waits for /health 200 (503 while loading).
`stop_engine` ends exactly that process (SIGTERM, then SIGKILL after a grace period).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Literal

import httpx
import psutil

from decodescope.edge import HEALTH, SideEndpoint, side_request
from decodescope.engines import process, state
from decodescope.engines.install import EngineInstall, require_install
from decodescope.engines.state import RunningEngine
from decodescope.errors import DecodescopeError, EngineError, UsageError
from decodescope.redact import redact_cmdline

SpecMode = Literal["none", "ngram", "synth"]
SPEC_MODES: tuple[str, ...] = ("none", "ngram", "synth")
HOST = process.HOST
# Not llama-server's own default (8080), so the embedded engine does not collide with a user's
# own llama.cpp server on the same machine.
DEFAULT_PORT = 8181
DEFAULT_CTX = 8192
DEFAULT_HEALTH_TIMEOUT_S = 60.0  # loads in ~1.5 s idle; 33 s measured at load 12 on 2 cores
STOP_GRACE_S = 10.0  # SIGTERM -> SIGKILL; llama-server exits within a second when idle
TEMPLATE_NAME = "gemma.jinja"
_POLL_S = 0.1


@dataclass(frozen=True)
class EngineSettings:
    port: int = DEFAULT_PORT  # 0: pick a free loopback port
    threads: int | None = None  # None: physical cores
    slots: int = 1
    ctx: int = DEFAULT_CTX
    spec: SpecMode = "none"
    spec_synth_len: float | None = None  # target MAL for spec="synth"
    ngram_n: int = 3
    ngram_m: int = 8
    extra: tuple[str, ...] = ()
    health_timeout_s: float = DEFAULT_HEALTH_TIMEOUT_S

    def validate(self) -> None:
        problems = []
        if not 0 <= self.port <= 65535:
            problems.append(f"port {self.port} is not in 0..65535")
        if self.threads is not None and self.threads < 1:
            problems.append("--threads must be >= 1")
        if self.slots < 1:
            problems.append("--slots must be >= 1")
        if self.ctx < 256:
            problems.append("--ctx must be >= 256")
        if self.spec not in SPEC_MODES:
            problems.append(f"--spec must be one of {', '.join(SPEC_MODES)}")
        if self.spec == "synth" and self.spec_synth_len is None:
            problems.append("--spec synth needs --spec-synth-len L (target MAL, e.g. 3)")
        if self.spec_synth_len is not None and self.spec != "synth":
            problems.append("--spec-synth-len only applies with --spec synth")
        if self.spec_synth_len is not None and self.spec_synth_len < 1:
            problems.append("--spec-synth-len must be >= 1 (it includes the target token)")
        if self.ngram_n < 1 or self.ngram_m < 1:
            problems.append("--ngram-n and --ngram-m must be >= 1")
        if problems:
            raise UsageError("; ".join(problems), where="engine settings")


def default_threads() -> int:
    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def spec_args(settings: EngineSettings) -> list[str]:
    if settings.spec == "none":
        return []
    args = [
        "--spec-type", "ngram-simple",
        "--spec-ngram-simple-size-n", str(settings.ngram_n),
        "--spec-ngram-simple-size-m", str(settings.ngram_m),
    ]  # fmt: skip
    if settings.spec == "synth":
        args += ["--spec-synth-len", f"{settings.spec_synth_len:g}"]
    return args


def build_args(
    binary: Path, model: Path, template: Path, settings: EngineSettings, port: int
) -> list[str]:
    """The full llama-server command line (pure)."""
    threads = settings.threads or default_threads()
    return [
        str(binary),
        "-m", str(model),
        "--host", HOST,
        "--port", str(port),
        "--metrics",
        "-t", str(threads),
        "-c", str(settings.ctx),
        "-np", str(settings.slots),
        "--chat-template-file", str(template),
        *spec_args(settings),
        *settings.extra,
    ]  # fmt: skip


def start_engine(
    settings: EngineSettings | None = None,
    *,
    install: EngineInstall | None = None,
    state_dir: Path | None = None,
) -> RunningEngine:
    settings = settings or EngineSettings()
    settings.validate()
    install = install or require_install()
    directory = state.state_dir(state_dir)
    port = settings.port or process.free_port()
    _check_port_free(directory, port)

    template = write_template(directory)
    cmd = build_args(install.binary, install.model, template, settings, port)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
    return launch(
        cmd, env=env, port=port, directory=directory,
        settings={**asdict(settings), "port": port, "extra": list(settings.extra)},
        health_timeout_s=settings.health_timeout_s, name="llama-server",
    )  # fmt: skip


def write_template(directory: Path) -> Path:
    """The project's Gemma chat template, copied beside the state files."""
    template = directory / TEMPLATE_NAME
    template.write_text(resources.files("decodescope.engines").joinpath(TEMPLATE_NAME).read_text())
    return template


def launch(
    cmd: list[str],
    *,
    env: dict[str, str],
    port: int,
    directory: Path,
    settings: dict[str, object],
    health_timeout_s: float,
    name: str,
    cwd: Path | None = None,
) -> RunningEngine:
    """Start a server command in its own session, record it, wait for /health 200.

    Shared by every embedded engine: the log goes to the state dir's engine-<port>.log, the
    record (pid + create time + cmdline) to engine-<port>.json. On failure the process (and
    any children it started) is ended and the record removed.
    """
    log = state.log_path(directory, port)
    t0 = time.monotonic()
    with open(log, "wb") as log_fh:
        proc = subprocess.Popen(
            cmd, stdout=log_fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, start_new_session=True, cwd=cwd,
        )  # fmt: skip
    process.CHILDREN[proc.pid] = proc
    try:
        create_time = psutil.Process(proc.pid).create_time()
    except psutil.NoSuchProcess:
        create_time = time.time()
    engine = RunningEngine(
        pid=proc.pid,
        port=port,
        url=f"http://{HOST}:{port}",
        log_path=log,
        cmdline=tuple(redact_cmdline(cmd)),  # a key passed with --extra never reaches the state file
        started_at=time.time(),
        create_time=create_time,
        settings=dict(settings),
    )
    state.write_record(directory, engine)
    try:
        _wait_healthy(proc, engine, health_timeout_s, name)
    except BaseException:
        grace = float(settings.get("stop_grace_s") or STOP_GRACE_S)  # type: ignore[arg-type]
        terminate_tree(proc.pid, grace)
        state.remove_record(directory, port)
        raise
    engine = replace(engine, ready_s=round(time.monotonic() - t0, 2))
    state.write_record(directory, engine)
    return engine


def terminate_tree(pid: int, grace_s: float) -> str:
    """SIGTERM the process, then end any of its children that outlived it (by pid)."""
    try:
        kids = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        kids = []
    used = process.terminate(pid, grace_s)
    for kid in kids:
        try:
            if kid.is_running() and kid.status() != psutil.STATUS_ZOMBIE:
                process.terminate(kid.pid, grace_s)
        except psutil.Error:
            continue
    return used


@dataclass(frozen=True)
class StopResult:
    port: int
    pid: int | None
    was_running: bool
    signal: str | None  # "SIGTERM" / "SIGKILL" / None
    note: str


def stop_engine(
    port: int, *, state_dir: Path | None = None, grace_s: float = STOP_GRACE_S
) -> StopResult:
    directory = state.state_dir(state_dir)
    record = state.read_record(directory, port)
    if record is None:
        state.remove_record(directory, port)  # an unreadable record is no engine
        return StopResult(
            port, None, False, None, f"no engine started by decodescope on port {port}"
        )
    proc = state.live_process(record)
    if proc is None:
        process.reap(record.pid)
        state.remove_record(directory, port)
        return StopResult(port, record.pid, False, None, "not running (stale state removed)")
    grace = float(record.settings.get("stop_grace_s") or grace_s)
    used = terminate_tree(record.pid, grace)
    state.remove_record(directory, port)
    return StopResult(port, record.pid, True, used, f"stopped pid {record.pid} ({used})")


def list_engines(*, state_dir: Path | None = None, prune: bool = True) -> list[RunningEngine]:
    """Engines started by decodescope that are still running; stale records are removed."""
    directory = state.state_dir(state_dir)
    alive = []
    for port in state.recorded_ports(directory):
        record = state.read_record(directory, port)
        if record is not None and state.live_process(record) is not None:
            alive.append(record)
        elif prune:
            state.remove_record(directory, port)
    return alive


@contextlib.contextmanager
def running_engine(
    settings: EngineSettings | None = None,
    *,
    install: EngineInstall | None = None,
    state_dir: Path | None = None,
) -> Iterator[RunningEngine]:
    """Start an engine (default: a free port) and stop it on exit, whatever happens."""
    engine = start_engine(settings or EngineSettings(port=0), install=install, state_dir=state_dir)
    try:
        yield engine
    finally:
        stop_engine(engine.port, state_dir=state_dir)
        if engine.pid in process.CHILDREN:  # our own child, whatever its record says
            terminate_tree(engine.pid, STOP_GRACE_S)


def _check_port_free(directory: Path, port: int) -> None:
    record = state.read_record(directory, port)
    if record is not None:
        if state.live_process(record) is not None:
            raise EngineError(
                f"an engine started by decodescope already runs on port {port} (pid {record.pid})",
                where=str(state.record_path(directory, port)),
                remedy=f"use it, pick another --port, or `decodescope engine stop --port {port}`",
            )
        state.remove_record(directory, port)  # stale: the process is gone
    if process.port_in_use(port):
        pid = process.listener_pid(port)
        owner = f"pid {pid}" if pid is not None else "another process"
        raise EngineError(
            f"port {port} is already in use by {owner}",
            where=f"{HOST}:{port}",
            remedy=f"pick another --port (or stop that process; if decodescope started it: "
            f"`decodescope engine stop --port {port}`)",
        )


def _wait_healthy(proc: subprocess.Popen[bytes], engine: RunningEngine, timeout_s: float,
                  name: str = "llama-server") -> None:
    answered, last = wait_answering(proc, engine.url, HEALTH, timeout_s)
    if answered:
        return
    if proc.poll() is not None:
        if proc.returncode == -signal.SIGILL:
            raise EngineError(
                f"{name} died of an illegal instruction (SIGILL) while starting: it "
                "uses CPU instructions this machine cannot run",
                where=str(engine.log_path),
                remedy="rebuild it on this machine: `decodescope engine install --force` "
                       "(a binary built elsewhere, or copied with --from-build, may "
                       "target another CPU)",
            )
        raise EngineError(
            f"{name} exited with code {proc.returncode} while starting: "
            f"{_log_hint(engine.log_path)}",
            where=str(engine.log_path),
            remedy="read the log; an unknown flag in --extra or a busy port are usual causes",
        )
    raise EngineError(
        f"{name} was not healthy after {timeout_s:g} s (last: {last})",
        where=str(engine.log_path),
        remedy="read the log; raise the timeout with --timeout on a slow machine",
    )


def wait_answering(proc: subprocess.Popen[bytes], url: str, endpoint: SideEndpoint,
                   timeout_s: float) -> tuple[bool, str]:
    """Poll GET `endpoint` of a starting server until it answers 200: (True, ""); or until
    the process exits or `timeout_s` passes: (False, the last answer or error)."""
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    with httpx.Client(trust_env=False, timeout=2.0) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return False, f"exited with code {proc.returncode}"
            try:  # bounded: whatever holds the port may answer anything
                resp = side_request(client, "GET", url, endpoint, deadline_s=2.0)
                if resp.status == 200:
                    return True, ""
                last = f"HTTP {resp.status}"
            except httpx.TransportError as exc:
                last = type(exc).__name__
            except DecodescopeError as exc:
                last = exc.cause
            time.sleep(_POLL_S)
    return False, last


def _log_hint(log: Path) -> str:
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    errors = [ln for ln in lines if "error" in ln.lower() or "invalid" in ln.lower()]
    return (errors or lines or ["no output"])[-1]
