"""The local server process: found by the port it listens on (psutil).

Only for endpoints on this machine (loopback, 0.0.0.0 or one of this host's addresses). The
cmdline and selected environment are redacted before they leave this module, with the rules
that know how engines take secrets (`redact.redact_cmdline`: every value of `--api-key K1 K2`,
`--api-keys`, a `-`-leading key, failing closed; `redact.redact_env`: secret-named variables and
arguments inside a variable such as `VLLM_EXTRA_ARGS`); the raw values needed for later look-ups
(interpreter path, PYTHONPATH) stay in `ServerProcess`, which is never stored.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit

import psutil

from decodescope.fingerprint.stack import Item
from decodescope.redact import redact_cmdline, redact_env, redact_text

# Variables that change what the engine runs: preloaded allocators (LD_PRELOAD: tcmalloc,
# jemalloc, iomp), the library path, inductor / triton compile settings, and the OpenMP /
# MKL thread and affinity settings that decide CPU decode speed (vLLM on CPU).
ENV_NAMES = ("PYTHONPATH", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "VIRTUAL_ENV",
             "NVIDIA_VISIBLE_DEVICES", "LD_PRELOAD", "LD_LIBRARY_PATH")
ENV_PREFIXES = ("VLLM_", "SGLANG_", "LLAMA_", "HF_", "HUGGING_FACE_", "NCCL_", "TORCH_",
                "TORCHINDUCTOR_", "PYTORCH_", "TRITON_", "CUDA_", "FLASHINFER_", "OMP_",
                "KMP_", "MKL_", "GOMP_", "GGML_", "HIP_", "ROCM_", "HSA_")
# Of those, the ones that change what the engine computes or how fast (a stack of its own:
# verdict.run_spread.stack_key), not where it finds its files (HF_*, paths).
ENGINE_ENV_PREFIXES = ("VLLM_", "SGLANG_", "LLAMA_", "NCCL_", "TORCH_", "TORCHINDUCTOR_",
                       "PYTORCH_", "TRITON_", "CUDA_", "FLASHINFER_", "OMP_", "KMP_", "MKL_",
                       "GOMP_", "GGML_", "HIP_", "ROCM_", "HSA_")


@dataclass(frozen=True)
class ServerProcess:
    pid: int
    create_time: float
    exe: str | None
    interpreter: str | None  # the python that runs it, when it is a Python process
    pythonpath: tuple[str, ...]  # raw entries (paths), for the repo-reference check
    env_path: str | None  # the process's PATH, to resolve a relative argv[0]


def selected_env(env: dict[str, str]) -> dict[str, str]:
    """Engine-relevant variables only (never the whole environment)."""
    keep = {k: v for k, v in env.items()
            if k in ENV_NAMES or k.startswith(ENV_PREFIXES) or k.lower().endswith("_proxy")}
    return dict(sorted(keep.items()))


def endpoint_port(url: str) -> tuple[str | None, int | None]:
    try:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        return None, None
    return parts.hostname, port


def is_local_host(host: str | None) -> bool:
    if not host:
        return False
    if host.lower() in ("localhost", "ip6-localhost"):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        try:
            ip = ipaddress.ip_address(socket.gethostbyname(host))
        except (OSError, ValueError):
            return False
    if ip.is_loopback or ip.is_unspecified:
        return True
    try:
        local = {a.address.split("%")[0] for addrs in psutil.net_if_addrs().values()
                 for a in addrs}
    except Exception:
        return False
    return str(ip) in local


def find_listener(port: int) -> tuple[int | None, str | None]:
    """(pid, None) of the process listening on TCP `port`, or (None, why)."""
    hidden = False
    try:
        conns = psutil.net_connections(kind="inet")
    except (psutil.AccessDenied, PermissionError):
        conns = None
    if conns is not None:
        for c in conns:
            if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port:
                if c.pid:
                    return c.pid, None
                hidden = True
    if conns is None or hidden:
        for proc in psutil.process_iter():
            try:
                getter = getattr(proc, "net_connections", None) or proc.connections
                for pc in getter(kind="inet"):
                    if pc.status == psutil.CONN_LISTEN and pc.laddr and pc.laddr.port == port:
                        return proc.pid, None
            except (psutil.Error, PermissionError):
                continue
    if hidden:
        return None, (f"a socket listens on port {port} but its process is not visible to this "
                      f"user; run decodescope as that user (or root)")
    return None, f"no local process listens on port {port}"


def _interpreter(proc: psutil.Process, cmdline: list[str], exe: str | None,
                 env_path: str | None) -> str | None:
    names = [os.path.basename(p) for p in (cmdline[:1] + [exe or ""]) if p]
    if not any(n.startswith("python") for n in names):
        return None
    argv0 = cmdline[0] if cmdline else ""
    if os.path.basename(argv0).startswith("python"):
        if os.path.isabs(argv0) and os.path.exists(argv0):
            return argv0  # keeps the venv's symlink (exe resolves to the base interpreter)
        found = shutil.which(argv0, path=env_path)
        if found:
            return found
    return exe


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).isoformat(timespec="seconds")


def collect_process(url: str) -> tuple[dict[str, Item], ServerProcess | None]:
    """Process items (never raises) and the raw handle for later look-ups."""
    host, port = endpoint_port(url)
    keys = ("pid", "name", "cmdline", "exe", "cwd", "create_time", "user", "env")
    if port is None:
        return {k: Item.missing(f"no port in {url!r}") for k in keys}, None
    if not is_local_host(host):
        remote = f"endpoint host {host} is not this machine: the server process cannot be inspected"
        return {k: Item.missing(remote) for k in keys}, None
    pid, why = find_listener(port)
    if pid is None:
        return {k: Item.missing(why or "not found") for k in keys}, None
    try:
        proc = psutil.Process(pid)
        create_time = proc.create_time()
    except psutil.Error as exc:
        return {k: Item.missing(f"process {pid} vanished: {exc}") for k in keys}, None

    items: dict[str, Item] = {"pid": Item.ok(pid),
                              "create_time": Item.ok({"epoch": create_time,
                                                      "iso": _iso(create_time)})}
    raw_cmdline: list[str] = []
    env: dict[str, str] = {}
    exe: str | None = None
    readers: tuple[tuple[str, Callable[[], Any]], ...] = (
        ("name", proc.name), ("cmdline", proc.cmdline), ("exe", proc.exe), ("cwd", proc.cwd),
        ("user", proc.username), ("env", proc.environ))
    for key, read in readers:
        try:
            value: Any = read()
        except (psutil.Error, OSError) as exc:
            items[key] = Item.missing(f"{key} of pid {pid}: {type(exc).__name__} {exc}".strip())
            continue
        if key == "cmdline":
            raw_cmdline = list(value)
            items[key] = Item.ok(redact_cmdline(raw_cmdline))
        elif key == "env":
            env = dict(value)
            items[key] = Item.ok(redact_env(selected_env(env)))
        elif key == "exe":
            exe = value or None
            items[key] = Item.ok(value) if value else Item.missing("empty exe")
        else:
            items[key] = Item.ok(redact_text(str(value)))
    pythonpath = tuple(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)
    server = ServerProcess(
        pid=pid, create_time=create_time, exe=exe,
        interpreter=_interpreter(proc, raw_cmdline, exe, env.get("PATH")),
        pythonpath=pythonpath, env_path=env.get("PATH"))
    return items, server
