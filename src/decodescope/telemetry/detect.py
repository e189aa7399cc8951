"""Engine autodetection from the server's own endpoints (vLLM / SGLang / llama.cpp / generic)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from decodescope.edge import (
    MODELS,
    PROPS,
    SERVER_INFO,
    SERVER_INFO_ALT,
    VERSION,
    SideEndpoint,
    side_request,
)

DETECT_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class EngineInfo:
    kind: str  # "vllm" | "sglang" | "llamacpp" | "openai" (generic) | "unknown"
    version: str | None
    models: tuple[str, ...]
    simulated: bool = False
    evidence: tuple[str, ...] = ()  # which endpoint said what
    raw: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _get(client: httpx.Client, base: str, ep: SideEndpoint) -> Any | None:
    """The endpoint's JSON, or None when it has none. Bounded (edge.side_request): an answer
    past the endpoint's size limit or its deadline raises (exit 5, or 4 when none came)."""
    try:
        r = side_request(client, "GET", base, ep)
    except httpx.HTTPError:
        return None
    if r.status != 200:
        return None
    try:
        return r.json()
    except ValueError:
        return None


# A version string longer than this is not a version: kept cut, as the header prints it.
MAX_VERSION_CHARS = 120


def _short(v: Any) -> str | None:
    """A version as text (a server may send a number or an object), at most MAX_VERSION_CHARS."""
    if v is None:
        return None
    text = v if isinstance(v, str) else str(v)
    return text if len(text) <= MAX_VERSION_CHARS else text[:MAX_VERSION_CHARS - 1] + "…"


def detect_engine(base_url: str, client: httpx.Client | None = None,
                  headers: dict[str, str] | None = None) -> EngineInfo:
    own = client is None
    c = client or httpx.Client(trust_env=False, timeout=DETECT_TIMEOUT_S, headers=headers or {})
    try:
        return _detect(base_url.rstrip("/"), c)
    finally:
        if own:
            c.close()


def _detect(base: str, c: httpx.Client) -> EngineInfo:
    evidence: list[str] = []
    raw: dict[str, Any] = {}
    kind, version, simulated = "unknown", None, False
    models_doc = _get(c, base, MODELS)
    models: tuple[str, ...] = ()
    owned_by = None
    if isinstance(models_doc, dict) and isinstance(models_doc.get("data"), list):
        data = [m for m in models_doc["data"] if isinstance(m, dict)]
        models = tuple(str(m.get("id")) for m in data if m.get("id"))
        owned_by = next((m.get("owned_by") for m in data if m.get("owned_by")), None)
        raw["models"] = models_doc
        kind = "openai"
        if owned_by:
            evidence.append(f"/v1/models owned_by={owned_by}")
    info = _get(c, base, SERVER_INFO) or _get(c, base, SERVER_INFO_ALT)
    if isinstance(info, dict) and ("internal_states" in info or "tp_size" in info):
        raw["server_info"] = info
        kind, version = "sglang", info.get("version")
        evidence.append("/get_server_info answered (SGLang)")
    props = _get(c, base, PROPS) if kind != "sglang" else None
    if isinstance(props, dict) and ("default_generation_settings" in props or "build_info" in props
                                    or "total_slots" in props):
        raw["props"] = props
        kind = "llamacpp"
        version = props.get("build_info") or version
        evidence.append("/props answered (llama.cpp)")
    ver = _get(c, base, VERSION) if kind not in ("sglang", "llamacpp") else None
    if isinstance(ver, dict) and "version" in ver:
        raw["version"] = ver
        simulated = bool(ver.get("simulated"))
        if owned_by in (None, "vllm") or simulated:
            kind, version = "vllm", _short(ver["version"])
            evidence.append(f"/version={version}")
    if kind in ("openai", "unknown") and owned_by in ("vllm", "sglang", "llamacpp"):
        kind = owned_by
    return EngineInfo(kind=kind, version=_short(version), models=models, simulated=simulated,
                      evidence=tuple(evidence), raw=raw)
