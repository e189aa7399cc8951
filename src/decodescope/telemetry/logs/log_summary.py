"""LogSummary: a log's engine windows summed up in the seed's terms (built by accumulate.py).

decode = the window's decode rate (all running requests, tok/s); MAL per window and overall
(1 + Σaccepted / Σdrafts; printed MAL weighted by estimated request-steps when an engine
prints no counts); step rate = verification steps per second per running request; idle gaps
= spacing > 1.5 x window length.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from decodescope.records.findings import Finding
from decodescope.records.summary import Summary
from decodescope.records.window import EngineWindow
from decodescope.telemetry.logs.bins import WindowBin

SCHEMA_VERSION = 1
SHORT_SPAN_S = 600.0  # spans shorter than this are shown with seconds


@dataclass(frozen=True)
class IdleGap:
    engine_id: str | None
    t_start_s: float
    t_end_s: float

    @property
    def seconds(self) -> float:
        return self.t_end_s - self.t_start_s

    def to_dict(self) -> dict[str, Any]:
        return {"engine_id": self.engine_id, "t_start_s": self.t_start_s,
                "t_end_s": self.t_end_s, "seconds": self.seconds}


@dataclass(frozen=True)
class EngineSeen:
    engine_id: str | None
    pid: int | None
    windows: int
    mal: float | None  # 1 + Σaccepted / Σdrafts of this engine's windows
    engine: str | None = None  # "vllm" | "sglang" | "llamacpp": a log may mix two
    t_first_s: float | None = None  # end of its first and last window with clock time
    t_last_s: float | None = None


@dataclass(frozen=True)
class RequestShape:
    """Requests of one shape in a per-request log (llama.cpp): output tokens and how much of
    their decode drafted — what a caliber changes and the log shows. A log of several shapes
    mixes calibers: its overall figures say so and these rows split them."""
    output_tokens: int | None
    drafting: str  # "most steps drafted" | "few steps drafted" | "no drafts" | "drafts unknown"
    requests: int
    decode: Summary | None  # tok/s per request
    mal: float | None  # 1 + Σaccepted / Σdrafts over the shape's requests
    step_rate: Summary | None
    tokens_per_step: float | None  # Σgenerated / Σsteps where the steps are known

    def label(self) -> str:
        out = f"{self.output_tokens} output tokens" if self.output_tokens is not None \
            else "output tokens unknown"
        return f"{out}, {self.drafting}"

    def to_dict(self) -> dict[str, Any]:
        return {"output_tokens": self.output_tokens, "drafting": self.drafting,
                "requests": self.requests,
                "decode_tok_s": self.decode.to_dict() if self.decode else None,
                "mal": self.mal,
                "step_rate_per_s": self.step_rate.to_dict() if self.step_rate else None,
                "tokens_per_step": self.tokens_per_step}


@dataclass(frozen=True)
class LogSummary:
    path: str
    engine: str | None  # "vllm" | "sglang" | "llamacpp"; None when nothing was recognized
    windows_total: int
    windows_idle: int
    t_first_s: float | None
    t_last_s: float | None
    decode: Summary | None  # tok/s per window (aggregate over running requests)
    decode_per_request: Summary | None
    mal: Summary | None  # per window
    mal_overall: float | None
    mal_overall_estimated: bool  # printed MAL weighted by estimated steps (no counts printed)
    step_rate: Summary | None  # verification steps / s / running request, per window
    running: Summary | None
    generation_tokens: int | None
    drafts: int | None
    accepted_tokens: int | None
    idle_gaps: tuple[IdleGap, ...]  # the largest, by length
    idle_gap_count: int
    idle_gap_total_s: float
    engines: tuple[EngineSeen, ...]
    lines: dict[str, Any]
    since_s: float | None = None
    until_s: float | None = None
    bins: tuple[WindowBin, ...] = ()
    windows: tuple[EngineWindow, ...] = ()  # the most recent, up to max_windows
    notes: tuple[Finding, ...] = ()
    simulated: bool = False  # written by `decodescope sim` (its header line says so)
    draft_coverage: float | None = None  # Σdrafts / Σsteps where both are known (1: every step)
    drafts_rate: Summary | None = None  # drafts / s / running request, per window (NOT steps)
    windows_step_unknown: int = 0  # windows with drafts but no step rate (coverage < 1 ...)
    windows_steps_withheld: int = 0  # generated − accepted below the drafts: counts contradict
    windows_partial_coverage: int = 0  # windows where not every step drafted (n-gram, suffix)
    spec: dict[str, Any] = field(default_factory=dict)  # method, k, lines, off (vLLM)
    windows_zero_running: int = 0  # windows with tokens but 0 running: step rate withheld
    # Stats intervals used: (engine, engine id, seconds, windows) — what the windows assumed.
    intervals: tuple[tuple[str, str | None, float, int], ...] = ()
    # Per-request logs (llama.cpp): requests by shape (output tokens, drafting) and the most
    # requests that ran at once (from each request's elapsed stamp and its prompt + eval time).
    shapes: tuple[RequestShape, ...] = ()
    shapes_other: int = 0  # requests of shapes beyond the ones listed
    max_at_once: int | None = None
    schema_version: int = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        def s(x: Summary | None) -> dict[str, Any] | None:
            return x.to_dict() if x is not None else None

        return {
            "schema_version": self.schema_version,
            "path": self.path,
            "engine": self.engine,
            "simulated": self.simulated,
            "answer": self.headline(),
            "windows_total": self.windows_total,
            "windows_idle": self.windows_idle,
            "windows_listed": len(self.windows),
            "t_first_s": self.t_first_s, "t_last_s": self.t_last_s,
            "since_s": self.since_s, "until_s": self.until_s,
            "decode_tok_s": s(self.decode),
            "decode_per_request_tok_s": s(self.decode_per_request),
            "mal": s(self.mal),
            "mal_overall": self.mal_overall,
            "mal_overall_estimated": self.mal_overall_estimated,
            "step_rate_per_s": s(self.step_rate),
            "draft_coverage": self.draft_coverage,
            "drafts_per_s": s(self.drafts_rate),
            "windows_step_unknown": self.windows_step_unknown,
            "windows_steps_withheld": self.windows_steps_withheld,
            "windows_partial_coverage": self.windows_partial_coverage,
            "windows_zero_running": self.windows_zero_running,
            "intervals": [{"engine": e, "engine_id": i, "interval_s": s, "windows": n}
                          for e, i, s, n in self.intervals],
            "spec": self.spec,
            "running": s(self.running),
            "generation_tokens": self.generation_tokens,
            "drafts": self.drafts,
            "accepted_tokens": self.accepted_tokens,
            "idle_gaps": [g.to_dict() for g in self.idle_gaps],
            "idle_gap_count": self.idle_gap_count,
            "idle_gap_total_s": self.idle_gap_total_s,
            "engines": [vars(e) for e in self.engines],
            "lines": self.lines,
            "bins": [b.to_dict() for b in self.bins],
            "windows": [w.to_dict() for w in self.windows],
            "notes": [n.to_dict() for n in self.notes],
            "mixes": self.mixes(),
            "request_shapes": [x.to_dict() for x in self.shapes],
            "request_shapes_other": self.shapes_other,
            "max_requests_at_once": self.max_at_once,
            **self.extra,
        }

    def headline(self) -> str:
        """The answer first: engine, window count and span, decode, MAL, step rate."""
        name = " + ".join(_NAMES.get(e, e) for e in self.engine_kinds()) or "engine"
        if self.simulated:
            name += " (SIMULATED)"
        if self.windows_total == 0:
            return f"{name} log: no engine windows found"
        unit = "request" if self.engine == "llamacpp" else "window"
        unit += "" if self.windows_total == 1 else "s"
        mix = self.mixes()
        parts = [f"{name} log, {self.windows_total} {unit}{_span(self.t_first_s, self.t_last_s)}"
                 + (f" ({mix}: figures over all of them"
                    + ("; per shape below)" if len(self.shapes) > 1 else ")") if mix else "")
                 + ":"]
        figures = []
        if self.decode is not None:
            figures.append(f"decode median {self.decode.median:.1f} tok/s "
                           f"(peak {self.decode.max:.1f})")
        if self.mal_overall is not None:
            figures.append(f"MAL {self.mal_overall:.2f}")
        elif self.decode is not None and (
                (self.spec.get("off") and self.engine == "vllm")
                or (self.shapes and not self.shapes_other
                    and all(x.drafting == "no drafts" for x in self.shapes))):
            figures.append("speculative decoding off (MAL 1)")
        if self.draft_coverage is not None and self.draft_coverage < 0.97:
            figures.append(f"{self.draft_coverage:.0%} of steps drafted")
        if self.step_rate is not None:
            figures.append(f"step rate {self.step_rate.median:.1f}/s")
        elif self.drafts_rate is not None:
            figures.append(f"step rate unknown (drafts {self.drafts_rate.median:.1f}/s are not "
                           "steps)")
        if self.running is not None and self.running.median != 1:
            figures.append(f"{self.running.median:.3g} running")
        if not figures:
            figures.append("no decode activity")
        return " ".join(parts) + " " + ", ".join(figures)


    def mixes(self) -> str | None:
        """What the overall figures mix, in words (None: one request shape, one at a time)."""
        n = len(self.shapes) + (1 if self.shapes_other else 0)
        words = []
        if n > 1:
            words.append(f"{n} request shapes")
        if self.max_at_once is not None and self.max_at_once > 1:
            words.append(f"up to {self.max_at_once} at once")
        return ", ".join(words) or None

    def engine_kinds(self) -> list[str]:
        """The engines with windows here, the detected one first (two: a mixed log)."""
        kinds = [self.engine] if self.engine else []
        for e in self.engines:
            if e.engine and e.engine not in kinds:
                kinds.append(e.engine)
        return kinds


_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "llamacpp": "llama.cpp"}


def _span(t0: float | None, t1: float | None) -> str:
    if t0 is None or t1 is None:
        return ""
    a, b = datetime.fromtimestamp(t0), datetime.fromtimestamp(t1)
    hm = "%H:%M:%S" if t1 - t0 < SHORT_SPAN_S else "%H:%M"
    if a.date() == b.date():
        return f" {a:%m-%d} {a.strftime(hm)}\u2013{b.strftime(hm)}"
    return f" {a:%m-%d} {a.strftime(hm)} \u2013 {b:%m-%d} {b.strftime(hm)}"
