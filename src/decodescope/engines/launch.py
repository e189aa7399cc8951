"""A user's server launch command, started afresh and stopped by decodescope: the servers that
`decodescope ab --launch-a CMD --launch-b CMD` restarts between its starts (run/ab.py).

The command is the user's own (`vllm serve M --port {port}`, `llama-server -m F --port {port}`,
a script): `{port}` is replaced by a free loopback port, the words are split as a POSIX shell
would (no shell runs them), the process gets its own session (its group is ended with it) and
its output goes to a log file. It is ready when `GET /v1/models` answers 200 (vLLM, SGLang and
llama-server answer it once the model is loaded; llama-server says 503 while loading). What is
shown or stored of a command is redacted (`redact_cmdline`): `--api-key K` never leaves.
"""

from __future__ import annotations

import contextlib
import shlex
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from decodescope.edge import MODELS
from decodescope.engines import process
from decodescope.engines.server import _log_hint, terminate_tree, wait_answering
from decodescope.errors import EngineError, UsageError
from decodescope.redact import redact_cmdline

PORT_FIELD = "{port}"
READY_PATH = MODELS.path
DEFAULT_READY_TIMEOUT_S = 600.0  # a big model loads in minutes
STOP_GRACE_S = 15.0


@dataclass(frozen=True)
class LaunchCommand:
    """A launch command with `{port}` where the server's port goes."""

    template: str
    name: str  # "A" | "B": the side it starts, for messages

    def __post_init__(self) -> None:
        where = f"--launch-{self.name.lower()}"
        if PORT_FIELD not in self.template:
            raise UsageError(f"the launch command has no {PORT_FIELD}", where=where,
                             remedy=f"Put {PORT_FIELD} where the server's port goes, e.g. "
                                    f"`llama-server -m model.gguf --port {PORT_FIELD}`")
        try:
            words = shlex.split(self.template)
        except ValueError as exc:
            raise UsageError(f"the launch command cannot be split into words ({exc})",
                             where=where, remedy="Close its quotes") from None
        if not words:
            raise UsageError("the launch command is empty", where=where,
                             remedy="Give the command that starts the server")

    def argv(self, port: int) -> list[str]:
        return [w.replace(PORT_FIELD, str(port)) for w in shlex.split(self.template)]

    def shown(self) -> str:
        """The command as it may be printed and stored: every secret redacted."""
        return " ".join(shlex.quote(w) if not w or any(c.isspace() or c in "'\"\\" for c in w)
                        else w for w in redact_cmdline(shlex.split(self.template)))


@dataclass(frozen=True)
class Launched:
    """One started server process."""

    name: str
    pid: int
    port: int
    url: str
    log_path: Path
    ready_s: float


@contextlib.contextmanager
def launched(cmds: Sequence[LaunchCommand], log_dir: Path, *, ready_timeout_s: float,
             tag: str) -> Iterator[list[Launched]]:
    """Start every command on a free loopback port of its own (all at once: they load side by
    side), wait until each answers, yield them in order, then end their process groups
    (SIGTERM, SIGKILL after STOP_GRACE_S), also when the caller or a start fails."""
    t0 = time.monotonic()
    procs: list[tuple[LaunchCommand, subprocess.Popen[bytes], int, Path]] = []
    try:
        for cmd in cmds:
            port = process.free_port()
            log_path = log_dir / f"{tag}-{cmd.name}.log"
            with open(log_path, "wb") as log:
                try:
                    proc = subprocess.Popen(cmd.argv(port), stdin=subprocess.DEVNULL,
                                            stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)
                except OSError as exc:
                    raise UsageError(f"side {cmd.name}'s launch command could not start: "
                                     f"{exc.strerror or exc}",
                                     where=f"--launch-{cmd.name.lower()}",
                                     remedy="Check the program's name and path (no shell runs "
                                            "it: wrap a pipeline in `sh -c '…'`)") from None
            procs.append((cmd, proc, port, log_path))
        out = []
        for cmd, proc, port, log_path in procs:
            url = f"http://{process.HOST}:{port}"
            _wait_ready(proc, url, cmd, log_path, max(1.0, t0 + ready_timeout_s
                                                       - time.monotonic()))
            out.append(Launched(cmd.name, proc.pid, port, url, log_path,
                                round(time.monotonic() - t0, 2)))
        yield out
    finally:
        for _, proc, _, _ in procs:
            terminate_tree(proc.pid, STOP_GRACE_S)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=STOP_GRACE_S)


def _wait_ready(proc: subprocess.Popen[bytes], url: str, cmd: LaunchCommand, log_path: Path,
                timeout_s: float) -> None:
    answered, last = wait_answering(proc, url, MODELS, timeout_s)
    if answered:
        return
    where = f"side {cmd.name}'s server ({cmd.shown()}), log {log_path}"
    if proc.poll() is not None:
        raise EngineError(f"side {cmd.name}'s server exited with code {proc.returncode} "
                          f"before it answered: {_log_hint(log_path)}", where=where,
                          remedy="Run the command by hand and read its output; it must "
                                 f"listen on {process.HOST}:{PORT_FIELD}")
    raise EngineError(f"side {cmd.name}'s server did not answer GET {READY_PATH} with 200 "
                      f"within {timeout_s:g} s (last: {last})", where=where,
                      remedy="Read its log; raise --ready-timeout for a model that loads "
                             "slowly")
