"""The caliber: everything that decides what a throughput number means.

A caliber is a declarative TOML file. Its identity is a hash of the normalized spec, which
includes the exact prompt text (for a token-targeted prompt: the exact material text it is cut
from, plus the target). Built-ins are named and versioned (`parity-code-32k@1`).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal

from decodescope.caliber import material as mat
from decodescope.errors import CaliberError

Endpoint = Literal["chat", "completions"]
CONTENT_CLASSES = ("code", "text", "chat")
TASK_CLASSES = ("code", "chat", "long-text", "rewrite", "prose")
IDENTITY_LEN = 12  # hex chars of sha256 shown and stored as the caliber identity

# Limits a caliber is checked against before any material is generated (resolve.py), so a
# typo cannot make `calibers show` allocate gigabytes or a probe open a million sockets.
# Upper bound on material blocks a prompt may use; 64K-token prompts need ~400 code blocks.
MAX_BLOCKS = 2000
# Prompt tokens a target may ask for: 1M tokens is beyond the longest served context today,
# and MAX_BLOCKS of material (~300K tokens) runs out well before it anyway.
MAX_TARGET_TOKENS = 1 << 20
# Output tokens per request: the longest generation limit engines accept today (1M context).
MAX_OUTPUT_TOKENS = 1 << 20
# Concurrent streams of one probe: each needs a socket; engines schedule a few hundred at once.
MAX_CONCURRENCY = 1024
# Requests per trial when a request rate is given without --num-requests or --duration: enough
# arrivals for one load period's percentiles, short enough for a CPU simulator.
DEFAULT_RATE_REQUESTS = 16
# Requests a request-rate or closed-loop load period may send: beyond this, a typo.
MAX_REQUESTS_PER_TRIAL = 100_000
# A caliber name is a file stem and half of `name@version`: no path separators, no quotes,
# no "@", nothing a shell or TOML would read differently.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}")


@dataclass(frozen=True)
class PromptSpec:
    content_class: str = "text"  # code | text | chat
    task: str = ""  # the instruction, after the material
    material: str | None = None  # None | "code" | "prose" (generated, see material.py)
    material_seed: int = 0
    blocks: int = 0  # fixed number of material blocks (when no target_tokens)
    target_tokens: int | None = None  # reach at least this many prompt tokens (via /tokenize)
    system: str | None = None
    text: str | None = None  # literal prompt text placed before the task


@dataclass(frozen=True)
class OutputSpec:
    max_tokens: int = 512
    min_tokens: int | None = None  # realized output below this misses the caliber
    ignore_eos: bool = False
    steady_state_start: int = 0  # steady-state window starts after this many output tokens


@dataclass(frozen=True)
class SamplingSpec:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # engine-specific, passed through


@dataclass(frozen=True)
class LoadSpec:
    """How a trial sends its requests (docs/peers.md). The default is the classic probe: each
    trial sends `concurrency` requests at once, one per stream. With `num_requests` or
    `duration_s` a trial is one load period: closed loop (each of `concurrency` streams sends
    its next request when the last one ended), or open loop at `request_rate` requests/s with
    gamma-distributed gaps (`burstiness` 1 = Poisson, vLLM's definition) and at most
    `concurrency` in flight. Requests of a trial are its members, stored with their traces."""

    request_rate: float | None = None  # requests/s (open loop); None: closed loop
    burstiness: float = 1.0  # gamma shape of the inter-arrival times; 1 = Poisson
    num_requests: int | None = None  # requests per trial (load period)
    duration_s: float | None = None  # seconds of sending per trial; in-flight requests finish

    @property
    def classic(self) -> bool:
        return self == LoadSpec()


@dataclass(frozen=True)
class DatasetSpec:
    """Prompts from a file (caliber/dataset.py): identified by the hash of its bytes, sampled
    in a fixed order (`seed`); request j of a probe uses entry order[j mod entries]."""

    path: str  # where it was read; not part of the identity (same bytes, same caliber)
    sha256: str  # of the file's bytes
    format: str  # "jsonl-prompt" | "jsonl-messages" | "sharegpt"
    entries: int
    seed: int = 0


@dataclass(frozen=True)
class SloSpec:
    """Limits a request must meet to count toward goodput (caliber/slo.py parses them). They
    judge requests and change nothing that is sent: kept out of the identity."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    preset: str | None = None  # the named preset they came from, if any


@dataclass(frozen=True)
class Caliber:
    name: str
    version: int
    description: str = ""
    task_class: str = "chat"
    thinking: bool = False
    endpoint: Endpoint = "chat"
    concurrency: int = 1
    include_usage: bool = True
    continuous_usage_stats: bool = True
    prompt: PromptSpec = field(default_factory=PromptSpec)
    output: OutputSpec = field(default_factory=OutputSpec)
    sampling: SamplingSpec = field(default_factory=SamplingSpec)
    load: LoadSpec = field(default_factory=LoadSpec)
    dataset: DatasetSpec | None = None
    slo: SloSpec | None = None

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"

    # -- prompt -----------------------------------------------------------------------------
    def material_blocks(self, n: int | None = None) -> list[str]:
        p = self.prompt
        if p.material is None:
            return []
        count = n if n is not None else (p.blocks or max_blocks_for(p.target_tokens))
        if not 0 <= count <= MAX_BLOCKS:  # resolve.py refuses it earlier; this guards other paths
            raise CaliberError(f"caliber {self.ref} asks for {count} material blocks; at most "
                               f"{MAX_BLOCKS} are generated", where="prompt.blocks",
                               remedy=f"Use 0..{MAX_BLOCKS} blocks, or target_tokens")
        return mat.blocks(p.material, p.material_seed, count)

    def prompt_text(self, n_blocks: int | None = None) -> str:
        """The exact user prompt with the first n material blocks (default: the spec's)."""
        parts = []
        if self.prompt.text:
            parts.append(self.prompt.text.rstrip("\n") + "\n\n")
        parts.extend(self.material_blocks(n_blocks))
        if self.prompt.task:
            parts.append(self.prompt.task)
        return "".join(parts)

    # -- identity ---------------------------------------------------------------------------
    def normalized(self) -> dict[str, Any]:
        """Normalized content: the spec minus cosmetic fields, plus the exact prompt text hash."""
        d = asdict(self)
        d.pop("description")
        d["prompt"]["material_text_sha256"] = sha256(self.prompt_text())
        sched = self.seed_schedule
        if sched is not None:  # only where it applies: other identities stay as they were
            d["sampling"]["seed_schedule"] = sched
        # Load shape and dataset join the identity only when used, so calibers without them
        # keep the identities their stored runs and baselines carry.
        if self.load.classic:
            d.pop("load")
        d.pop("slo")  # judges requests, sends nothing: runs at other SLOs stay comparable
        if self.dataset is None:
            d.pop("dataset")
        else:
            d["dataset"].pop("path")
        return d

    @property
    def seed_schedule(self) -> str | None:
        """How sampling seeds vary over a probe: with a declared seed and temperature > 0,
        request j (counting across trials) uses seed + j, so trials are independent samples
        that a rerun repeats exactly. Greedy decoding has nothing to vary."""
        s = self.sampling
        if s.seed is None or not (s.temperature or 0) > 0:
            return None
        return "seed + request index"

    @property
    def identity(self) -> str:
        canon = json.dumps(self.normalized(), sort_keys=True, separators=(",", ":"))
        return sha256(canon)[:IDENTITY_LEN]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["identity"] = self.identity
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Caliber:
        d = {k: v for k, v in d.items() if k != "identity"}
        sub = {"prompt": PromptSpec, "output": OutputSpec, "sampling": SamplingSpec,
               "load": LoadSpec, "dataset": DatasetSpec,
               "slo": SloSpec}
        kw: dict[str, Any] = {}
        for k, v in d.items():
            kw[k] = sub[k](**v) if (k in sub and v is not None) else v
        return cls(**kw)

    def with_(self, **changes: Any) -> Caliber:
        return replace(self, **changes)

    def with_load(self, concurrency: int | None = None, **load: Any) -> Caliber:
        """This caliber under another load shape (CLI options): a new identity, and the
        caliber diff names the load elements that changed. None leaves an element as it is."""
        changes = {k: v for k, v in load.items() if v is not None}
        new = replace(self, load=replace(self.load, **changes)) if changes else self
        if concurrency is not None:
            new = replace(new, concurrency=concurrency)
        return new


def max_blocks_for(target_tokens: int | None) -> int:
    """Material blocks generated before trimming to a token target.

    A material block is ~1,000 ASCII characters: >= 150 tokens unless a tokenizer packs more
    than 6.5 characters per token. 1.3x headroom; the probe says so if material runs out.
    """
    if not target_tokens:
        return 0
    return min(MAX_BLOCKS, int(target_tokens / 150 * 1.3) + 8)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def element_table(c: Caliber) -> list[tuple[str, str]]:
    """(element, value) rows: what `calibers show` prints and what triage diffs."""
    p, o, s = c.prompt, c.output, c.sampling
    rows = [
        ("content class", p.content_class),
        ("task class", c.task_class),
        ("prompt", _prompt_desc(c)),
        ("prompt text sha256", (f"dataset {c.dataset.sha256[:16]}" if c.dataset
                                else sha256(c.prompt_text())[:16])),
        ("thinking", "on" if c.thinking else "off"),
        ("output max_tokens", str(o.max_tokens)),
        ("output min_tokens", str(o.min_tokens) if o.min_tokens is not None else "-"),
        ("ignore_eos", str(o.ignore_eos).lower()),
        ("steady-state window", f"after {o.steady_state_start} output tokens"),
        ("temperature", str(s.temperature)),
        ("top_p", str(s.top_p)),
        ("top_k", _opt(s.top_k)),
        ("seed", _opt(s.seed) + (f" ({c.seed_schedule})" if c.seed_schedule else "")),
        ("presence_penalty", _opt(s.presence_penalty)),
        ("frequency_penalty", _opt(s.frequency_penalty)),
        ("repetition_penalty", _opt(s.repetition_penalty)),
        ("sampling extra", json.dumps(s.extra, sort_keys=True) if s.extra else "-"),
        ("concurrency", _concurrency_desc(c)),
        ("dataset", _dataset_desc(c.dataset)),
        ("request rate", _rate_desc(c.load)),
        ("requests per trial", _requests_desc(c)),
        ("trial duration", f"{c.load.duration_s:g} s of sending" if c.load.duration_s else "-"),
        ("endpoint", c.endpoint),
        ("stream options", _stream_desc(c)),
        ("SLO", slo_desc(c.slo)),
    ]
    return rows


def slo_desc(slo: SloSpec | None) -> str:
    """"ttft ≤ 200 ms, tpot ≤ 50 ms (preset NAME)", or "-" without one."""
    if slo is None:
        return "-"
    parts = [f"{k} ≤ {v:g} ms" for k, v in (("ttft", slo.ttft_ms), ("tpot", slo.tpot_ms),
                                            ("e2e", slo.e2e_ms)) if v is not None]
    return ", ".join(parts) + (f" (preset {slo.preset})" if slo.preset else "")


def _opt(v: object) -> str:
    return "-" if v is None else str(v)


def _concurrency_desc(c: Caliber) -> str:
    if c.load.request_rate is not None:
        return f"at most {c.concurrency} in flight"
    return str(c.concurrency)


def _dataset_desc(d: DatasetSpec | None) -> str:
    if d is None:
        return "-"
    return f"{d.format}, {d.entries} entries, sha256 {d.sha256[:16]}, order seed {d.seed}"


def _rate_desc(load: LoadSpec) -> str:
    if load.request_rate is None:
        return "- (closed loop)"
    shape = "Poisson" if load.burstiness == 1 else f"gamma, burstiness {load.burstiness:g}"
    return f"{load.request_rate:g} req/s ({shape})"


def _requests_desc(c: Caliber) -> str:
    if c.load.classic:
        return f"{c.concurrency} (one per stream)"
    return str(c.load.num_requests) if c.load.num_requests else "until the duration ends"


def _prompt_desc(c: Caliber) -> str:
    p = c.prompt
    if c.dataset is not None:
        return f"dataset ({c.dataset.format}), one entry per request"
    if p.target_tokens:
        return f"{p.material} material to >= {p.target_tokens} tokens + task"
    if p.material:
        return f"{p.blocks} {p.material} blocks + task"
    return "literal text + task" if p.text else "task only"


def _stream_desc(c: Caliber) -> str:
    opts = []
    if c.include_usage:
        opts.append("include_usage")
    if c.continuous_usage_stats:
        opts.append("continuous_usage_stats")
    return ", ".join(opts) or "-"


FIELD_NAMES = {f.name for f in fields(Caliber)}
