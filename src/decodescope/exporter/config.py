"""fleet.toml: which anchors to check where, and how often (docs/exporter.md).

    [exporter]
    listen = "127.0.0.1:9464"        # where /metrics is served
    store = "/var/lib/decodescope/runs.sqlite"   # optional; default: the usual store

    [[check]]
    name = "gpu-a"                   # the `check` label; unique
    baseline = "anchor"              # a baseline set with `decodescope baseline set`
    url = "http://10.0.0.5:8000"
    every_s = 900                    # schedule; samples older than 2x this are dropped
    trials = 3
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from decodescope.errors import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEFAULT_LISTEN = "127.0.0.1:9464"  # loopback unless the config says otherwise
DEFAULT_EVERY_S = 900.0  # a check every 15 min: a few trials each, ~1 % of a GPU's time
MIN_EVERY_S = 1.0  # a shorter schedule would probe back to back
STALE_FACTOR = 2.0  # a result older than 2 schedules is stale: its numbers are not served

_CHECK_KEYS = {"name", "baseline", "url", "every_s", "trials", "model", "api_key_env", "proxy",
               "log", "scrape", "scrape_interval_s", "fingerprint", "labels"}


@dataclass(frozen=True)
class CheckSpec:
    name: str
    baseline: str
    url: str
    every_s: float = DEFAULT_EVERY_S
    trials: int = 3
    model: str | None = None
    api_key_env: str | None = None
    proxy: str | None = None
    log: str | None = None
    scrape: bool = True
    scrape_interval_s: float = 1.0
    fingerprint: bool = True
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def stale_after_s(self) -> float:
        return STALE_FACTOR * self.every_s


@dataclass(frozen=True)
class FleetConfig:
    checks: tuple[CheckSpec, ...]
    host: str = "127.0.0.1"
    port: int = 9464
    store: str | None = None
    path: str = ""


def load_config(path: str) -> FleetConfig:
    """Read fleet.toml; UsageError (cause, where, remedy) for anything wrong in it."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError("fleet config not found", where=path,
                         remedy="Give the path of a fleet.toml (docs/exporter.md has one)") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise UsageError(f"cannot read the fleet config: {e}", where=path,
                         remedy="Fix the TOML (docs/exporter.md has an example)") from None
    return parse_config(data, path)


def parse_config(data: dict[str, Any], path: str = "fleet.toml") -> FleetConfig:
    ex = data.get("exporter", {})
    if not isinstance(ex, dict):
        raise UsageError("[exporter] must be a table", where=path, remedy="See docs/exporter.md")
    host, port = parse_listen(str(ex.get("listen", DEFAULT_LISTEN)), path)
    raw = data.get("check", [])
    if not isinstance(raw, list) or not raw:
        raise UsageError("no [[check]] entries", where=path,
                         remedy="Add one [[check]] per endpoint: name, baseline, url, every_s")
    checks = []
    for i, c in enumerate(raw):
        checks.append(_check(c, f"{path} [[check]] #{i + 1}"))
    names = [c.name for c in checks]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise UsageError(f"check names must be unique: {', '.join(dup)}", where=path,
                         remedy="Give every [[check]] its own name")
    store = ex.get("store")
    return FleetConfig(tuple(checks), host, port, str(store) if store else None, path)


def parse_listen(text: str, where: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not port.isdigit() or not 0 <= int(port) < 65536:
        raise UsageError(f"bad listen address {text!r}", where=where,
                         remedy="Write HOST:PORT, e.g. 127.0.0.1:9464")
    return host or "127.0.0.1", int(port)


def _check(c: Any, where: str) -> CheckSpec:
    if not isinstance(c, dict):
        raise UsageError("a [[check]] must be a table", where=where, remedy="See docs/exporter.md")
    unknown = sorted(set(c) - _CHECK_KEYS)
    if unknown:
        raise UsageError(f"unknown key(s) {', '.join(unknown)}", where=where,
                         remedy=f"Use: {', '.join(sorted(_CHECK_KEYS))}")
    missing = [k for k in ("name", "baseline", "url") if not c.get(k)]
    if missing:
        raise UsageError(f"missing {', '.join(missing)}", where=where,
                         remedy="Each [[check]] needs name, baseline and url")
    try:
        every = float(c.get("every_s", DEFAULT_EVERY_S))
        trials = int(c.get("trials", 3))
        scrape_iv = float(c.get("scrape_interval_s", 1.0))
    except (TypeError, ValueError):
        raise UsageError("every_s, trials and scrape_interval_s must be numbers", where=where,
                         remedy="e.g. every_s = 900, trials = 3") from None
    if every < MIN_EVERY_S or trials < 1:
        raise UsageError(f"every_s must be ≥ {MIN_EVERY_S:g} and trials ≥ 1", where=where,
                         remedy="e.g. every_s = 900, trials = 3")
    labels = c.get("labels", {})
    if not isinstance(labels, dict):
        raise UsageError("labels must be a table of strings", where=where,
                         remedy='e.g. labels = { team = "infra" }')
    return CheckSpec(
        name=str(c["name"]), baseline=str(c["baseline"]), url=str(c["url"]), every_s=every,
        trials=trials, model=c.get("model"), api_key_env=c.get("api_key_env"),
        proxy=c.get("proxy"), log=c.get("log"), scrape=bool(c.get("scrape", True)),
        scrape_interval_s=scrape_iv, fingerprint=bool(c.get("fingerprint", True)),
        labels=tuple(sorted((str(k), str(v)) for k, v in labels.items())))
