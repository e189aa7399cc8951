"""fleet.toml: which anchors to check where, and how often (docs/exporter.md).

    [exporter]
    listen = "127.0.0.1:9464"        # where /metrics is served
    store = "/var/lib/decodescope/runs.sqlite"   # optional; default: the usual store
    max_workers = 4                  # checks running at once (default: min(4, CPU cores))
    shard = "0/2"                    # optional: this instance runs the checks of shard 0 of 2

    [[check]]
    name = "gpu-a"                   # the `check` label; unique
    baseline = "anchor"              # a baseline set with `decodescope baseline set`
    url = "http://10.0.0.5:8000"
    every_s = 900                    # schedule; samples older than 2x this are dropped
    trials = 3
    timeout_s = 600                  # a check still running after this is stopped: timed out
    control = false                  # true: a reference endpoint kept unchanged (fleet rule)

Every field is checked with its type and range before anything starts: a wrong one is a
UsageError (exit 2) naming the field, the [[check]] entry and the file.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from decodescope.errors import UsageError
from decodescope.redact import register_url_secrets

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEFAULT_LISTEN = "127.0.0.1:9464"  # loopback unless the config says otherwise
DEFAULT_EVERY_S = 900.0  # a check every 15 min: a few trials each, ~1 % of a GPU's time
MIN_EVERY_S = 1.0  # a shorter schedule would probe back to back
MAX_EVERY_S = 7 * 86400.0  # a week: a longer schedule is a typo (seconds for minutes)
DEFAULT_TRIALS = 3
MAX_TRIALS = 1000  # as `check --trials`: beyond it a typo, and one check would never end
# A check (its trials, side requests and fingerprint) still running after timeout_s is stopped
# and recorded as timed out. A 3-trial anchor check takes about a minute on a GPU stack; ten
# minutes is a stuck or trickling endpoint, not a slow one.
DEFAULT_TIMEOUT_S = 600.0
MAX_TIMEOUT_S = 86400.0
MIN_SCRAPE_INTERVAL_S, MAX_SCRAPE_INTERVAL_S = 0.05, 60.0  # as `check --scrape-interval`
STALE_FACTOR = 2.0  # a result older than 2 schedules is stale: its numbers are not served

# The exporter's own concurrency: at most this many checks (worker processes, ~120 MB each,
# measured) at once; the others wait their turn in due order. A probe's timing is the measurement, so the
# default stays small: min(4, CPU cores) keeps the probing host from timing itself.
MAX_MAX_WORKERS = 256
MAX_SHARDS = 1000


def default_max_workers() -> int:
    return max(1, min(4, os.cpu_count() or 1))


_EXPORTER_KEYS = {"listen", "store", "max_workers", "shard"}
_CHECK_KEYS = {"name", "baseline", "url", "every_s", "trials", "timeout_s", "model",
               "api_key_env", "proxy", "log", "scrape", "scrape_interval_s", "fingerprint",
               "labels", "control"}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PROXY_SCHEMES = ("http", "https", "socks5", "socks5h")
_REMEDY = "See docs/exporter.md for every field with its type and range"


@dataclass(frozen=True)
class CheckSpec:
    name: str
    baseline: str
    url: str
    every_s: float = DEFAULT_EVERY_S
    trials: int = DEFAULT_TRIALS
    model: str | None = None
    api_key_env: str | None = None
    proxy: str | None = None
    log: str | None = None
    scrape: bool = True
    scrape_interval_s: float = 1.0
    fingerprint: bool = True
    labels: tuple[tuple[str, str], ...] = ()
    timeout_s: float = DEFAULT_TIMEOUT_S
    # an endpoint kept unchanged on purpose (a reference server): when it did not move while
    # the fleet did, the fleet's movement is not the environment's (exporter/fleet.py)
    control: bool = False

    @property
    def stale_after_s(self) -> float:
        return STALE_FACTOR * self.every_s

    @property
    def host(self) -> str:
        """The machine this check probes: never two probes against it at once."""
        return host_key(self.url)


@dataclass(frozen=True)
class Shard:
    """`i/n`: this instance runs the checks whose stable hash mod n is i (shard_of)."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def holds(self, name: str) -> bool:
        return shard_of(name, self.count) == self.index


def shard_of(name: str, count: int) -> int:
    """The shard (0..count-1) of a check name: the first 8 bytes of its SHA-256, mod count.

    Stable across processes, hosts and Python versions (never Python's salted hash()): n
    instances given shards 0/n .. n-1/n of one fleet.toml run every check exactly once.
    """
    return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "big") % count


@dataclass(frozen=True)
class FleetConfig:
    checks: tuple[CheckSpec, ...]
    host: str = "127.0.0.1"
    port: int = 9464
    store: str | None = None
    path: str = ""
    max_workers: int = 0  # 0: default_max_workers()
    shard: Shard | None = None
    all_checks: tuple[CheckSpec, ...] = ()  # the file's checks before sharding (): as checks

    @property
    def workers(self) -> int:
        return self.max_workers or default_max_workers()

    @property
    def fleet_size(self) -> int:
        return len(self.all_checks or self.checks)

    def sharded(self, shard: Shard | None) -> FleetConfig:
        """This config keeping only the checks of `shard` (None: all of them)."""
        every = self.all_checks or self.checks
        mine = every if shard is None else tuple(c for c in every if shard.holds(c.name))
        return replace(self, checks=mine, shard=shard, all_checks=every)


def parse_shard(text: Any, where: str) -> Shard:
    """`i/n` with 0 <= i < n <= MAX_SHARDS; UsageError naming where otherwise."""
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text) if isinstance(text, str) else None
    if m is None or not 1 <= int(m.group(2)) <= MAX_SHARDS or int(m.group(1)) >= int(m.group(2)):
        raise UsageError(f"shard must be \"i/n\" with 0 ≤ i < n ≤ {MAX_SHARDS}, got {text!r}",
                         where=where, remedy='e.g. shard = "0/2" on one host and "1/2" on '
                         "the other (docs/exporter.md, \"Outgrowing one host\")")
    return Shard(int(m.group(1)), int(m.group(2)))


def parse_max_workers(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_MAX_WORKERS:
        raise UsageError(f"max_workers must be a whole number within 1..{MAX_MAX_WORKERS}, got "
                         f"{value!r}", where=where,
                         remedy=f"e.g. max_workers = {default_max_workers()} (the default: "
                         "min(4, CPU cores)); each running check is a process of ~120 MB")
    return value


def host_key(url: str) -> str:
    """The host part of a check URL, lower case (`localhost` is the loopback address)."""
    try:
        host = (urlsplit(url).hostname or url).lower()
    except ValueError:
        host = url.lower()
    return "127.0.0.1" if host in ("localhost", "::1", "ip6-localhost") else host


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
    unknown = sorted(set(data) - {"exporter", "check"})
    if unknown:
        raise UsageError(f"unknown section(s) {', '.join(unknown)}", where=path,
                         remedy="A fleet.toml has [exporter] and [[check]] entries only")
    ex = data.get("exporter", {})
    if not isinstance(ex, dict):
        raise UsageError("[exporter] must be a table", where=path, remedy=_REMEDY)
    unknown = sorted(set(ex) - _EXPORTER_KEYS)
    if unknown:
        raise UsageError(f"unknown key(s) in [exporter]: {', '.join(unknown)}", where=path,
                         remedy=f"[exporter] takes: {', '.join(sorted(_EXPORTER_KEYS))}")
    listen = ex.get("listen", DEFAULT_LISTEN)
    if not isinstance(listen, str):
        raise UsageError(f"[exporter] listen must be a string HOST:PORT, got {listen!r}",
                         where=path, remedy='e.g. listen = "127.0.0.1:9464"')
    host, port = parse_listen(listen, f"{path} [exporter] listen")
    store = ex.get("store")
    if store is not None and (not isinstance(store, str) or not store.strip()):
        raise UsageError(f"[exporter] store must be a path or postgresql:// URL (a string), got "
                         f"{store!r}", where=path,
                         remedy='e.g. store = "/var/lib/decodescope/runs.sqlite"')
    raw = data.get("check", [])
    if not isinstance(raw, list) or not raw:
        raise UsageError("no [[check]] entries", where=path,
                         remedy="Add one [[check]] per endpoint: name, baseline, url, every_s")
    checks = []
    for i, c in enumerate(raw):
        checks.append(_check(c, path, i + 1))
    names = [c.name for c in checks]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise UsageError(f"check names must be unique: {', '.join(dup)}", where=path,
                         remedy="Give every [[check]] its own name")
    workers = (parse_max_workers(ex["max_workers"], f"{path} [exporter] max_workers")
               if "max_workers" in ex else 0)
    shard = parse_shard(ex["shard"], f"{path} [exporter] shard") if "shard" in ex else None
    cfg = FleetConfig(tuple(checks), host, port, store.strip() if store else None, path,
                      max_workers=workers)
    return cfg.sharded(shard)


def parse_listen(text: str, where: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not port.isdigit() or not 0 <= int(port) < 65536:
        raise UsageError(f"bad listen address {text!r}", where=where,
                         remedy="Write HOST:PORT, e.g. 127.0.0.1:9464")
    return host or "127.0.0.1", int(port)


def _bad(field: str, what: str, value: Any, where: str, example: str, *,
         shown: str | None = None) -> UsageError:
    got = shown if shown is not None else repr(value)
    return UsageError(f"{field} must be {what}, got {got}", where=where,
                      remedy=f"e.g. {example}; docs/exporter.md lists every field")


def _number(c: dict[str, Any], key: str, default: float, lo: float, hi: float, where: str, *,
            lo_open: bool = False) -> float:
    v = c.get(key, default)
    what = f"a number of seconds {'>' if lo_open else '≥'} {lo:g} and ≤ {hi:g}"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _bad(key, what, v, where, f"{key} = {default:g}")
    f = float(v)
    if not math.isfinite(f) or f > hi or f < lo or (lo_open and f == lo):
        raise _bad(key, what, v, where, f"{key} = {default:g}")
    return f


def _opt_str(c: dict[str, Any], key: str, where: str, example: str) -> str | None:
    v = c.get(key)
    if v is None:
        return None
    if not isinstance(v, str) or not v.strip():
        raise _bad(key, "a non-empty string", v, where, example)
    return v


def _opt_bool(c: dict[str, Any], key: str, where: str, default: bool = True) -> bool:
    v = c.get(key, default)
    if not isinstance(v, bool):
        raise _bad(key, "true or false", v, where, f"{key} = false")
    return v


def check_url(url: str, field: str, where: str, schemes: tuple[str, ...]) -> str:
    """An absolute URL with one of `schemes`, a host and a valid port."""
    what = f"an {' / '.join(s + '://' for s in schemes)} URL with a host"
    register_url_secrets(url, whole=True)  # its password never reaches an error or a log, whatever it holds
    try:
        parts = urlsplit(url.strip())
        port = parts.port  # ValueError for a port that is not a number in 0..65535
    except ValueError:
        raise _bad(field, what, url, where, f'{field} = "http://10.0.0.5:8000"') from None
    if parts.scheme.lower() not in schemes or not parts.hostname or port == 0:
        raise _bad(field, what, url, where, f'{field} = "http://10.0.0.5:8000"')
    return url.strip()


def _check(c: Any, path: str, index: int) -> CheckSpec:
    where = f"{path} [[check]] #{index}"
    if not isinstance(c, dict):
        raise UsageError("a [[check]] must be a table", where=where, remedy=_REMEDY)
    name = c.get("name")
    if isinstance(name, str) and name.strip():
        where = f"{path} [[check]] #{index} ({name!r})"
    unknown = sorted(set(c) - _CHECK_KEYS)
    if unknown:
        raise UsageError(f"unknown key(s) {', '.join(unknown)}", where=where,
                         remedy=f"Use: {', '.join(sorted(_CHECK_KEYS))}")
    missing = [k for k in ("name", "baseline", "url") if k not in c]
    if missing:
        raise UsageError(f"missing {', '.join(missing)}", where=where,
                         remedy="Each [[check]] needs name, baseline and url")
    for key in ("name", "baseline", "url"):
        v = c[key]
        if not isinstance(v, str) or not v.strip() or any(ch < " " for ch in v):
            raise _bad(key, "a non-empty one-line string", v, where, f'{key} = "gpu-a"')
    url = check_url(c["url"], "url", where, ("http", "https"))
    every = _number(c, "every_s", DEFAULT_EVERY_S, MIN_EVERY_S, MAX_EVERY_S, where)
    timeout = _number(c, "timeout_s", DEFAULT_TIMEOUT_S, 0.0, MAX_TIMEOUT_S, where, lo_open=True)
    scrape_iv = _number(c, "scrape_interval_s", 1.0, MIN_SCRAPE_INTERVAL_S,
                        MAX_SCRAPE_INTERVAL_S, where)
    trials = c.get("trials", DEFAULT_TRIALS)
    if isinstance(trials, bool) or not isinstance(trials, int) or not 1 <= trials <= MAX_TRIALS:
        raise _bad("trials", f"a whole number within 1..{MAX_TRIALS}", trials, where,
                   f"trials = {DEFAULT_TRIALS}")
    model = _opt_str(c, "model", where, 'model = "my-model"')
    key_env = c.get("api_key_env")
    if key_env is not None and (not isinstance(key_env, str) or not _ENV_NAME.fullmatch(key_env)):
        # never echoed: a key pasted here by mistake must not reach the terminal
        got = (f"a {type(key_env).__name__}" if not isinstance(key_env, str)
               else "a string that is not a variable name")
        raise _bad("api_key_env", "the NAME of one environment variable (letters, digits, _), "
                   "never the key itself", None, where, 'api_key_env = "GPU_A_KEY"', shown=got)
    proxy = _opt_str(c, "proxy", where, 'proxy = "http://proxy:3128"')
    if proxy is not None:
        proxy = check_url(proxy, "proxy", where, _PROXY_SCHEMES)
    log = _opt_str(c, "log", where, 'log = "/var/log/vllm.log"')
    labels = c.get("labels", {})
    if not isinstance(labels, dict) or not all(
            isinstance(k, str) and k.strip() and isinstance(v, str) for k, v in labels.items()):
        raise _bad("labels", "a table of strings", labels, where, 'labels = { team = "infra" }')
    return CheckSpec(
        name=c["name"], baseline=c["baseline"], url=url, every_s=every, trials=trials,
        model=model, api_key_env=key_env, proxy=proxy, log=log,
        scrape=_opt_bool(c, "scrape", where), scrape_interval_s=scrape_iv,
        fingerprint=_opt_bool(c, "fingerprint", where),
        labels=tuple(sorted(labels.items())), timeout_s=timeout,
        control=_opt_bool(c, "control", where, default=False))
