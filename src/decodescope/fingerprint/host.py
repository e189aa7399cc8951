"""Host items: hostname, OS, kernel, CPU, memory, Python, decodescope version."""

from __future__ import annotations

import os
import platform
import socket
from pathlib import Path

import psutil

from decodescope import __version__
from decodescope.fingerprint.stack import Item


def _cpu_model() -> Item:
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return Item.ok(line.split(":", 1)[1].strip())
    except OSError:
        pass
    name = platform.processor()
    return Item.ok(name) if name else Item.missing("no CPU model in /proc/cpuinfo or platform")


def collect_host() -> dict[str, Item]:
    items: dict[str, Item] = {
        "hostname": Item.ok(socket.gethostname()),
        "os": Item.ok(platform.platform()),
        "kernel": Item.ok(platform.release()),
        "cpu_model": _cpu_model(),
        "python": Item.ok(platform.python_version()),
        "decodescope": Item.ok(__version__),
    }
    try:
        items["cpu_count"] = Item.ok({"logical": os.cpu_count(),
                                      "physical": psutil.cpu_count(logical=False)})
    except Exception as exc:
        items["cpu_count"] = Item.missing(f"psutil.cpu_count: {exc}")
    try:
        items["memory_total_bytes"] = Item.ok(int(psutil.virtual_memory().total))
    except Exception as exc:
        items["memory_total_bytes"] = Item.missing(f"psutil.virtual_memory: {exc}")
    return items
