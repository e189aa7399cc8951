"""The engine window: an interval of engine-side numbers (glossary: "engine window").

Counts are the raw observation; MAL, step rate and decode rate are derived from counts,
never from throughputs the engine printed (see the vLLM idle-dilution pitfall in
docs/methodology.md). "No data" is None, never 0.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Source = Literal["log", "prometheus", "request"]


@dataclass(frozen=True)
class EngineWindow:
    source: Source
    engine: str  # "vllm" | "sglang" | "llamacpp" | "sim-vllm" | ...
    t_start_s: float | None  # epoch seconds (log lines, scrapes) — None if unknown
    t_end_s: float | None
    generation_tokens: int | None = None  # all emitted tokens (accepted + bonus)
    prompt_tokens: int | None = None
    drafts: int | None = None  # verification request-steps that had drafts
    draft_tokens: int | None = None
    accepted_tokens: int | None = None  # excludes the bonus token
    accepted_per_pos: tuple[int, ...] | None = None
    running: float | None = None  # running requests (gauge / log field)
    waiting: float | None = None
    engine_id: str | None = None  # "Engine 000", "3 Engines Aggregated", "TP0", slot id ...
    # Values the engine printed, kept verbatim for cross-checks; never used to derive MAL.
    printed: dict[str, float] = field(default_factory=dict)
    # Set when the window's numbers are known not to be trustworthy (counter reset, gap ...).
    flags: tuple[str, ...] = ()

    @property
    def duration_s(self) -> float | None:
        if self.t_start_s is None or self.t_end_s is None:
            return None
        d = self.t_end_s - self.t_start_s
        return d if d > 0 else None

    @property
    def mal(self) -> float | None:
        """Mean acceptance length = 1 + accepted / drafts (bonus token included)."""
        if self.mal_printed_only is not None:
            return self.mal_printed_only
        if not self.drafts or self.accepted_tokens is None:
            return None
        return 1.0 + self.accepted_tokens / self.drafts

    @property
    def mal_printed_only(self) -> float | None:
        # Engines that print MAL but no counts (SGLang "accept len", llama.cpp per-request
        # "mean acceptance length" without step counts) carry it here.
        v = self.printed.get("mal_reported")
        return v if (v is not None and self.drafts is None) else None

    @property
    def acceptance_rate(self) -> float | None:
        if not self.draft_tokens or self.accepted_tokens is None:
            return None
        return self.accepted_tokens / self.draft_tokens

    @property
    def decode_rate(self) -> float | None:
        """Aggregate generated tokens per second over the window (all running requests)."""
        d = self.duration_s
        if d is None or self.generation_tokens is None:
            return self.printed.get("generation_throughput")
        return self.generation_tokens / d

    @property
    def decode_rate_per_request(self) -> float | None:
        r = self.decode_rate
        if r is None or not self.running:
            return None
        return r / self.running

    @property
    def step_rate(self) -> float | None:
        """Verification steps per second per running request = drafts / s / running."""
        d = self.duration_s
        if d is not None and self.drafts is not None and self.running:
            return self.drafts / d / self.running
        # Engines without step counts: request-step rate = decode rate / MAL.
        mal, rate = self.mal, self.decode_rate_per_request
        if mal and rate is not None and self.drafts is None:
            return rate / mal
        return None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["accepted_per_pos"] = list(self.accepted_per_pos) if self.accepted_per_pos else None
        d["flags"] = list(self.flags)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EngineWindow:
        d = dict(d)
        if d.get("accepted_per_pos") is not None:
            d["accepted_per_pos"] = tuple(d["accepted_per_pos"])
        d["flags"] = tuple(d.get("flags") or ())
        d["printed"] = dict(d.get("printed") or {})
        return cls(**d)
