"""Endpoint items per engine (vLLM /version, SGLang /get_server_info, llama.cpp /props),
through httpx.MockTransport; volatile fields dropped; secrets redacted."""

from __future__ import annotations

import json
from typing import Any

import httpx

from decodescope.fingerprint.endpoint import MEDIA_MARKER_RANDOM, collect_endpoint

Routes = dict[str, tuple[int, Any]]


def client_for(routes: Routes) -> httpx.Client:
    def handler(req: httpx.Request) -> httpx.Response:
        status, body = routes.get(req.url.path, (404, {"error": "not found"}))
        return httpx.Response(status, json=body)
    return httpx.Client(transport=httpx.MockTransport(handler))


def collect(routes: Routes, model: str | None = None, url: str = "http://h:8000") -> dict[str, Any]:
    with client_for(routes) as c:
        return collect_endpoint(c, url, model=model)


def models(owned_by: str, *ids: str) -> tuple[int, Any]:
    return 200, {"object": "list", "data": [{"id": i, "owned_by": owned_by, "created": 1700000000,
                                             "max_model_len": 32768} for i in ids]}


def test_vllm() -> None:
    items = collect({"/version": (200, {"version": "0.11.2.dev499"}),
                     "/v1/models": models("vllm", "qwen-flash-nvfp4")})
    assert items["engine"].value == "vllm"
    assert items["engine_version"].value == "0.11.2.dev499"
    assert items["models"].value == ["qwen-flash-nvfp4"]
    assert items["model_card"].value == {"id": "qwen-flash-nvfp4", "owned_by": "vllm",
                                         "max_model_len": 32768}
    assert items["server_info"].status == "unavailable"
    assert items["props"].why == "/props: HTTP 404"


def test_sglang_server_info_redacted_and_volatile_dropped() -> None:
    info = {"version": "0.5.4", "api_key": "sk-abcdefghijklmnopqrstuv", "tp_size": 2,
            "speculative_algorithm": "EAGLE", "internal_states": [{"last_gen_throughput": 99.1}]}
    items = collect({"/get_server_info": (200, info), "/v1/models": models("sglang", "m")},
                    url="http://h:30000/v1")
    assert items["engine"].value == "sglang"
    assert items["engine_version"].value == "0.5.4"
    si = items["server_info"].value
    assert si["api_key"] == "<redacted>" and si["tp_size"] == 2
    assert "internal_states" not in si


def test_sglang_newer_server_info_path() -> None:
    items = collect({"/server_info": (200, {"version": "0.5.9"}), "/v1/models": (200, {"data": []})})
    assert items["engine"].value == "sglang"
    assert items["engine_version"].value == "0.5.9"


def test_llamacpp_props() -> None:
    props = {"build_info": "b6000-0c1e570", "model_path": "/m/gemma.gguf", "total_slots": 1,
             "chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}",
             "default_generation_settings": {"n_ctx": 8192, "is_processing": True,
                                             "id_task": 17, "params": {"temperature": 0.8}}}
    items = collect({"/props": (200, props), "/v1/models": models("llamacpp", "gemma.gguf")})
    assert items["engine"].value == "llamacpp"
    assert items["engine_version"].value == "b6000-0c1e570"
    p = items["props"].value
    assert set(p["chat_template"]) == {"sha256", "chars"}
    assert p["default_generation_settings"] == {"n_ctx": 8192, "params": {"temperature": 0.8}}


def test_llamacpp_random_media_marker_is_a_nonce_not_a_secret() -> None:
    """llama.cpp draws `<__media_` + 32 random characters + `__>` at each start: two starts of
    one stack compare equal, and the value is not shown as a redacted secret."""
    def props(nonce: str) -> dict:
        return {"build_info": "b7000-abc", "media_marker": f"<__media_{nonce}__>"}

    a = collect({"/props": (200, props("Zq8v3NcT0pXyLm2RkW7sHd4GfJ1bEa6u")),
                 "/v1/models": models("llamacpp", "g.gguf")})["props"].value
    b = collect({"/props": (200, props("h5TQe9LrVx2mC0kYw8NbPs3DjZa7uFg1")),
                 "/v1/models": models("llamacpp", "g.gguf")})["props"].value
    assert a == b and a["media_marker"] == MEDIA_MARKER_RANDOM
    assert "redacted" not in a["media_marker"]
    # pinned with LLAMA_MEDIA_MARKER: a value the user chose, kept as it is
    c = collect({"/props": (200, {"media_marker": "<__img__>"}),
                 "/v1/models": models("llamacpp", "g.gguf")})["props"].value
    assert c["media_marker"] == "<__img__>"


def test_model_not_served_and_unreachable() -> None:
    items = collect({"/version": (200, {"version": "0.11.2"}), "/v1/models": models("vllm", "a")},
                    model="b")
    assert items["models"].value == ["a"]
    assert items["model_card"].why == "model 'b' is not served (served: a)"

    calls: list[str] = []

    def refuse(req: httpx.Request) -> httpx.Response:
        calls.append(req.url.path)
        raise httpx.ConnectError("connection refused", request=req)
    with httpx.Client(transport=httpx.MockTransport(refuse)) as c:
        items = collect_endpoint(c, "http://h:1")
    assert calls == ["/v1/models"]  # stops after the first connection failure
    assert all(not it.collected for it in items.values())
    assert "unreachable" in (items["engine"].why or "")


def test_non_json_answer() -> None:
    def handler(req: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text="<html>proxy login</html>")
    with httpx.Client(transport=httpx.MockTransport(handler)) as c:
        items = collect_endpoint(c, "http://h:1")
    assert items["models"].why == "/v1/models: response is not JSON"
    assert json.dumps({k: v.to_dict() for k, v in items.items()})
