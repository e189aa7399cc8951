"""Build the HTTP request body for a caliber (pure)."""

from __future__ import annotations

from typing import Any

from decodescope.caliber.spec import Caliber


def endpoint_path(caliber: Caliber) -> str:
    return "/v1/chat/completions" if caliber.endpoint == "chat" else "/v1/completions"


def build_body(caliber: Caliber, model: str | None, prompt: str) -> dict[str, Any]:
    s, o = caliber.sampling, caliber.output
    body: dict[str, Any] = {"stream": True, "max_tokens": o.max_tokens}
    if model:
        body["model"] = model
    if caliber.endpoint == "chat":
        messages = []
        if caliber.prompt.system:
            messages.append({"role": "system", "content": caliber.prompt.system})
        messages.append({"role": "user", "content": prompt})
        body["messages"] = messages
        # Thinking is requested explicitly both ways, so "off" means off on Qwen3-style templates.
        body["chat_template_kwargs"] = {"enable_thinking": caliber.thinking}
    else:
        body["prompt"] = prompt
    stream_options: dict[str, Any] = {}
    if caliber.include_usage:
        stream_options["include_usage"] = True
    if caliber.continuous_usage_stats:
        stream_options["continuous_usage_stats"] = True
    if stream_options:
        body["stream_options"] = stream_options
    body["temperature"] = s.temperature
    body["top_p"] = s.top_p
    for key in ("top_k", "seed", "presence_penalty", "frequency_penalty", "repetition_penalty"):
        value = getattr(s, key)
        if value is not None:
            body[key] = value
    if o.ignore_eos:
        body["ignore_eos"] = True
    body.update(s.extra)
    return body
