"""Build the HTTP request body for a caliber (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from decodescope.caliber.spec import Caliber


def base_url(url: str) -> str:
    """The server's base URL: a trailing `/` or `/v1` (as OpenAI clients take it) removed, so
    `http://host:8000/v1` works where `http://host:8000` does."""
    u = url.strip().rstrip("/")
    if u.endswith("/v1"):
        u = u[: -len("/v1")]
    return u


def endpoint_path(caliber: Caliber) -> str:
    return "/v1/chat/completions" if caliber.endpoint == "chat" else "/v1/completions"


def build_body(caliber: Caliber, model: str | None, prompt: str,
               messages: Sequence[dict[str, str]] | None = None) -> dict[str, Any]:
    """The request body; `messages` (a dataset's chat entry) replaces the user prompt."""
    s, o = caliber.sampling, caliber.output
    body: dict[str, Any] = {"stream": True, "max_tokens": o.max_tokens}
    if model:
        body["model"] = model
    if caliber.endpoint == "chat":
        msgs = []
        if caliber.prompt.system and not any(m.get("role") == "system" for m in messages or ()):
            msgs.append({"role": "system", "content": caliber.prompt.system})
        if messages:
            msgs.extend(dict(m) for m in messages)
        else:
            msgs.append({"role": "user", "content": prompt})
        body["messages"] = msgs
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


def with_seed(body: dict[str, Any], cal: Caliber, index: int) -> dict[str, Any]:
    """Request `index`'s body under the caliber's seed schedule (the base seed + index)."""
    if cal.seed_schedule is None or cal.sampling.seed is None:
        return body
    return {**body, "seed": cal.sampling.seed + index}
