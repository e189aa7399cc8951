"""The engine's counts. One set grows for the engine's life; /metrics and the log read
differences against snapshots (a counter reset is a new /metrics base, like a restart)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from decodescope.sim.engine import StepOut

# vLLM's iteration_tokens_total buckets.
ITERATION_BUCKETS = (1, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128, 136,
                     144, 152, 160, 168, 176, 184, 192, 200, 208, 216, 224, 232, 240, 248, 256,
                     512, 1024, 2048, 4096, 8192, 16384)


@dataclass
class Counters:
    k: int
    prompt_tokens: int = 0
    generation_tokens: int = 0
    drafts: int = 0  # verification request-steps that drafted
    draft_tokens: int = 0
    accepted_tokens: int = 0  # bonus token excluded
    accepted_per_pos: list[int] = field(default_factory=list)
    iteration_buckets: list[int] = field(default_factory=list)  # per bucket, last = +Inf
    iteration_sum: float = 0.0
    request_success: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.accepted_per_pos = self.accepted_per_pos or [0] * self.k
        self.iteration_buckets = self.iteration_buckets or [0] * (len(ITERATION_BUCKETS) + 1)

    @property
    def iteration_count(self) -> int:
        return sum(self.iteration_buckets)

    def add_step(self, out: StepOut) -> None:
        self.generation_tokens += out.tokens
        if out.drafted:
            self.drafts += 1
            self.draft_tokens += out.drafted
            self.accepted_tokens += out.accepted
            per_pos = self.accepted_per_pos
            for i in range(out.accepted):
                per_pos[i] += 1

    def observe_iteration(self, tokens: int) -> None:
        i = next((i for i, b in enumerate(ITERATION_BUCKETS) if tokens <= b), len(ITERATION_BUCKETS))
        self.iteration_buckets[i] += 1
        self.iteration_sum += tokens

    def finished(self, reason: str) -> None:
        self.request_success[reason] = self.request_success.get(reason, 0) + 1

    def copy(self) -> Counters:
        return copy.deepcopy(self)

    def minus(self, base: Counters) -> Counters:
        """The counts since `base` was snapshotted."""
        return Counters(
            k=self.k,
            prompt_tokens=self.prompt_tokens - base.prompt_tokens,
            generation_tokens=self.generation_tokens - base.generation_tokens,
            drafts=self.drafts - base.drafts,
            draft_tokens=self.draft_tokens - base.draft_tokens,
            accepted_tokens=self.accepted_tokens - base.accepted_tokens,
            accepted_per_pos=[a - b for a, b in zip(self.accepted_per_pos, base.accepted_per_pos, strict=True)],
            iteration_buckets=[a - b for a, b in zip(self.iteration_buckets, base.iteration_buckets, strict=True)],
            iteration_sum=self.iteration_sum - base.iteration_sum,
            request_success={r: n - base.request_success.get(r, 0) for r, n in self.request_success.items()},
        )
