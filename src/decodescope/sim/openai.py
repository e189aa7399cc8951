"""OpenAI-compatible JSON bodies as vLLM writes them (compact JSON, `data: ...\\n\\n` events)."""

from __future__ import annotations

import json
from json.encoder import encode_basestring
from typing import Any

from decodescope.sim.engine import StepOut

DONE_EVENT = b"data: [DONE]\n\n"
MALFORMED_EVENT = b'data: {"id": "broken", "choices": [{"delta": {"content": "\n\n'

ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    429: "RateLimitError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}

HTML_PAGE = (
    b"<!DOCTYPE html>\n<html><head><title>Welcome</title></head>\n"
    b"<body><h1>It works!</h1><p>decodescope simulator: HTML fault (not an API).</p></body></html>\n"
)


def sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"


def error_body(status: int, message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": ERROR_TYPES.get(status, "APIError"),
                      "param": None, "code": status}}


class Formatter:
    """Bodies of one request's response."""

    def __init__(self, endpoint: str, response_id: str, model: str, created: int,
                 reasoning_field: str, prompt_tokens: int, report_reasoning: bool):
        self.chat = endpoint == "chat"
        self.id = response_id
        self.model = model
        self.created = created
        self.reasoning_field = reasoning_field
        self.prompt_tokens = prompt_tokens
        self.report_reasoning = report_reasoning
        self.object = "chat.completion.chunk" if self.chat else "text_completion"
        # The hot path (one event per step) is formatted from pieces, not json.dumps'd.
        self._head = (f'data: {{"id":{encode_basestring(response_id)},"object":"{self.object}",'
                      f'"created":{created},"model":{encode_basestring(model)},"choices":[')
        self._reasoning_key = encode_basestring(reasoning_field)

    def usage(self, completion_tokens: int, reasoning_tokens: int) -> dict[str, Any]:
        u: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": self.prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens,
        }
        if self.report_reasoning:
            u["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
        return u

    def _chunk(self, choice: dict[str, Any] | None, usage: dict[str, Any] | None) -> dict[str, Any]:
        d: dict[str, Any] = {"id": self.id, "object": self.object, "created": self.created,
                             "model": self.model, "choices": [choice] if choice else []}
        if usage is not None:
            d["usage"] = usage
        return d

    def usage_json(self, completion_tokens: int, reasoning_tokens: int) -> str:
        p = self.prompt_tokens
        text = (f'{{"prompt_tokens":{p},"total_tokens":{p + completion_tokens},'
                f'"completion_tokens":{completion_tokens}')
        if self.report_reasoning:
            text += f',"completion_tokens_details":{{"reasoning_tokens":{reasoning_tokens}}}'
        return text + "}"

    def token_event(self, out: StepOut, usage_json: str | None) -> bytes:
        """`data: {chunk}\\n\\n` of one step, equal in JSON to sse(token_chunk(...))."""
        finish = "null" if out.finish_reason is None else f'"{out.finish_reason}"'
        if self.chat:
            parts = []
            if out.reasoning:
                parts.append(f'{self._reasoning_key}:{encode_basestring("".join(out.reasoning))}')
            if out.content:
                parts.append(f'"content":{encode_basestring("".join(out.content))}')
            choice = (f'{{"index":0,"delta":{{{",".join(parts)}}},"logprobs":null,'
                      f'"finish_reason":{finish}}}')
        else:
            choice = (f'{{"index":0,"text":{encode_basestring("".join(out.content))},'
                      f'"logprobs":null,"finish_reason":{finish},"stop_reason":null}}')
        tail = "]}" if usage_json is None else f'],"usage":{usage_json}}}'
        return (self._head + choice + tail + "\n\n").encode()

    def role_chunk(self, usage: dict[str, Any] | None) -> dict[str, Any]:
        choice = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                  "finish_reason": None}
        return self._chunk(choice, usage)

    def token_chunk(self, out: StepOut, usage: dict[str, Any] | None) -> dict[str, Any]:
        if self.chat:
            delta: dict[str, Any] = {}
            if out.reasoning:
                delta[self.reasoning_field] = "".join(out.reasoning)
            if out.content:
                delta["content"] = "".join(out.content)
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None,
                                      "finish_reason": out.finish_reason}
        else:
            choice = {"index": 0, "text": "".join(out.content), "logprobs": None,
                      "finish_reason": out.finish_reason, "stop_reason": None}
        return self._chunk(choice, usage)

    def usage_chunk(self, usage: dict[str, Any]) -> dict[str, Any]:
        return self._chunk(None, usage)

    def full(self, reasoning: str, content: str, finish_reason: str | None,
             usage: dict[str, Any] | None) -> dict[str, Any]:
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": content,
                                       self.reasoning_field: reasoning or None, "tool_calls": []}
            choice: dict[str, Any] = {"index": 0, "message": message, "logprobs": None,
                                      "finish_reason": finish_reason, "stop_reason": None}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": content, "logprobs": None,
                      "finish_reason": finish_reason, "stop_reason": None}
            obj = "text_completion"
        d: dict[str, Any] = {"id": self.id, "object": obj, "created": self.created,
                             "model": self.model, "choices": [choice]}
        if usage is not None:
            d["usage"] = usage
        return d
