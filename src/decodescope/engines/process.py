"""Processes and ports for the embedded engine: free ports, port owners, ending a process."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time

import psutil

HOST = "127.0.0.1"
_POLL_S = 0.1

# Popen objects of engines this process started, so `stop_engine` can reap them.
CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return True
    return False


def listener_pid(port: int) -> int | None:
    """The pid listening on a TCP port, when the OS lets us see it."""
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, OSError):
        return None
    for conn in conns:
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
            return conn.pid
    return None


def terminate(pid: int, grace_s: float) -> str:
    """SIGTERM, wait, SIGKILL; reap when it is our child. Returns the signal that ended it."""
    used = "SIGTERM"
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if not _wait_gone(pid, grace_s):
        used = "SIGKILL"
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _wait_gone(pid, grace_s)
    return used


def _wait_gone(pid: int, timeout_s: float) -> bool:
    child = CHILDREN.get(pid)
    if child is not None:
        try:
            child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        CHILDREN.pop(pid, None)
        return True
    # Not our child: poll. A zombie counts as gone (its parent, not us, must reap it).
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_S)


def reap(pid: int) -> None:
    """Collect an exited child of ours (a live one stays registered)."""
    child = CHILDREN.get(pid)
    if child is not None and child.poll() is not None:
        del CHILDREN[pid]
