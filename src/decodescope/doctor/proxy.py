"""Which HTTP clients would proxy a URL, given the environment: httpx, requests, curl.

Pure functions over an environment mapping, one per client, each written from that client's
source:

- httpx 0.28 (`httpx/_utils.py get_environment_proxies`, `URLPattern`): reads proxies through
  `urllib.request.getproxies()` (lower-case wins, upper-case accepted); every `no_proxy` entry
  becomes a URL pattern. An IPv4 entry keeps its text, so `127.0.0.0/8` becomes the pattern
  `all://127.0.0.0/8`, whose host is `127.0.0.0` — it matches that one address and nothing in
  the network: **CIDR entries are ignored**. Any socks5 proxy in the environment makes
  `httpx.Client()` raise ImportError at construction unless `socksio` is installed — for
  every URL, local ones included.
- requests (`requests.utils.should_bypass_proxies`): `no_proxy` / `NO_PROXY`; an IPv4 host is
  checked against CIDR entries (`address_in_network`) and exact IPs; names by suffix; then
  `urllib.request.proxy_bypass_environment`. Proxy = `<scheme>` else `all` from getproxies().
  CIDR entries are honoured.
- curl (lib/url.c `detect_proxy`, lib/noproxy.c `Curl_check_noproxy`, curl ≥ 7.86):
  `http_proxy` lower-case only (HTTP_PROXY is ignored on purpose), `https_proxy` then
  `HTTPS_PROXY`, then `all_proxy` / `ALL_PROXY`; `no_proxy` then `NO_PROXY`; empty values count
  as unset; IP hosts match `a.b.c.d/bits` entries. CIDR entries are honoured.

`tests/test_doctor_proxy.py` checks the httpx model against httpx's own proxy selection.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import struct
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit

from decodescope.redact import redact_url

HTTPX_PROXY_SCHEMES = ("http", "https", "socks5", "socks5h")


@dataclass(frozen=True)
class Route:
    client: str  # "httpx" | "requests" | "curl"
    proxy: str | None  # redacted proxy URL; None: direct connection
    via: str | None = None  # the variable that supplied the proxy
    bypass: str | None = None  # the no_proxy entry that exempted the host
    failure: str | None = None  # why this client cannot connect at all

    @property
    def direct(self) -> bool:
        return self.proxy is None

    def describe(self) -> str:
        if self.failure:
            return f"fails ({self.failure})"
        if self.proxy is None:
            return f"direct (no_proxy entry {self.bypass!r})" if self.bypass else "direct"
        return f"via proxy {self.proxy} ({self.via})"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "direct": self.direct}


def urllib_proxies(env: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """`urllib.request.getproxies_environment` over a mapping: scheme -> (value, variable)."""
    proxies: dict[str, tuple[str, str]] = {}
    for name, value in env.items():
        low = name.lower()
        if value and low[-6:] == "_proxy":
            proxies[low[:-6]] = (value, name)
    if "REQUEST_METHOD" in env:
        proxies.pop("http", None)
    for name, value in env.items():
        if name[-6:] == "_proxy":
            low = name.lower()
            if value:
                proxies[low[:-6]] = (value, name)
            else:
                proxies.pop(low[:-6], None)
    return proxies


def _host(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme.lower(), (parts.hostname or "").lower(), parts.port


# --- httpx -----------------------------------------------------------------------------------


def httpx_mounts(env: Mapping[str, str]) -> dict[str, tuple[str | None, str | None]]:
    """httpx's `get_environment_proxies`: pattern -> (proxy URL or None for direct, variable)."""
    info = urllib_proxies(env)
    mounts: dict[str, tuple[str | None, str | None]] = {}
    for scheme in ("http", "https", "all"):
        if scheme in info:
            value, var = info[scheme]
            mounts[f"{scheme}://"] = (value if "://" in value else f"http://{value}", var)
    no_proxy, no_var = info.get("no", ("", None))
    for hostname in (h.strip() for h in no_proxy.split(",")):
        if hostname == "*":
            return {}
        if not hostname:
            continue
        if "://" in hostname:
            mounts[hostname] = (None, no_var)
        elif _is_ipv4_prefix(hostname) or hostname.lower() == "localhost":
            mounts[f"all://{hostname}"] = (None, no_var)
        elif _is_ipv6_prefix(hostname):
            mounts[f"all://[{hostname}]"] = (None, no_var)
        else:
            mounts[f"all://*{hostname}"] = (None, no_var)
    return mounts


def _is_ipv4_prefix(s: str) -> bool:
    try:
        ipaddress.IPv4Address(s.split("/")[0])
    except ValueError:
        return False
    return True


def _is_ipv6_prefix(s: str) -> bool:
    try:
        ipaddress.IPv6Address(s.split("/")[0])
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class _Pattern:
    """httpx's URLPattern: scheme, host (with leading-* wildcard), port; sorted by priority."""

    text: str
    scheme: str
    host: str
    port: int | None

    @classmethod
    def parse(cls, text: str) -> _Pattern:
        scheme, _, rest = text.partition("://")
        authority = rest.split("/", 1)[0]
        port: int | None = None
        if authority.startswith("["):
            host, _, tail = authority[1:].partition("]")
            if tail.startswith(":") and tail[1:].isdigit():
                port = int(tail[1:])
        else:
            host, sep, p = authority.rpartition(":")
            if not sep or not p.isdigit():
                host = authority
            else:
                port = int(p)
        host = host.lower()
        return cls(text, "" if scheme == "all" else scheme, "" if host == "*" else host, port)

    @property
    def priority(self) -> tuple[int, int, int]:
        return (0 if self.port is not None else 1, -len(self.host), -len(self.scheme))

    def matches(self, scheme: str, host: str, port: int | None) -> bool:
        if self.scheme and self.scheme != scheme:
            return False
        if self.host:
            if self.host.startswith("*."):
                if not re.fullmatch(r".+\." + re.escape(self.host[2:]), host):
                    return False
            elif self.host.startswith("*"):
                if not re.fullmatch(r"(.+\.)?" + re.escape(self.host[1:]), host):
                    return False
            elif self.host != host:
                return False
        return self.port is None or self.port == port


def _default_port(scheme: str, port: int | None) -> int | None:
    # httpx.URL normalizes the scheme's default port away (URL("http://h:80").port is None).
    return None if port == {"http": 80, "https": 443}.get(scheme) else port


def httpx_route(url: str, env: Mapping[str, str], *, socksio_available: bool) -> Route:
    """What an `httpx.Client(trust_env=True)` (httpx 0.28) does with `url` under `env`."""
    mounts = httpx_mounts(env)
    failure = None
    for value, var in mounts.values():
        if value is None:
            continue
        scheme = urlsplit(value).scheme.lower()
        if scheme not in HTTPX_PROXY_SCHEMES:
            failure = f"{var}={redact_url(value)}: httpx rejects proxy scheme {scheme!r}"
        elif scheme.startswith("socks") and not socksio_available:
            failure = (f"{var}={redact_url(value)} needs socksio, which is not installed: "
                       f"httpx.Client() raises ImportError")
    scheme, host, port = _host(url)
    port = _default_port(scheme, port)
    host_for_match = host
    for pat in sorted((_Pattern.parse(k) for k in mounts), key=lambda p: p.priority):
        if pat.matches(scheme, host_for_match, port):
            proxy, var = mounts[pat.text]
            if proxy is None:
                return Route("httpx", None, bypass=pat.text.split("://", 1)[1], failure=failure)
            return Route("httpx", redact_url(proxy), via=var, failure=failure)
    return Route("httpx", None, failure=failure)


# --- requests --------------------------------------------------------------------------------


def _inet_aton(s: str) -> bytes | None:
    try:
        return socket.inet_aton(s)
    except (OSError, ValueError):
        return None


def _valid_cidr(s: str) -> bool:
    """requests.utils.is_valid_cidr."""
    if s.count("/") != 1:
        return False
    ip, mask = s.split("/")
    try:
        bits = int(mask)
    except ValueError:
        return False
    return 1 <= bits <= 32 and _inet_aton(ip) is not None


def _in_network(ip: str, net: str) -> bool:
    """requests.utils.address_in_network."""
    a = _inet_aton(ip)
    netaddr, bits = net.split("/")
    n = _inet_aton(netaddr)
    if a is None or n is None:
        return False
    mask = (0xFFFFFFFF << (32 - int(bits))) & 0xFFFFFFFF
    return (struct.unpack("!I", a)[0] & mask) == (struct.unpack("!I", n)[0] & mask)


def _urllib_bypass(host: str, env: Mapping[str, str]) -> str | None:
    """urllib.request.proxy_bypass_environment: the matching entry, or None."""
    info = urllib_proxies(env)
    if "no" not in info:
        return None
    no_proxy = info["no"][0]
    if no_proxy == "*":
        return "*"
    host = host.lower()
    hostonly = host.rsplit(":", 1)[0] if re.search(r":\d+$", host) else host
    for raw in no_proxy.split(","):
        name = raw.strip().lstrip(".").lower()
        if not name:
            continue
        if hostonly == name or host == name:
            return raw.strip()
        if hostonly.endswith("." + name) or host.endswith("." + name):
            return raw.strip()
    return None


def requests_route(url: str, env: Mapping[str, str], *, pysocks_available: bool) -> Route:
    """What `requests` (trust_env=True) does with `url` under `env`."""
    scheme, host, port = _host(url)
    no_proxy = env.get("no_proxy") or env.get("NO_PROXY")
    if not host:
        return Route("requests", None, bypass="(no host)")
    if no_proxy:
        entries = [h for h in no_proxy.replace(" ", "").split(",") if h]
        if _inet_aton(host) is not None and re.fullmatch(r"[\d.]+", host):
            for entry in entries:
                if _valid_cidr(entry):
                    if _in_network(host, entry):
                        return Route("requests", None, bypass=entry)
                elif host == entry:
                    return Route("requests", None, bypass=entry)
        else:
            host_with_port = f"{host}:{port}" if port else host
            for entry in entries:
                if host.endswith(entry) or host_with_port.endswith(entry):
                    return Route("requests", None, bypass=entry)
    hit = _urllib_bypass(host, env)
    if hit is not None:
        return Route("requests", None, bypass=hit)
    info = urllib_proxies(env)
    chosen = info.get(scheme) or info.get("all")
    if chosen is None:
        return Route("requests", None)
    value, var = chosen
    failure = None
    if value.lower().startswith("socks") and not pysocks_available:
        failure = f"{var}={redact_url(value)} needs PySocks (requests[socks]), not installed"
    return Route("requests", redact_url(value), via=var, failure=failure)


# --- curl ------------------------------------------------------------------------------------


def _curl_env(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name)
    return value if value else None


def curl_noproxy_match(host: str, no_proxy: str) -> str | None:
    """lib/noproxy.c Curl_check_noproxy: the matching entry, or None."""
    if no_proxy.strip() == "*":
        return "*"
    name = host.strip("[]").rstrip(".").lower()
    kind = "host"
    if ":" in name:
        kind = "ipv6"
    else:
        try:
            ipaddress.IPv4Address(name)
            kind = "ipv4"
        except ValueError:
            pass
    for token in re.split(r"[,\s]+", no_proxy):
        if not token:
            continue
        if kind == "host":
            t = token[1:] if token.startswith(".") else token
            t = t.rstrip(".").lower()
            if t and (name == t or name.endswith("." + t)):
                return token
            continue
        addr, _, bits_text = token.partition("/")
        try:
            bits = int(bits_text) if bits_text else 0
            net_ip = ipaddress.ip_address(addr)
            ip = ipaddress.ip_address(name)
        except ValueError:
            continue
        if net_ip.version != ip.version:
            continue
        width = 32 if ip.version == 4 else 128
        if bits > width:
            continue
        if bits and bits != width:
            net = ipaddress.ip_network(f"{addr}/{bits}", strict=False)
            if ip in net:
                return token
        elif ip == net_ip:
            return token
    return None


def curl_route(url: str, env: Mapping[str, str]) -> Route:
    """What curl (≥ 7.86) does with `url` under `env`."""
    scheme, host, _port = _host(url)
    no_proxy = _curl_env(env, "no_proxy") or _curl_env(env, "NO_PROXY")
    if no_proxy:
        hit = curl_noproxy_match(host, no_proxy)
        if hit is not None:
            return Route("curl", None, bypass=hit)
    var = f"{scheme}_proxy"
    proxy = _curl_env(env, var)
    if proxy is None and var != "http_proxy":
        var = var.upper()
        proxy = _curl_env(env, var)
    if proxy is None:
        for var in ("all_proxy", "ALL_PROXY"):
            proxy = _curl_env(env, var)
            if proxy is not None:
                break
    if proxy is None:
        return Route("curl", None)
    return Route("curl", redact_url(proxy), via=var)


# --- the no_proxy entries themselves -----------------------------------------------------------


def no_proxy_cidrs(env: Mapping[str, str]) -> list[str]:
    """CIDR entries in no_proxy / NO_PROXY (each client reads one of them)."""
    out: list[str] = []
    for var in ("no_proxy", "NO_PROXY"):
        for entry in re.split(r"[,\s]+", env.get(var, "")):
            if "/" in entry and entry not in out:
                try:
                    ipaddress.ip_network(entry, strict=False)
                except ValueError:
                    continue
                out.append(entry)
    return out


def host_in_cidrs(host: str, cidrs: list[str]) -> list[str]:
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return []
    return [c for c in cidrs if ip in ipaddress.ip_network(c, strict=False)]
