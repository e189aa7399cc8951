"""Proxy analysis: the seed's two traps, and each client's rules — the httpx model checked
against httpx's own proxy selection."""

from __future__ import annotations

import os

import httpx
import pytest

from decodescope.doctor.diagnose import httpx_live_route, proxy_findings, run_doctor
from decodescope.doctor.proxy import (
    curl_noproxy_match,
    curl_route,
    httpx_route,
    no_proxy_cidrs,
    requests_route,
    urllib_proxies,
)

PROXY = "http://proxy.invalid:3128"


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in list(os.environ):
        if name.lower().endswith("_proxy") or name == "REQUEST_METHOD":
            monkeypatch.delenv(name)
    return monkeypatch


def test_trap_a_cidr_no_proxy(clean_env: pytest.MonkeyPatch) -> None:
    env = {"no_proxy": "127.0.0.0/8", "http_proxy": PROXY}
    report = run_doctor(env=env, check_timers=False)
    errors = report.by_severity("error")
    assert [f.code for f in errors] == ["proxy.no_proxy_cidr"]
    err = errors[0]
    assert "127.0.0.0/8" in err.cause
    assert "httpx" in err.cause and "will send 127.0.0.1 to the proxy" in err.cause
    assert "curl and requests honour them" in err.cause
    assert err.remedy is not None and "localhost,127.0.0.1" in err.remedy
    assert "unset http_proxy" in err.remedy
    routes = {r.client: r for r in report.routes}
    assert not routes["httpx"].direct and routes["httpx"].via == "http_proxy"
    assert routes["curl"].direct and routes["curl"].bypass == "127.0.0.0/8"
    assert routes["requests"].direct and routes["requests"].bypass == "127.0.0.0/8"
    assert report.exit_code == 2
    # The same environment for real: httpx's own selection agrees (no drift finding).
    for k, v in env.items():
        clean_env.setenv(k, v)
    live = run_doctor(check_timers=False)
    assert [f.code for f in live.by_severity("error")] == ["proxy.no_proxy_cidr"]
    assert not any(f.code == "proxy.model_drift" for f in live.findings)


def test_trap_b_socks_without_socksio() -> None:
    env = {"all_proxy": "socks5://127.0.0.1:1080", "no_proxy": "localhost,127.0.0.1"}
    report = run_doctor(env=env, socksio_available=False, check_timers=False)
    warnings = {f.code: f for f in report.by_severity("warning")}
    w = warnings["proxy.socks_without_socksio"]
    assert "httpx clients will fail" in w.cause and "socksio is not installed" in w.cause
    assert w.remedy == "pip install 'httpx[socks]', or unset all_proxy for local endpoints"
    assert report.exit_code == 1
    routes = {r.client: r for r in report.routes}
    assert routes["httpx"].failure is not None
    assert routes["curl"].direct  # curl speaks socks itself, and 127.0.0.1 is in no_proxy
    ok = run_doctor(env=env, socksio_available=True, check_timers=False)
    assert not any(f.code == "proxy.socks_without_socksio" for f in ok.findings)
    assert ok.exit_code == 0


def test_socks_failure_is_real_httpx_behaviour(clean_env: pytest.MonkeyPatch) -> None:
    pytest.importorskip("httpx")
    try:
        import socksio  # noqa: F401
        pytest.skip("socksio is installed here")
    except ImportError:
        pass
    clean_env.setenv("all_proxy", "socks5://127.0.0.1:1080")
    live = httpx_live_route("http://127.0.0.1:8000")
    assert live is not None and live.failure is not None and "socksio" in live.failure


def real_httpx_direct(url: str) -> bool:
    with httpx.Client(trust_env=True, verify=False) as client:  # verify off: no CA load, same routing
        transport = client._transport_for_url(httpx.URL(url))
        return transport is client._transport


CASES = [
    ({"http_proxy": PROXY, "no_proxy": "127.0.0.0/8"}, "http://127.0.0.1:8000", False),
    ({"http_proxy": PROXY, "no_proxy": "127.0.0.1"}, "http://127.0.0.1:8000", True),
    ({"HTTP_PROXY": PROXY, "no_proxy": "localhost"}, "http://localhost:8000", True),
    ({"HTTP_PROXY": PROXY, "no_proxy": "localhost"}, "http://127.0.0.1:8000", False),
    ({"https_proxy": PROXY}, "http://example.com", True),
    ({"https_proxy": PROXY}, "https://example.com", False),
    ({"all_proxy": PROXY}, "http://10.0.0.5:8000", False),
    ({"http_proxy": PROXY, "no_proxy": ".example.com"}, "http://a.example.com", True),
    ({"http_proxy": PROXY, "no_proxy": ".example.com"}, "http://example.com", False),
    ({"http_proxy": PROXY, "no_proxy": "example.com"}, "http://www.example.com", True),
    ({"http_proxy": PROXY, "no_proxy": "example.com"}, "http://wwwexample.com", False),
    ({"http_proxy": PROXY, "no_proxy": "*"}, "http://anything", True),
    ({"http_proxy": PROXY, "no_proxy": "localhost:8000"}, "http://localhost:8000", True),
    ({"http_proxy": PROXY, "no_proxy": "localhost:8000"}, "http://localhost:9000", False),
    ({"http_proxy": PROXY, "NO_PROXY": "::1"}, "http://[::1]:8000", True),
    ({"http_proxy": "", "HTTP_PROXY": PROXY}, "http://example.com", True),
    ({"http_proxy": "proxy.invalid:3128"}, "http://example.com", False),
    ({"http_proxy": PROXY, "no_proxy": "10.0.0.0/8, 127.0.0.1"}, "http://10.1.2.3", False),
    ({"http_proxy": PROXY, "no_proxy": "10.0.0.0/8, 127.0.0.1"}, "http://127.0.0.1", True),
]


@pytest.mark.parametrize(("env", "url", "direct"), CASES)
def test_httpx_model_matches_httpx(clean_env: pytest.MonkeyPatch, env: dict[str, str], url: str,
                                   direct: bool) -> None:
    for k, v in env.items():
        clean_env.setenv(k, v)
    assert real_httpx_direct(url) is direct  # what this httpx really does
    assert httpx_route(url, env, socksio_available=True).direct is direct  # what we say


def test_requests_rules() -> None:
    env = {"http_proxy": PROXY, "no_proxy": "127.0.0.0/8,example.com"}
    assert requests_route("http://127.0.0.1:8000", env, pysocks_available=True).bypass == "127.0.0.0/8"
    assert not requests_route("http://10.0.0.1", env, pysocks_available=True).direct
    # requests matches names by plain suffix (unlike httpx/curl): wwwexample.com is bypassed.
    assert requests_route("http://wwwexample.com", env, pysocks_available=True).direct
    assert requests_route("http://h:8000", {"HTTP_PROXY": PROXY, "NO_PROXY": "h:8000"},
                          pysocks_available=True).direct
    r = requests_route("http://h", {"all_proxy": "socks5h://p:1080"}, pysocks_available=False)
    assert r.proxy == "socks5h://p:1080" and r.failure is not None and "PySocks" in r.failure
    assert requests_route("https://h", {"HTTPS_PROXY": PROXY}, pysocks_available=True).via == "HTTPS_PROXY"


def test_curl_rules() -> None:
    # Upper-case HTTP_PROXY is ignored by curl on purpose (httpoxy); HTTPS_PROXY is not.
    assert curl_route("http://h", {"HTTP_PROXY": PROXY}).direct
    assert not httpx_route("http://h", {"HTTP_PROXY": PROXY}, socksio_available=True).direct
    assert curl_route("https://h", {"HTTPS_PROXY": PROXY}).via == "HTTPS_PROXY"
    assert curl_route("http://h", {"ALL_PROXY": PROXY}).via == "ALL_PROXY"
    assert curl_route("http://h", {"http_proxy": "", "all_proxy": PROXY}).via == "all_proxy"
    assert curl_noproxy_match("127.0.0.1", "127.0.0.0/8") == "127.0.0.0/8"
    assert curl_noproxy_match("a.example.com", ".example.com") == ".example.com"
    assert curl_noproxy_match("example.com", ".example.com") == ".example.com"
    assert curl_noproxy_match("wwwexample.com", "example.com") is None
    assert curl_noproxy_match("anything", "*") == "*"
    assert curl_noproxy_match("::1", "fe80::/64") is None
    assert curl_noproxy_match("[::1]", "::1/128") == "::1/128"
    assert curl_noproxy_match("10.1.2.3", "localhost 10.0.0.0/8") == "10.0.0.0/8"


def test_urllib_precedence_and_cidr_listing() -> None:
    env = {"HTTP_PROXY": "http://upper:1", "http_proxy": "http://lower:1", "NO_PROXY": "a/b,10.0.0.0/8"}
    assert urllib_proxies(env)["http"] == ("http://lower:1", "http_proxy")
    assert "http" not in urllib_proxies({"HTTP_PROXY": PROXY, "REQUEST_METHOD": "GET"})
    assert no_proxy_cidrs(env) == ["10.0.0.0/8"]


def test_cidr_ignored_warning_when_target_outside() -> None:
    _routes, findings = proxy_findings("http://localhost:8000",
                                       {"http_proxy": PROXY, "no_proxy": "localhost,10.0.0.0/8"},
                                       socksio_available=True, pysocks_available=True)
    codes = {f.code: f.severity for f in findings}
    assert codes["proxy.no_proxy_cidr_ignored"] == "warning"
    assert "proxy.no_proxy_cidr" not in codes


def test_local_target_proxied_by_all_clients() -> None:
    _routes, findings = proxy_findings("http://127.0.0.1:8000", {"http_proxy": PROXY},
                                       socksio_available=True, pysocks_available=True)
    f = {x.code: x for x in findings}["proxy.target_proxied"]
    assert f.severity == "warning" and f.cause.startswith("httpx, requests, curl would send")
    assert f.remedy == "add 127.0.0.1 to no_proxy (an explicit host, not a CIDR)"


def test_proxy_credentials_never_shown() -> None:
    secret = "ProxyPassCanary"
    report = run_doctor(env={"http_proxy": f"http://me:{secret}@proxy.invalid:3128"},
                        check_timers=False)
    text = repr(report.to_dict())
    assert secret not in text
    assert "http://<redacted>@proxy.invalid:3128" in text
