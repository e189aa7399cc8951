"""`decodescope sim` and `python -m decodescope.sim`: run the simulated vLLM-like engine in the
foreground until Ctrl-C. The click command lives here, not in the CLI package, so the
simulator never imports the CLI."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from typing import Any

import click

from decodescope.console import json_option
from decodescope.sim.config import DEFAULT_MODEL, REASONING_FIELDS, FaultSpec, SimConfig
from decodescope.sim.server import SimServer


def _banner(server: SimServer) -> str:
    c = server.config
    lines = [
        f"decodescope sim: SIMULATED vLLM-like engine (not a real model) on {server.url}",
        f"  model {c.model}, vLLM {c.version}, k={c.k}, step rate {c.step_rate_hz:g}/s "
        f"(simulated), time scale {c.time_scale:g}, seed {c.seed}",
    ]
    if c.faults.describe() != "none" or c.foreign_load:
        lines.append(f"  faults: {c.faults.describe()}; foreign load {c.foreign_load}")
    if c.log_path:
        lines.append(f"  vLLM-format log: {c.log_path} (every {c.log_interval_s:g} simulated s)")
    lines.append("  Ctrl-C stops it.")
    return "\n".join(lines)


def _info(server: SimServer) -> dict[str, Any]:
    c = server.config
    return {"url": server.url, "port": server.port, "simulated": True, "model": c.model,
            "version": c.version, "k": c.k, "step_rate_hz": c.step_rate_hz,
            "time_scale": c.time_scale, "seed": c.seed, "log_path": c.log_path,
            "faults": c.faults.describe(), "foreign_load": c.foreign_load}


async def _serve(cfg: SimConfig, as_json: bool, duration_s: float | None) -> None:
    server = SimServer(cfg)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
    try:
        await server.start()
        click.echo(json.dumps(_info(server)) if as_json else _banner(server))
        if duration_s is not None:
            loop.call_later(duration_s, stop.set)
        await stop.wait()
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        await server.stop()


@click.command("sim")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, type=int, help="Port; 0 picks a free one.")
@click.option("--model", default=DEFAULT_MODEL, show_default=True, help="Served model id.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of every request's randomness.")
@click.option("--time-scale", default=1.0, show_default=True, type=float,
              help="Real seconds per simulated second (0.1 = 10x faster).")
@click.option("--step-rate", default=40.0, show_default=True, type=float,
              help="Verification steps/s of one request at batch 1 (simulated seconds).")
@click.option("--k", "k", default=4, show_default=True, type=int, help="Draft tokens per step.")
@click.option("--batch-slowdown", default=0.01, show_default=True, type=float,
              help="Step time x (1 + this x (running - 1)).")
@click.option("--length-decay", default=0.0, show_default=True, type=float,
              help="Step time x (1 + this x mean output position / 1000).")
@click.option("--prefill-rate", default=8000.0, show_default=True, type=float,
              help="Prompt tokens/s of prefill (simulated).")
@click.option("--max-model-len", default=131072, show_default=True, type=int)
@click.option("--eos-mean-tokens", default=16384, show_default=True, type=int,
              help="Without ignore_eos a request stops after 0.5-1.5 x this many tokens.")
@click.option("--reasoning-tokens", default=1024, show_default=True, type=int,
              help="Reasoning tokens when thinking is on (at most half the output).")
@click.option("--reasoning-field", type=click.Choice(REASONING_FIELDS), default="reasoning_content",
              show_default=True, help="Delta field of reasoning text.")
@click.option("--thinking-default/--no-thinking-default", default=False, show_default=True,
              help="Think when a request does not say (chat_template_kwargs.enable_thinking).")
@click.option("--api-key", default=None, help="Require `Authorization: Bearer KEY` on /v1/*.")
@click.option("--log", "log_path", type=click.Path(dir_okay=False), default=None,
              help="Write a vLLM-format log (Engine + SpecDecoding lines) to this file.")
@click.option("--log-interval", default=10.0, show_default=True, type=float,
              help="Log interval in simulated seconds.")
@click.option("--foreign-load", default=0, show_default=True, type=int,
              help="Background requests always running (contaminates /metrics and the log).")
@click.option("--fault", "faults", multiple=True, metavar="NAME[=VALUE]",
              help="Fault for every request, e.g. drop_after=10, status=503, stall=2, malformed, "
                   "html, no_usage (repeatable; per request: header X-Sim-Fault).")
@click.option("--counter-reset-at", default=None, type=float,
              help="Reset every /metrics counter this many simulated seconds after start.")
@click.option("--sse-framing", type=click.Choice(["chunked", "close"]), default="chunked",
              show_default=True, help="Chunked transfer (keep-alive) or a close-delimited body.")
@click.option("--duration", default=None, type=float, help="Stop after this many real seconds.")
@json_option
def command(host: str, port: int, model: str, seed: int, time_scale: float, step_rate: float,
            k: int, batch_slowdown: float, length_decay: float, prefill_rate: float,
            max_model_len: int, eos_mean_tokens: int, reasoning_tokens: int, reasoning_field: str,
            thinking_default: bool, api_key: str | None, log_path: str | None,
            log_interval: float, foreign_load: int, faults: tuple[str, ...],
            counter_reset_at: float | None, sse_framing: str, duration: float | None,
            as_json: bool) -> int:
    """Run the SIMULATED vLLM-like engine (speculative decoding, /metrics, vLLM log, faults).

    A test instrument: every number it produces is simulated. Prints its URL and serves until
    Ctrl-C (or --duration). See docs/simulator.md.
    """
    cfg = SimConfig(
        host=host, port=port, model=model, seed=seed, time_scale=time_scale,
        step_rate_hz=step_rate, k=k, batch_slowdown=batch_slowdown,
        length_decay_per_1k=length_decay, prefill_rate_tps=prefill_rate,
        max_model_len=max_model_len, eos_mean_tokens=eos_mean_tokens,
        reasoning_tokens=reasoning_tokens,
        reasoning_field=reasoning_field, thinking_default=thinking_default, api_key=api_key,
        log_path=log_path, log_interval_s=log_interval, foreign_load=foreign_load,
        faults=FaultSpec.parse(",".join(faults)), counter_reset_at_s=counter_reset_at,
        sse_framing=sse_framing,
    )
    asyncio.run(_serve(cfg, as_json, duration))
    if not as_json:
        click.echo("decodescope sim: stopped", err=True)
    return 0
