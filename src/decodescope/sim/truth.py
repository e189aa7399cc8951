"""Ground truth: what the simulator really emitted, and when.

Emit times are taken right after the chunk's bytes were handed to the socket
(`transport.write`), on both clocks: `time.monotonic()` (comparable with a client's monotonic
clock on the same machine) and `time.time()`. Rates come in real seconds (what a client
measures) and simulated seconds (real / time_scale, the engine's own clock).
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class ChunkTruth:
    t_emit_monotonic_s: float
    t_emit_wall_s: float
    t_deadline_monotonic_s: float  # when the schedule said it should go out
    tokens: int
    reasoning_tokens: int
    drafted: int  # 0 for the prefill token
    accepted: int

    @property
    def lateness_s(self) -> float:
        return self.t_emit_monotonic_s - self.t_deadline_monotonic_s


@dataclass
class RequestTruth:
    response_id: str  # the chunk `id` (and X-Request-Id unless the client sent one)
    x_request_id: str | None
    endpoint: str
    content_class: str
    thinking: bool
    streamed: bool
    time_scale: float
    prompt_tokens: int
    max_tokens: int
    faults: str
    t_arrival_monotonic_s: float
    chunks: list[ChunkTruth] = field(default_factory=list)
    finish_reason: str | None = None
    aborted: bool = False  # connection dropped (fault) or client went away
    stalled_s: float = 0.0  # real seconds spent in an injected stall

    @property
    def emits(self) -> list[tuple[float, int]]:
        """[(t_emit_monotonic_s, tokens)] for every token-carrying chunk."""
        return [(c.t_emit_monotonic_s, c.tokens) for c in self.chunks]

    @property
    def completion_tokens(self) -> int:
        return sum(c.tokens for c in self.chunks)

    @property
    def reasoning_tokens(self) -> int:
        return sum(c.reasoning_tokens for c in self.chunks)

    @property
    def drafts(self) -> int:
        return sum(1 for c in self.chunks if c.drafted)

    @property
    def accepted_tokens(self) -> int:
        return sum(c.accepted for c in self.chunks)

    @property
    def mal(self) -> float | None:
        """Realized MAL = 1 + accepted / drafts (None without a decode step)."""
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts else None

    @property
    def ttft_real_s(self) -> float | None:
        return self.chunks[0].t_emit_monotonic_s - self.t_arrival_monotonic_s if self.chunks else None

    def _decode_span_real_s(self) -> float | None:
        if len(self.chunks) < 2:
            return None
        span = self.chunks[-1].t_emit_monotonic_s - self.chunks[0].t_emit_monotonic_s
        return span if span > 0 else None

    @property
    def step_rate_real_hz(self) -> float | None:
        """Decode steps per real second, from the first output chunk to the last."""
        span = self._decode_span_real_s()
        return (len(self.chunks) - 1) / span if span else None

    @property
    def decode_rate_real_tps(self) -> float | None:
        """Output tokens after the first chunk per real second (TTFT excluded)."""
        span = self._decode_span_real_s()
        return (self.completion_tokens - self.chunks[0].tokens) / span if span else None

    @property
    def step_rate_sim_hz(self) -> float | None:
        r = self.step_rate_real_hz
        return r * self.time_scale if r is not None else None

    @property
    def decode_rate_sim_tps(self) -> float | None:
        r = self.decode_rate_real_tps
        return r * self.time_scale if r is not None else None

    def summary(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k != "chunks"}
        for name in ("completion_tokens", "reasoning_tokens", "drafts", "accepted_tokens", "mal",
                     "ttft_real_s", "step_rate_real_hz", "step_rate_sim_hz",
                     "decode_rate_real_tps", "decode_rate_sim_tps"):
            d[name] = getattr(self, name)
        d["chunks"] = len(self.chunks)
        return d

    def to_dict(self) -> dict[str, Any]:
        d = self.summary()
        d["chunks"] = [asdict(c) for c in self.chunks]
        return d


class Truth:
    """All requests' truth, keyed by response id (and by the client's X-Request-Id). Thread-safe
    for readers in other threads; written only by the server's event loop. Keeps the newest
    `max_requests` requests (a long benchmark must not grow without bound)."""

    def __init__(self, max_requests: int = 5000) -> None:
        self._lock = threading.Lock()
        self._by_id: dict[str, RequestTruth] = {}
        self._order: deque[RequestTruth] = deque()
        self.max_requests = max_requests

    def add(self, rec: RequestTruth) -> None:
        with self._lock:
            self._order.append(rec)
            self._by_id[rec.response_id] = rec
            if rec.x_request_id:
                self._by_id[rec.x_request_id] = rec
            while len(self._order) > self.max_requests:
                old = self._order.popleft()
                for key in (old.response_id, old.x_request_id):
                    if key and self._by_id.get(key) is old:
                        del self._by_id[key]

    def get(self, request_id: str) -> RequestTruth | None:
        with self._lock:
            return self._by_id.get(request_id)

    def __getitem__(self, request_id: str) -> RequestTruth:
        rec = self.get(request_id)
        if rec is None:
            raise KeyError(request_id)
        return rec

    def __contains__(self, request_id: object) -> bool:
        return isinstance(request_id, str) and self.get(request_id) is not None

    def __len__(self) -> int:
        with self._lock:
            return len(self._order)

    def requests(self) -> list[RequestTruth]:
        with self._lock:
            return list(self._order)

    def lateness_s(self) -> list[float]:
        """Emit lateness vs schedule of every chunk of every streamed request."""
        return [c.lateness_s for r in self.requests() if r.streamed for c in r.chunks]
