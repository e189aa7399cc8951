"""run_doctor: every check, grouped as errors / warnings / info, with an exit code."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from decodescope.doctor.checks import check_endpoint, check_log, check_timer
from decodescope.doctor.proxy import (
    Route,
    curl_route,
    host_in_cidrs,
    httpx_mounts,
    httpx_route,
    no_proxy_cidrs,
    requests_route,
    urllib_proxies,
)
from decodescope.edge import deadline_at_most
from decodescope.errors import DecodescopeError
from decodescope.exitcodes import DOCTOR_ERRORS, DOCTOR_OK, DOCTOR_WARNINGS
from decodescope.records.findings import Finding
from decodescope.redact import redact_url

# Target used for the proxy analysis when no URL is given: the usual local engine address.
DEFAULT_LOCAL_URL = "http://127.0.0.1:8000"
_CLIENTS = "httpx (OpenAI SDK, many CLIs)"


@dataclass(frozen=True)
class DoctorReport:
    url: str | None  # redacted
    routes: tuple[Route, ...]
    findings: tuple[Finding, ...]

    @property
    def exit_code(self) -> int:
        if any(f.severity == "error" for f in self.findings):
            return DOCTOR_ERRORS
        if any(f.severity == "warning" for f in self.findings):
            return DOCTOR_WARNINGS
        return DOCTOR_OK

    def by_severity(self, severity: str) -> list[Finding]:
        return [f for f in self.findings if f.severity == severity]

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "exit_code": self.exit_code,
                "errors": [f.to_dict() for f in self.by_severity("error")],
                "warnings": [f.to_dict() for f in self.by_severity("warning")],
                "info": [f.to_dict() for f in self.by_severity("info")],
                "routes": [r.to_dict() for r in self.routes]}


def module_available(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def httpx_live_route(url: str) -> Route | None:
    """httpx's own decision in *this* process's environment (None if its internals moved)."""
    try:
        client = httpx.Client(trust_env=True, verify=False)  # routing only; never sends
    except (ImportError, ValueError) as exc:
        return Route("httpx", None, failure=str(exc).split(". ")[0])
    try:
        pick = getattr(client, "_transport_for_url", None)
        if pick is None:
            return None
        transport = pick(httpx.URL(url))
        return Route("httpx", None if transport is client._transport else "(a proxy)")
    finally:
        client.close()


def proxy_findings(url: str, env: Mapping[str, str], *, socksio_available: bool,
                   pysocks_available: bool, live: Route | None = None
                   ) -> tuple[tuple[Route, ...], list[Finding]]:
    hx = httpx_route(url, env, socksio_available=socksio_available)
    out: list[Finding] = []
    if live is not None and live.failure is None and hx.direct != live.direct:
        out.append(Finding("proxy.model_drift",
                           f"httpx {httpx.__version__} routes {redact_url(url)} "
                           f"{'directly' if live.direct else 'through a proxy'}, unlike the "
                           f"rules decodescope knows (httpx 0.28)", severity="info"))
        hx = Route("httpx", live.proxy if not live.direct else None, failure=hx.failure)
    rq = requests_route(url, env, pysocks_available=pysocks_available)
    cu = curl_route(url, env)
    routes = (hx, rq, cu)
    host = urlsplit(url).hostname or ""
    cidrs = no_proxy_cidrs(env)
    hit = host_in_cidrs(host, cidrs)
    proxies = urllib_proxies(env)
    if hit and not hx.direct and cu.direct:
        honour = "curl and requests honour them" if rq.direct else "curl honours them"
        out.append(Finding(
            "proxy.no_proxy_cidr",
            f"no_proxy holds a CIDR ({', '.join(hit)}) while {hx.via} is set. {_CLIENTS} "
            f"ignores CIDR entries and will send {host} to the proxy {hx.proxy}; {honour}.",
            remedy=f"list hosts/IPs explicitly (no_proxy=localhost,{host},::1) or unset {hx.via}",
            context=f"httpx {hx.describe()}; requests {rq.describe()}; curl {cu.describe()}",
            severity="error"))
    elif cidrs and any(k in proxies for k in ("http", "https", "all")):
        out.append(Finding(
            "proxy.no_proxy_cidr_ignored",
            f"no_proxy holds CIDR entries ({', '.join(cidrs)}) that {_CLIENTS} ignores: hosts "
            f"inside them still go to the proxy from httpx clients (curl and requests honour them)",
            remedy="list the hosts/IPs you need explicitly", severity="warning"))
    socks = [(var, v) for v, var in httpx_mounts(env).values()
             if v and urlsplit(v).scheme.lower().startswith("socks")]
    if hx.failure and socks and not socksio_available:
        var, value = socks[0]
        out.append(Finding(
            "proxy.socks_without_socksio",
            f"{var}={urlsplit(value).scheme}://… and socksio is not installed: httpx clients "
            f"will fail to connect (httpx.Client() raises ImportError, local URLs included)",
            remedy=f"pip install 'httpx[socks]', or unset {var} for local endpoints",
            severity="warning"))
    elif hx.failure:
        out.append(Finding("proxy.httpx_fails", f"httpx clients will fail: {hx.failure}",
                           remedy="fix or unset that proxy variable", severity="warning"))
    if rq.failure:
        out.append(Finding("proxy.requests_fails", f"requests will fail: {rq.failure}",
                           remedy="pip install 'requests[socks]' or add the host to no_proxy",
                           severity="warning"))
    proxied = [r for r in routes if not r.direct and r.failure is None]
    is_local = host in ("localhost", "::1") or host.startswith("127.")
    if proxied and not any(f.code == "proxy.no_proxy_cidr" for f in out):
        names = ", ".join(r.client for r in proxied)
        out.append(Finding(
            "proxy.target_proxied",
            f"{names} would send {host} through a proxy ({proxied[0].proxy}, from "
            f"{proxied[0].via})", remedy=f"add {host} to no_proxy (an explicit host, not a CIDR)",
            severity="warning" if is_local else "info"))
    out.append(Finding("proxy.routes", f"routes to {redact_url(url)}: "
                       + "; ".join(f"{r.client} {r.describe()}" for r in routes)
                       + " · decodescope itself connects directly (trust_env=False)",
                       severity="info"))
    return routes, out


def run_doctor(url: str | None = None, *, model: str | None = None, log_path: str | None = None,
               env: Mapping[str, str] | None = None, client: httpx.Client | None = None,
               socksio_available: bool | None = None, pysocks_available: bool | None = None,
               timeout_s: float = 3.0, check_timers: bool = True) -> DoctorReport:
    """All doctor checks. `env`, `client` and the *_available flags are seams for tests."""
    live_env = env is None
    environment: Mapping[str, str] = os.environ if env is None else env
    socks_ok = module_available("socksio") if socksio_available is None else socksio_available
    pysocks_ok = module_available("socks") if pysocks_available is None else pysocks_available
    target = url or DEFAULT_LOCAL_URL
    live = httpx_live_route(target) if live_env else None
    routes, findings = proxy_findings(target, environment, socksio_available=socks_ok,
                                      pysocks_available=pysocks_ok, live=live)
    if url is not None:
        own = client is None
        http = client or httpx.Client(trust_env=False, timeout=timeout_s)
        try:
            with deadline_at_most(timeout_s):  # --timeout is per request: the whole request
                findings.extend(check_endpoint(http, url, model))
        except DecodescopeError as exc:  # an answer past its size limit or deadline: a finding
            findings.append(Finding(
                "endpoint.protocol", exc.cause + (f" ({exc.where})" if exc.where else ""),
                remedy=exc.remedy, severity="error"))
        finally:
            if own:
                http.close()
    if log_path is not None:
        findings.extend(check_log(log_path))
    if check_timers:
        findings.extend(check_timer())
    return DoctorReport(url=redact_url(url) if url else None, routes=routes,
                        findings=tuple(findings))


def render_doctor(report: DoctorReport) -> str:
    lines: list[str] = []
    for severity, title, mark in (("error", "errors", "✗"), ("warning", "warnings", "!"),
                                  ("info", "info", "✓")):
        found = report.by_severity(severity)
        if not found:
            continue
        lines.append(title)
        for f in found:
            lines.append(f"  {mark} {f.cause}")
            if f.context and severity != "info":
                lines.append(f"    {f.context}")
            if f.remedy:
                lines.append(f"    Fix: {f.remedy}")
    lines.append(f"exit {report.exit_code}")
    return "\n".join(lines)
