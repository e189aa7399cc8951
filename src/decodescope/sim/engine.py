"""The deterministic schedule model: what one request emits at each verification step, and
how long a step takes. Pure: no clock, no I/O. The async runtime (runtime.py) drives it.

A request's first output token comes from prefill (one token, no draft). Every later step
drafts k tokens; position i is accepted with probability p_i given position i-1 was (per
content class, see config.ACCEPTANCE_PROFILES); the step emits 1 + accepted tokens (the bonus
token included) as one chunk. As in vLLM, the spec counters count what the sampler accepted,
while the emitted tokens are cut at max_tokens / EOS.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from decodescope.sim.config import SimConfig
from decodescope.sim.text import token_stream


@dataclass(frozen=True)
class RequestSpec:
    """What the model needs to know about one request (normalized from the HTTP body)."""

    endpoint: str  # "chat" | "completions"
    prompt_key: str  # canonical prompt text (seeds the request's randomness)
    prompt_tokens: int
    max_tokens: int
    ignore_eos: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    thinking: bool = False
    content_class: str = "text"

    def rng_seed(self, server_seed: int, stream: str) -> int:
        key = json.dumps(
            [server_seed, stream, self.endpoint, self.prompt_key, self.max_tokens,
             self.ignore_eos, self.temperature, self.top_p, self.seed, self.thinking,
             self.content_class],
            sort_keys=True,
        )
        return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")


@dataclass(frozen=True)
class StepOut:
    """One step's output for one request: the tokens of one SSE chunk."""

    drafted: int  # 0 for the prefill token, else k
    accepted: int  # accepted draft tokens (sampler count, before truncation)
    reasoning: tuple[str, ...]  # emitted reasoning tokens
    content: tuple[str, ...]  # emitted content tokens
    finish_reason: str | None  # "length" | "stop" on the last step
    tokens: int = -1  # len(reasoning) + len(content), filled in

    def __post_init__(self) -> None:
        if self.tokens < 0:
            object.__setattr__(self, "tokens", len(self.reasoning) + len(self.content))

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def truncated(self, n: int) -> StepOut:
        """The first n tokens only (used by the drop-connection fault)."""
        r = self.reasoning[:n]
        c = self.content[: max(0, n - len(r))]
        return StepOut(self.drafted, self.accepted, r, c, self.finish_reason)


def sample_accepted(rng: random.Random, probs: tuple[float, ...]) -> int:
    """Accepted draft tokens in one step: the run of leading positions that pass."""
    n = 0
    for p in probs:
        if rng.random() >= p:
            break
        n += 1
    return n


class RequestModel:
    """Deterministic in (server seed, request): the same request replays the same steps."""

    def __init__(self, cfg: SimConfig, spec: RequestSpec):
        self.cfg = cfg
        self.spec = spec
        self._accept_rng = random.Random(spec.rng_seed(cfg.seed, "accept"))
        len_rng = random.Random(spec.rng_seed(cfg.seed, "length"))
        natural = max(1, int(cfg.eos_mean_tokens * (0.5 + len_rng.random())))
        if spec.ignore_eos or natural >= spec.max_tokens:
            self.output_tokens, self.finish_reason = spec.max_tokens, "length"
        else:
            self.output_tokens, self.finish_reason = natural, "stop"
        self.reasoning_tokens = (
            min(cfg.reasoning_tokens, self.output_tokens // 2) if spec.thinking else 0
        )
        text_rng = random.Random(spec.rng_seed(cfg.seed, "text"))
        self._reasoning_src: Iterator[str] = token_stream("reasoning", text_rng)
        self._content_src: Iterator[str] = token_stream(spec.content_class, text_rng)
        self._probs = {
            cls: cfg.probs(cls, spec.temperature) for cls in ("reasoning", spec.content_class)
        }
        self.position = 0  # output tokens emitted so far

    @property
    def done(self) -> bool:
        return self.position >= self.output_tokens

    def _emit(self, n: int, drafted: int, accepted: int) -> StepOut:
        n = min(n, self.output_tokens - self.position)
        n_reason = max(0, min(n, self.reasoning_tokens - self.position))
        reasoning = tuple(next(self._reasoning_src) for _ in range(n_reason))
        content = tuple(next(self._content_src) for _ in range(n - n_reason))
        self.position += n
        finish = self.finish_reason if self.done else None
        return StepOut(drafted, accepted, reasoning, content, finish)

    def first_token(self) -> StepOut:
        return self._emit(1, 0, 0)

    def next_step(self) -> StepOut:
        if self.cfg.k == 0:  # speculative decoding off: one token per step, no draft
            return self._emit(1, 0, 0)
        phase = "reasoning" if self.position < self.reasoning_tokens else self.spec.content_class
        accepted = sample_accepted(self._accept_rng, self._probs[phase])
        return self._emit(1 + accepted, self.cfg.k, accepted)


def acceptance_sequence(cfg: SimConfig, spec: RequestSpec, steps: int) -> list[int]:
    """Accepted counts of the first `steps` decode steps (for tests and docs)."""
    model = RequestModel(cfg, spec)
    out: list[int] = []
    model.first_token()
    while len(out) < steps and not model.done:
        out.append(model.next_step().accepted)
    return out


def step_interval_real_s(cfg: SimConfig, running: int, mean_position: float) -> float:
    """Real seconds between two verification steps of the engine (one step per running request)."""
    batch = 1.0 + cfg.batch_slowdown * max(0, running - 1)
    length = 1.0 + cfg.length_decay_per_1k * mean_position / 1000.0
    return cfg.real_s(batch * length / cfg.step_rate_hz)


def prefill_real_s(cfg: SimConfig, prompt_tokens: int) -> float:
    return cfg.real_s(cfg.prefill_overhead_s + prompt_tokens / cfg.prefill_rate_tps)


def canonical_prompt(body: dict[str, Any]) -> str:
    """A stable text for a request's prompt (messages or prompt), used to seed it."""
    if "messages" in body:
        return json.dumps(body.get("messages"), sort_keys=True, ensure_ascii=False)
    return json.dumps(body.get("prompt"), sort_keys=True, ensure_ascii=False)
