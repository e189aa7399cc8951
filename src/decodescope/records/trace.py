"""Raw observations of one request: immutable, stored as-is (glossary: request trace).

Times are `time.perf_counter()` seconds (monotonic) of this process; `t_wall_anchor_s` maps them
to epoch seconds (wall = t + anchor) so engine windows can be aligned.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Chunk:
    t_recv_s: float
    content: str = ""
    reasoning: str = ""
    tokens: int | None = None  # tokens this chunk carried (from continuous usage); None unknown
    finish_reason: str | None = None


@dataclass(frozen=True)
class RequestTrace:
    t_send_s: float
    t_headers_s: float | None
    chunks: tuple[Chunk, ...]
    status_code: int | None
    prompt_tokens: int | None  # from usage
    completion_tokens: int | None  # from usage (reasoning included)
    reasoning_tokens: int | None  # usage.completion_tokens_details.reasoning_tokens if sent
    finish_reason: str | None
    error: str | None = None  # one-line cause when the request failed
    error_kind: str | None = None  # exception class name
    usage: dict[str, Any] | None = None
    timings: dict[str, Any] | None = None  # llama.cpp final-chunk `timings`
    request_id: str | None = None
    t_done_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        # Compact chunk encoding: parallel lists are ~5x smaller than a list of dicts.
        d["chunks"] = {
            "t_recv_s": [c.t_recv_s for c in self.chunks],
            "content": [c.content for c in self.chunks],
            "reasoning": [c.reasoning for c in self.chunks],
            "tokens": [c.tokens for c in self.chunks],
            "finish_reason": [c.finish_reason for c in self.chunks],
        }
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RequestTrace:
        """A stored trace. Counts are checked when measured (decodescope.edge); one stored by
        an older version may hold a count that is not a whole number in range: read as None
        (unknown), so the numbers derived from it are withheld instead of failing every read."""
        d = dict(d)
        ch = d.pop("chunks")
        chunks = tuple(
            Chunk(t, c, r, _count(n, low=-_MAX_STORED_COUNT), f)
            for t, c, r, n, f in zip(ch["t_recv_s"], ch["content"], ch["reasoning"], ch["tokens"],
                                     ch["finish_reason"], strict=True)
        )
        for k in ("prompt_tokens", "completion_tokens", "reasoning_tokens"):
            d[k] = _count(d.get(k))
        return cls(chunks=chunks, **d)


# The largest count read back from a stored trace (decodescope.edge.MAX_TOKEN_COUNT).
_MAX_STORED_COUNT = 100_000_000


def _count(n: Any, low: int = 0) -> int | None:
    """A stored count, or None when it is not a whole number in [low, _MAX_STORED_COUNT]
    (a chunk's count is a difference of usage totals: it may be negative, and is then unused)."""
    return n if type(n) is int and low <= n <= _MAX_STORED_COUNT else None
