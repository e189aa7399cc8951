"""Endpoint items: engine kind and version, served models, model card, server info, props.

Reads `/version` (vLLM), `/v1/models` (all; `owned_by` names the engine),
`/get_server_info` or `/server_info` (SGLang), `/props` (llama.cpp). Every response is
redacted before it becomes an item; volatile fields (request-time `created`, SGLang
`internal_states`, llama.cpp's chat template text) are dropped or hashed so two fingerprints
of an unchanged stack compare equal.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
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
from decodescope.errors import DecodescopeError
from decodescope.fingerprint.stack import Item
from decodescope.redact import redact_obj, redact_text

KNOWN_ENGINES = ("vllm", "sglang", "llamacpp")
# Keys of /props whose values are long text: kept as a hash + length, not verbatim.
_HASHED_PROPS = ("chat_template", "chat_template_tool_use")
_VOLATILE_SERVER_INFO = ("internal_states",)
# Per-slot state in llama.cpp's /props default_generation_settings: changes request by request.
_VOLATILE_SLOT = ("id_task", "is_processing", "prompt", "next_token", "n_past", "n_decoded")
# llama.cpp's /props `media_marker`: `<__media_` + a random string drawn at each start (unless
# LLAMA_MEDIA_MARKER pins it): a per-process nonce, neither a secret nor a stack difference.
_RANDOM_MEDIA_MARKER = re.compile(r"<__media_[A-Za-z0-9]{8,}__>")
MEDIA_MARKER_RANDOM = "<__media_(random per start)__>"


@dataclass(frozen=True)
class _Reply:
    status: int | None
    body: Any  # parsed JSON, or None
    error: str | None  # why there is no usable body


def _get(client: httpx.Client, base: str, ep: SideEndpoint) -> _Reply:
    """Bounded (edge.side_request); an answer past its size limit or deadline becomes the
    item's reason (status 0: the server answered, unusably), never an exception."""
    try:
        resp = side_request(client, "GET", base, ep)
    except httpx.HTTPError as exc:
        return _Reply(None, None, redact_text(f"{type(exc).__name__}: {exc}"))
    except DecodescopeError as exc:
        return _Reply(0, None, redact_text(exc.cause))
    if resp.status != 200:
        return _Reply(resp.status, None, f"HTTP {resp.status}")
    try:
        return _Reply(200, resp.json(), None)
    except ValueError:
        return _Reply(200, None, "response is not JSON")


def _hash_text(text: str) -> dict[str, Any]:
    return {"sha256": hashlib.sha256(text.encode()).hexdigest()[:16], "chars": len(text)}


def _models(reply: _Reply, model: str | None) -> tuple[Item, Item, str | None]:
    if reply.error:
        why = f"/v1/models: {reply.error}"
        return Item.missing(why), Item.missing(why), None
    data = reply.body.get("data") if isinstance(reply.body, dict) else None
    if not isinstance(data, list):
        why = "/v1/models: no 'data' list"
        return Item.missing(why), Item.missing(why), None
    cards = [c for c in data if isinstance(c, dict)]
    ids = [str(c.get("id")) for c in cards]
    pick = next((c for c in cards if model is not None and c.get("id") == model), None)
    if pick is None and model is None and cards:
        pick = cards[0]
    owned = str(pick.get("owned_by")) if pick and pick.get("owned_by") else None
    if pick is None:
        why = f"model {model!r} is not served (served: {', '.join(ids) or 'none'})"
        return Item.ok(ids), Item.missing(why), owned
    card = {k: v for k, v in pick.items() if k not in ("created", "permission")}
    return Item.ok(ids), Item.ok(redact_obj(card)), owned


def _engine_kind(owned_by: str | None, version: _Reply, server_info: _Reply,
                 props: _Reply) -> str | None:
    if owned_by and owned_by.lower().replace(".", "").replace("_", "") in KNOWN_ENGINES:
        return owned_by.lower().replace(".", "").replace("_", "")
    if server_info.body is not None:
        return "sglang"
    if isinstance(props.body, dict) and ("build_info" in props.body
                                         or "default_generation_settings" in props.body):
        return "llamacpp"
    if isinstance(version.body, dict) and "version" in version.body:
        return "vllm"
    return None


def collect_endpoint(client: httpx.Client, url: str, *, model: str | None = None) -> dict[str, Item]:
    """Endpoint items (never raises). Stops after the first connection failure."""
    base = url.rstrip("/")
    if base.endswith("/v1"):
        base = base[: -len("/v1")]
    first = _get(client, base, MODELS)
    if first.status is None:
        why = f"endpoint unreachable: {first.error}"
        return {k: Item.missing(why) for k in
                ("engine", "engine_version", "models", "model_card", "server_info", "props")}
    version = _get(client, base, VERSION)
    server_info = _get(client, base, SERVER_INFO)
    if server_info.error:
        alt = _get(client, base, SERVER_INFO_ALT)
        server_info = alt if alt.body is not None else server_info
    props = _get(client, base, PROPS)

    models, card, owned_by = _models(first, model)
    kind = _engine_kind(owned_by, version, server_info, props)
    items: dict[str, Item] = {
        "engine": Item.ok(kind) if kind else Item.missing(
            "no /version, /get_server_info or /props answer and /v1/models names no engine"),
        "models": models,
        "model_card": card,
    }
    ver: Any = None
    if isinstance(version.body, dict):
        ver = version.body.get("version")
    if ver is None and isinstance(server_info.body, dict):
        ver = server_info.body.get("version")
    if ver is None and isinstance(props.body, dict):
        ver = props.body.get("build_info")
    version_item = (Item.ok(redact_text(str(ver))) if ver is not None
                    else Item.missing("no version in /version, server info or /props"))
    items = {"engine": items["engine"], "engine_version": version_item,
             "models": models, "model_card": card}

    if isinstance(server_info.body, dict):
        kept = {k: v for k, v in server_info.body.items() if k not in _VOLATILE_SERVER_INFO}
        items["server_info"] = Item.ok(redact_obj(kept))
    else:
        items["server_info"] = Item.missing(f"/get_server_info: {server_info.error}")
    if isinstance(props.body, dict):
        kept = {k: (_hash_text(v) if k in _HASHED_PROPS and isinstance(v, str) else v)
                for k, v in props.body.items()}
        marker = kept.get("media_marker")
        if isinstance(marker, str) and _RANDOM_MEDIA_MARKER.fullmatch(marker):
            kept["media_marker"] = MEDIA_MARKER_RANDOM
        dgs = kept.get("default_generation_settings")
        if isinstance(dgs, dict):
            kept["default_generation_settings"] = {
                k: v for k, v in dgs.items() if k not in _VOLATILE_SLOT}
        items["props"] = Item.ok(redact_obj(kept))
    else:
        items["props"] = Item.missing(f"/props: {props.error}")
    return items
