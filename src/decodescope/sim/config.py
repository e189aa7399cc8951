"""Simulator knobs: one frozen dataclass, every duration with its unit and clock in the name.

Two clocks appear here. *Simulated* seconds are the engine's own time: `step_rate_hz`,
`prefill_rate_tps`, `stall_s`, `log_interval_s` are in simulated seconds. *Real* seconds are
what a client measures: real = simulated × `time_scale` (0.1 makes everything 10× faster).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from decodescope.errors import UsageError

SIM_VERSION = "0.11.2+sim"  # what GET /version answers; "+sim" marks it as simulated
DEFAULT_MODEL = "sim-vllm/decodescope-sim"
CONTENT_CLASSES = ("code", "text", "reasoning")
REASONING_FIELDS = ("reasoning_content", "reasoning")  # vLLM renamed the delta field
MAX_K = 16  # more draft positions than any shipped MTP/EAGLE config uses

# P(draft position i accepted | position i-1 accepted) at temperature 0. Expected MAL with
# k = 4 (config.expected_mal): code 4.54 (4.13 at temperature 1), text 2.90 (2.73),
# reasoning 3.13 (2.92). Code rewrites accept long runs; varied prose does not.
ACCEPTANCE_PROFILES: dict[str, tuple[float, ...]] = {
    "code": (0.97, 0.95, 0.93, 0.92),
    "text": (0.84, 0.68, 0.58, 0.48),
    "reasoning": (0.85, 0.75, 0.65, 0.55),
}


def position_probs(profile: tuple[float, ...], k: int) -> tuple[float, ...]:
    """The profile cut or extended (with its last value) to exactly k positions."""
    if k <= len(profile):
        return profile[:k]
    return profile + (profile[-1],) * (k - len(profile))


def expected_mal(probs: tuple[float, ...]) -> float:
    """MAL = 1 + Σ_i Π_{j≤i} p_j (the bonus token plus the expected accepted run)."""
    total, run = 1.0, 1.0
    for p in probs:
        run *= p
        total += run
    return total


@dataclass(frozen=True)
class FaultSpec:
    """Faults for one request (header `X-Sim-Fault`) or for every request (config).

    Header syntax: comma-separated `name[=value]`, e.g. `drop_after=10, stall=2`.
    """

    drop_after_tokens: int | None = None  # close the connection after this many output tokens
    status: int | None = None  # answer this HTTP status (500, 503, 429, 401 ...) with an error body
    stall_s: float | None = None  # pause this request's stream (simulated seconds) ...
    stall_after_tokens: int = 8  # ... once this many output tokens were sent
    malformed_after_tokens: int | None = None  # one `data:` line of invalid JSON after N tokens
    html: bool = False  # 200 text/html page instead of SSE / JSON
    no_usage: bool = False  # never send usage, whatever stream_options say
    counter_reset: bool = False  # /metrics counters restart from 0 when this request arrives
    foreign_load: int = 0  # extra background requests while this request runs

    NAMES = {
        "drop_after": ("drop_after_tokens", int),
        "status": ("status", int),
        "stall": ("stall_s", float),
        "stall_after": ("stall_after_tokens", int),
        "malformed": ("malformed_after_tokens", int),
        "html": ("html", bool),
        "no_usage": ("no_usage", bool),
        "counter_reset": ("counter_reset", bool),
        "foreign_load": ("foreign_load", int),
    }
    MALFORMED_DEFAULT_AFTER = 4

    @classmethod
    def parse(cls, text: str) -> FaultSpec:
        values: dict[str, object] = {}
        for item in text.replace(";", ",").split(","):
            item = item.strip()
            if not item:
                continue
            name, _, raw = item.partition("=")
            name, raw = name.strip().lower(), raw.strip()
            if name.isdigit() and not raw:  # "503" is shorthand for status=503
                name, raw = "status", name
            if name not in cls.NAMES:
                raise UsageError(
                    f"unknown simulator fault {name!r}",
                    where="X-Sim-Fault / --fault",
                    remedy=f"use one of: {', '.join(sorted(cls.NAMES))}",
                )
            attr, kind = cls.NAMES[name]
            values[attr] = _parse_value(name, raw, kind)
        if "malformed_after_tokens" in values and values["malformed_after_tokens"] is True:
            values["malformed_after_tokens"] = cls.MALFORMED_DEFAULT_AFTER
        status = values.get("status")
        if isinstance(status, int) and not 400 <= status <= 599:
            raise UsageError(f"fault status {status} is not an HTTP error status",
                             where="X-Sim-Fault / --fault", remedy="use 400..599, e.g. status=503")
        return cls(**values)  # type: ignore[arg-type]

    def merged(self, other: FaultSpec) -> FaultSpec:
        """`other`'s non-default fields win (request header over server config)."""
        base = FaultSpec()
        changes = {
            f.name: getattr(other, f.name)
            for f in dataclasses.fields(other)
            if getattr(other, f.name) != getattr(base, f.name)
        }
        return dataclasses.replace(self, **changes)

    def describe(self) -> str:
        base = FaultSpec()
        parts = [
            f"{f.name}={getattr(self, f.name)}"
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != getattr(base, f.name)
        ]
        return ", ".join(parts) or "none"


def _parse_value(name: str, raw: str, kind: type) -> object:
    if kind is bool:
        if raw in ("", "1", "true", "yes", "on"):
            return True
        if raw in ("0", "false", "no", "off"):
            return False
    elif kind is int and name == "malformed" and raw == "":
        return True  # replaced by the default position
    else:
        try:
            value = kind(raw)
        except ValueError:
            pass
        else:
            if value >= 0:
                return value
    raise UsageError(
        f"bad value {raw!r} for simulator fault {name!r}",
        where="X-Sim-Fault / --fault",
        remedy="write name=value with a non-negative number, e.g. drop_after=10",
    )


@dataclass(frozen=True)
class SimConfig:
    # Server
    host: str = "127.0.0.1"
    port: int = 0  # 0 = a free port
    model: str = DEFAULT_MODEL
    api_key: str | None = None  # when set, /v1/* answers 401 without `Authorization: Bearer KEY`
    version: str = SIM_VERSION
    sse_framing: str = "chunked"  # "chunked" (keep-alive) or "close" (close-delimited body)
    # Determinism and time
    seed: int = 0
    time_scale: float = 1.0  # real seconds per simulated second
    # Decode model (simulated seconds)
    step_rate_hz: float = 40.0  # verification steps / s of one request at batch 1, position 0
    k: int = 4  # draft tokens per verification step
    acceptance: dict[str, tuple[float, ...]] = field(
        default_factory=lambda: dict(ACCEPTANCE_PROFILES)
    )
    temperature_penalty: float = 0.05  # p_i × (1 − penalty × min(temperature, 1))
    batch_slowdown: float = 0.01  # step time × (1 + batch_slowdown × (running − 1))
    length_decay_per_1k: float = 0.0  # step time × (1 + decay × mean output position / 1000)
    prefill_rate_tps: float = 8000.0  # prompt tokens / s (TTFT = overhead + prompt / rate)
    prefill_overhead_s: float = 0.005
    max_model_len: int = 131072
    max_num_seqs: int = 256  # more concurrent requests wait (num_requests_waiting)
    kv_capacity_tokens: int = 262_144  # for the KV cache usage gauge
    eos_mean_tokens: int = 16384  # without ignore_eos a request stops after 0.5–1.5 × this
    # Thinking
    thinking_default: bool = False  # thinking when the request says nothing (Qwen3 itself: on)
    reasoning_tokens: int = 1024  # reasoning length when thinking is on (≤ half of the output)
    reasoning_field: str = "reasoning_content"
    report_reasoning_tokens: bool = False  # usage.completion_tokens_details (vLLM does not)
    # Telemetry
    log_path: str | None = None
    log_interval_s: float = 10.0  # simulated seconds, like VLLM_LOG_STATS_INTERVAL
    emulate_idle_dilution: bool = True  # vLLM's stale SpecDecoding elapsed after idle intervals
    max_truth_requests: int = 5000  # ground truth kept for the newest N requests
    # Faults applied to every request, and engine-level faults
    faults: FaultSpec = field(default_factory=FaultSpec)
    foreign_load: int = 0  # background requests always running (not ours)
    counter_reset_at_s: float | None = None  # simulated seconds after start

    def __post_init__(self) -> None:
        checks = [
            (self.time_scale > 0, "time_scale must be > 0"),
            (self.step_rate_hz > 0, "step_rate_hz must be > 0"),
            (0 <= self.k <= MAX_K, f"k must be in 0..{MAX_K} (0: speculative decoding off)"),
            (self.prefill_rate_tps > 0, "prefill_rate_tps must be > 0"),
            (self.log_interval_s > 0, "log_interval_s must be > 0"),
            (self.max_model_len > 1, "max_model_len must be > 1"),
            (self.max_num_seqs >= 1, "max_num_seqs must be >= 1"),
            (self.foreign_load >= 0, "foreign_load must be >= 0"),
            (self.max_truth_requests >= 1, "max_truth_requests must be >= 1"),
            (self.batch_slowdown >= 0 and self.length_decay_per_1k >= 0, "slowdowns must be >= 0"),
            (self.reasoning_field in REASONING_FIELDS, f"reasoning_field: {REASONING_FIELDS}"),
            (self.sse_framing in ("chunked", "close"), "sse_framing: chunked or close"),
            (set(CONTENT_CLASSES) <= set(self.acceptance), "acceptance needs every class"),
            (
                all(0 <= p <= 1 for ps in self.acceptance.values() for p in ps),
                "acceptance probabilities must be in [0, 1]",
            ),
        ]
        for ok, msg in checks:
            if not ok:
                raise UsageError(msg, where="simulator config")

    def probs(self, content_class: str, temperature: float) -> tuple[float, ...]:
        factor = 1.0 - self.temperature_penalty * min(max(temperature, 0.0), 1.0)
        return tuple(p * factor for p in position_probs(self.acceptance[content_class], self.k))

    def real_s(self, simulated_s: float) -> float:
        return simulated_s * self.time_scale
