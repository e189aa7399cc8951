"""Configure and compile `llama-server` with cmake (the design.md §7 recipe), with progress."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from decodescope.errors import EngineError

# Exactly the verified recipe. LLAMA_USE_PREBUILT_UI=ON would try a download; CURL/OPENSSL off
# keep the build free of system libraries; static libs make the binary relocatable into the cache.
CMAKE_FLAGS: tuple[str, ...] = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DGGML_NATIVE=ON",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
)
# x86-64: no AMX. With GGML_NATIVE on a CPU that has AMX (Sapphire Rapids and later), the
# llama.cpp of llama-cpp-python 0.3.36 compiles its AMX tile kernels and its CPU worker threads
# die of SIGILL (`tilezero` in tinygemm_kernel_amx, measured in gdb on a Xeon with amx_tile)
# at the first decode, although the kernel grants the tile permission and a plain AMX program
# runs on the same machine. Explicit -mno-amx-* win over -march=native in GCC and clang.
if platform.machine().lower() in ("x86_64", "amd64"):
    _NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    CMAKE_FLAGS += (f"-DCMAKE_C_FLAGS={_NO_AMX}", f"-DCMAKE_CXX_FLAGS={_NO_AMX}")
BUILD_TARGET = "llama-server"
_PERCENT = re.compile(r"^\[\s*(\d{1,3})%\]")
_REMEDY = (
    "install them, e.g. `apt-get install cmake g++ make` (Debian/Ubuntu), "
    "`xcode-select --install && brew install cmake` (macOS), or `pip install cmake` for cmake"
)


def find_cmake() -> str | None:
    """cmake on PATH, or the one `pip install cmake` put beside this interpreter."""
    found = shutil.which("cmake")
    if found:
        return found
    beside = Path(sys.executable).parent / "cmake"
    return str(beside) if os.access(beside, os.X_OK) else None


def missing_tools() -> list[str]:
    missing = []
    if find_cmake() is None:
        missing.append("cmake")
    if not any(shutil.which(c) for c in ("cc", "gcc", "clang")):
        missing.append("a C compiler (gcc or clang)")
    if not any(shutil.which(c) for c in ("c++", "g++", "clang++")):
        missing.append("a C++ compiler (g++ or clang++)")
    if not os.environ.get("CMAKE_GENERATOR") and not any(
        shutil.which(m) for m in ("make", "gmake", "ninja")
    ):
        missing.append("make")
    return missing


def check_toolchain() -> None:
    missing = missing_tools()
    if missing:
        raise EngineError(
            "cannot build llama-server: missing " + ", ".join(missing),
            where="decodescope engine install",
            remedy=_REMEDY,
        )


def configure_command(cmake: str) -> list[str]:
    return [cmake, "-B", "build", *CMAKE_FLAGS]


def build_command(cmake: str, jobs: int) -> list[str]:
    return [cmake, "--build", "build", "--target", BUILD_TARGET, "-j", str(jobs)]


def parse_percent(line: str) -> float | None:
    """`[ 42%] Building CXX object ...` -> 42.0; None for other lines."""
    m = _PERCENT.match(line)
    return float(m.group(1)) if m else None


def configure(source: Path, log: Path) -> None:
    _run_logged(configure_command(_cmake()), source, log, "cmake configure", None)


def compile_server(
    source: Path, log: Path, jobs: int, on_percent: Callable[[float], None] | None
) -> None:
    _run_logged(build_command(_cmake(), jobs), source, log, "cmake build", on_percent)
    if not (source / "build" / "bin" / BUILD_TARGET).is_file():
        raise EngineError("the build produced no llama-server binary", where=str(log))


def flags_from_cmake_cache(cache: Path) -> tuple[str, ...] | None:
    """The recipe's flags as recorded in a build's CMakeCache.txt (None without a cache)."""
    try:
        text = cache.read_text(errors="replace")
    except OSError:
        return None
    values = dict(
        (m.group(1), m.group(2)) for m in re.finditer(r"^([A-Za-z_][\w]*):[A-Z]+=(.*)$", text, re.M)
    )
    keys = [flag[2:].split("=", 1)[0] for flag in CMAKE_FLAGS]
    return tuple(f"-D{key}={values[key]}" for key in keys if key in values)


def binary_version(binary: Path) -> str | None:
    """`llama-server --version` -> 'version: 1 (0c1e570)'-style text, None if it says nothing."""
    try:
        proc = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EngineError(f"llama-server does not run: {exc}", where=str(binary)) from exc
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("version")]
    return lines[0].split(":", 1)[1].strip() if lines else None


def _cmake() -> str:
    found = find_cmake()
    if found is None:
        check_toolchain()
    assert found is not None  # check_toolchain raised otherwise
    return found


def _run_logged(
    cmd: list[str],
    cwd: Path,
    log: Path,
    what: str,
    on_percent: Callable[[float], None] | None,
) -> None:
    last_pct: float | None = None
    tail: list[str] = []
    with open(log, "a") as out:
        out.write("$ " + " ".join(cmd) + "\n")
        out.flush()
        with subprocess.Popen(
            cmd,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            stdin=subprocess.DEVNULL,
        ) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                out.write(line)
                out.flush()  # so `tail -f build.log` follows the build
                tail = (tail + [line.rstrip()])[-20:]
                pct = parse_percent(line)
                if pct is not None and pct != last_pct and on_percent is not None:
                    last_pct = pct
                    on_percent(pct)
            rc = proc.wait()
    if rc != 0:
        errors = [ln for ln in tail if "error" in ln.lower()] or tail
        raise EngineError(
            f"{what} failed (exit {rc}): {errors[-1] if errors else 'no output'}",
            where=str(log),
            remedy="read the build log; a missing compiler or cmake is the usual cause",
        )
