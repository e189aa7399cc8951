"""POST /v1/chat/completions and /v1/completions: request validation (vLLM's rules and
messages) and the emitters that turn engine steps into SSE chunks or one JSON body, with the
per-request faults applied and the ground truth recorded at write time.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from decodescope.sim import http
from decodescope.sim.config import CONTENT_CLASSES, FaultSpec, SimConfig
from decodescope.sim.engine import RequestSpec, StepOut, canonical_prompt
from decodescope.sim.openai import DONE_EVENT, MALFORMED_EVENT, Formatter, sse
from decodescope.sim.runtime import ActiveRequest
from decodescope.sim.text import classify_prompt
from decodescope.sim.tokenizer import chat_prompt_tokens, message_text, prompt_token_count
from decodescope.sim.truth import ChunkTruth, RequestTruth

COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # vLLM's CompletionRequest default (chat: up to the context)


class ApiError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class ParsedRequest:
    spec: RequestSpec
    stream: bool
    include_usage: bool
    continuous_usage: bool


def _number(body: dict[str, Any], name: str, default: float, kind: type = float) -> Any:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ApiError(400, f"`{name}` must be a number, got {value!r}")
    return kind(value)


def parse_completion(cfg: SimConfig, endpoint: str, body: Any, headers: dict[str, str]) -> ParsedRequest:
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    model = body.get("model") or cfg.model
    if model != cfg.model:
        raise ApiError(404, f"The model `{model}` does not exist.")
    if endpoint == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise ApiError(400, "`messages` must be a non-empty list of message objects")
        prompt_tokens = chat_prompt_tokens(messages)
        prompt_text = "\n".join(message_text(m.get("content")) for m in messages)
        default_max = cfg.max_model_len - prompt_tokens
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    else:
        try:
            prompt_tokens = prompt_token_count(body.get("prompt"))
        except ValueError as exc:
            raise ApiError(400, str(exc)) from exc
        prompt_text = str(body.get("prompt"))
        default_max = COMPLETIONS_DEFAULT_MAX_TOKENS
        max_tokens = body.get("max_tokens")
    if max_tokens is None:
        max_tokens = default_max
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ApiError(400, f"max_tokens must be at least 1, got {max_tokens!r}.")
    if prompt_tokens + max_tokens > cfg.max_model_len:
        raise ApiError(400, (
            f"This model's maximum context length is {cfg.max_model_len} tokens. However, you "
            f"requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, "
            f"{max_tokens} in the completion). Please reduce the length of the messages or completion."
        ))
    if body.get("n", 1) != 1:
        raise ApiError(400, "the simulator serves n=1 only")
    stream = bool(body.get("stream", False))
    opts = body.get("stream_options")
    if opts is not None and not stream:
        raise ApiError(400, "Stream options can only be defined when `stream=True`.")
    opts = opts if isinstance(opts, dict) else {}
    include_usage = bool(opts.get("include_usage", False))
    kwargs = body.get("chat_template_kwargs") or {}
    thinking = endpoint == "chat" and bool(
        kwargs.get("enable_thinking", cfg.thinking_default) if isinstance(kwargs, dict) else False
    )
    content_class = headers.get("x-sim-class", "").strip().lower() or classify_prompt(prompt_text)
    if content_class not in CONTENT_CLASSES:
        raise ApiError(400, f"X-Sim-Class must be one of {', '.join(CONTENT_CLASSES)}")
    seed = body.get("seed")
    spec = RequestSpec(
        endpoint=endpoint,
        prompt_key=canonical_prompt(body),
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        ignore_eos=bool(body.get("ignore_eos", False)),
        temperature=_number(body, "temperature", 1.0),
        top_p=_number(body, "top_p", 1.0),
        seed=int(seed) if isinstance(seed, int) and not isinstance(seed, bool) else None,
        thinking=thinking,
        content_class=content_class,
    )
    return ParsedRequest(spec, stream, include_usage,
                         include_usage and bool(opts.get("continuous_usage_stats", False)))


class StreamEmitter:
    """Writes each step as one SSE event, right when the engine produces it."""

    def __init__(self, cfg: SimConfig, writer: asyncio.StreamWriter, fmt: Formatter,
                 parsed: ParsedRequest, faults: FaultSpec, truth: RequestTruth):
        self.cfg = cfg
        self.writer = writer
        self.fmt = fmt
        self.parsed = parsed
        self.faults = faults
        self.truth = truth
        self.chunked = cfg.sse_framing == "chunked"
        self.usage_ok = not faults.no_usage
        self.sent = 0
        self.reasoning_sent = 0
        self._role_sent = not fmt.chat
        self._malformed_sent = False
        self._stalled = False

    def _frame(self, data: bytes) -> bytes:
        return http.chunk(data) if self.chunked else data

    def _usage(self) -> dict[str, Any]:
        return self.fmt.usage(self.sent, self.reasoning_sent)

    def __call__(self, req: ActiveRequest, out: StepOut, deadline: float) -> bool:
        if self.writer.is_closing():
            return False
        f, continuous = self.faults, self.parsed.continuous_usage and self.usage_ok
        events: list[bytes] = []
        if not self._role_sent:
            events.append(sse(self.fmt.role_chunk(self._usage() if continuous else None)))
            self._role_sent = True
        if (f.malformed_after_tokens is not None and not self._malformed_sent
                and self.sent >= f.malformed_after_tokens):
            events.append(MALFORMED_EVENT)
            self._malformed_sent = True
        drop = f.drop_after_tokens is not None and self.sent + out.tokens >= f.drop_after_tokens
        if drop:
            out = out.truncated(max(0, (f.drop_after_tokens or 0) - self.sent))
        self.sent += out.tokens
        self.reasoning_sent += len(out.reasoning)
        if out.tokens:
            usage = self.fmt.usage_json(self.sent, self.reasoning_sent) if continuous else None
            events.append(self.fmt.token_event(out, usage))
        finishing = out.finished and not drop
        if finishing:
            if self.parsed.include_usage and self.usage_ok:
                events.append(sse(self.fmt.usage_chunk(self._usage())))
            events.append(DONE_EVENT)
        data = b"".join(self._frame(e) for e in events)
        if finishing and self.chunked:
            data += http.LAST_CHUNK
        self.writer.write(data)
        t_mono, t_wall = time.monotonic(), time.time()
        if out.tokens:
            self.truth.chunks.append(ChunkTruth(t_mono, t_wall, deadline, out.tokens,
                                                len(out.reasoning), out.drafted, out.accepted))
        if drop:
            self.writer.close()
            return False
        if f.stall_s and not self._stalled and self.sent >= f.stall_after_tokens:
            stall = self.cfg.real_s(f.stall_s)
            req.stalled_until = t_mono + stall
            self.truth.stalled_s += stall
            self._stalled = True
        return True


class CollectEmitter:
    """Non-streaming: collects the text; the truth records when each step completed."""

    def __init__(self, faults: FaultSpec, truth: RequestTruth, cfg: SimConfig):
        self.faults = faults
        self.truth = truth
        self.cfg = cfg
        self.reasoning: list[str] = []
        self.content: list[str] = []
        self.sent = 0
        self._stalled = False

    def __call__(self, req: ActiveRequest, out: StepOut, deadline: float) -> bool:
        f = self.faults
        if f.drop_after_tokens is not None and self.sent + out.tokens >= f.drop_after_tokens:
            return False  # the handler closes the connection without an answer
        self.reasoning += out.reasoning
        self.content += out.content
        self.sent += out.tokens
        self.truth.chunks.append(ChunkTruth(time.monotonic(), time.time(), deadline, out.tokens,
                                            len(out.reasoning), out.drafted, out.accepted))
        if f.stall_s and not self._stalled and self.sent >= f.stall_after_tokens:
            req.stalled_until = time.monotonic() + self.cfg.real_s(f.stall_s)
            self._stalled = True
        return True
