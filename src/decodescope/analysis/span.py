"""Per-trial engine numbers from the trial's own span (glossary: "engine span").

For an engine whose counters move at every step (vLLM, the simulator), a trial's engine
numbers are counter deltas between two scrapes that both lie inside the trial's steady state:
no window that straddles the trial's start or end, no running-request gauge in the divisor.
The requests in flight are the probe's own, so the divisor is measured on the client: the
request-seconds during which the probe's requests were decoding inside the span (1 × span at
concurrency 1). The running gauge only detects foreign load (analysis/contamination.py).

Stalls (`records.request_metrics.stall_gaps`) are cut out: the span is split into runs of consecutive scrapes
that do not overlap a stall, and the runs' deltas are summed.

A span that is too coarse gives no rate: `None` with the reason, never a scaled guess. The
timing error of a span is bounded by the scrapes' own latency (the engine read its counters
somewhere between send and answer) and by one step of tokens at each end; a span whose bound
exceeds MAX_SPAN_ERROR, or that covers less than MIN_SPAN_SHARE of the steady state, is
withheld. Counts (MAL, tokens per step) do not depend on timing and are kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from decodescope.telemetry.prometheus import Scrape, is_reset

Interval = tuple[float, float]  # perf_counter seconds of the probe process

# Largest bound on the relative error of a span's rate that still gives a number: the
# verdict's minimum effect (3 %). The bound is a worst case (±1 step of tokens, the whole
# scrape latency); typical errors are several times smaller (bench/bench_verdicts.py).
MAX_SPAN_ERROR = 0.03
# Smallest share of the trial's steady state that the scrapes inside it must cover.
MIN_SPAN_SHARE = 0.5


@dataclass(frozen=True)
class SpanNumbers:
    """Engine numbers of one trial over its span."""

    generation_tokens: int | None
    steps: int | None  # generated − accepted over the span
    drafts: int | None
    draft_tokens: int | None
    accepted_tokens: int | None
    span_s: float  # wall time covered by the span's runs
    request_s: float  # probe-request-seconds of decoding inside the runs (the divisor)
    runs: int  # contiguous runs of scrapes (more than one when stalls were cut out)
    error_bound: float | None  # relative bound on the rate's timing/count error
    withheld: str | None  # why no rate is given; None when the rates are trusted
    max_occupancy: float | None  # largest running + waiting the engine reported in the span

    @property
    def decode_rate(self) -> float | None:
        """Tokens per second per probe request."""
        if self.withheld or self.generation_tokens is None or self.request_s <= 0:
            return None
        return self.generation_tokens / self.request_s

    @property
    def step_rate(self) -> float | None:
        if self.withheld or self.steps is None or self.request_s <= 0:
            return None
        return self.steps / self.request_s

    @property
    def tokens_per_step(self) -> float | None:
        if self.generation_tokens is None or not self.steps:
            return None
        return self.generation_tokens / self.steps

    @property
    def mal(self) -> float | None:
        if not self.drafts or self.accepted_tokens is None:
            return None
        return 1.0 + self.accepted_tokens / self.drafts

    def to_dict(self) -> dict[str, Any]:
        return {"generation_tokens": self.generation_tokens, "steps": self.steps,
                "drafts": self.drafts, "draft_tokens": self.draft_tokens,
                "accepted_tokens": self.accepted_tokens, "span_s": self.span_s,
                "request_s": self.request_s, "runs": self.runs,
                "error_bound": self.error_bound, "withheld": self.withheld,
                "max_occupancy": self.max_occupancy, "decode_rate": self.decode_rate,
                "step_rate": self.step_rate, "tokens_per_step": self.tokens_per_step,
                "mal": self.mal}


def own_request_seconds(decoding: Sequence[Interval], a: float, b: float) -> float:
    """Seconds of probe requests decoding inside [a, b] (sum over requests of the overlap)."""
    return sum(max(0.0, min(e, b) - max(s, a)) for s, e in decoding)


def _overlaps(a: float, b: float, cuts: Sequence[Interval]) -> bool:
    return any(s < b and e > a for s, e in cuts)


def _delta(x: Scrape, y: Scrape, key: str) -> float | None:
    if key in x.counters and key in y.counters:
        return y.counters[key] - x.counters[key]
    return None


def trial_span(scrapes: Sequence[Scrape], steady: Interval, decoding: Sequence[Interval],
               stalls: Sequence[Interval] = ()) -> SpanNumbers | None:
    """The engine numbers of one trial over its steady state `steady` (perf_counter), from the
    scrapes whose read time lies inside it. `decoding`: each probe request's
    [first token, last token] interval; `stalls`: intervals to cut out. None when the scrapes
    carry no engine counters at all."""
    a, b = steady
    ok = sorted((s for s in scrapes if not s.error and s.prefix), key=lambda s: s.t_mid_s)
    if not ok or b <= a:
        return None
    inside = [s for s in ok if a <= s.t_mid_s <= b]
    # Runs of consecutive scrapes: a pair joins the current run unless a stall overlaps it or
    # the engine restarted between them.
    runs: list[list[Scrape]] = []
    for s in inside:
        if runs and not _overlaps(runs[-1][-1].t_mid_s, s.t_mid_s, stalls) \
                and not is_reset(runs[-1][-1], s):
            runs[-1].append(s)
        else:
            runs.append([s])
    runs = [r for r in runs if len(r) >= 2]
    totals: dict[str, float | None] = {k: 0.0 for k in (
        "generation_tokens", "drafts", "draft_tokens", "accepted_tokens")}
    span_s = request_s = time_err = 0.0
    for r in runs:
        x, y = r[0], r[-1]
        for k in totals:
            d = _delta(x, y, k)
            cur = totals[k]
            totals[k] = None if (d is None or cur is None) else cur + d
        span_s += y.t_mid_s - x.t_mid_s
        request_s += own_request_seconds(decoding, x.t_mid_s, y.t_mid_s)
        time_err += (x.latency_s + y.latency_s) / 2.0
    occ = [s.gauges.get("running", 0.0) + s.gauges.get("waiting", 0.0)
           for s in inside if "running" in s.gauges]
    gen = _int(totals["generation_tokens"])
    acc = _int(totals["accepted_tokens"])
    drafts = _int(totals["drafts"])
    if acc is None and drafts is None and gen is not None and _no_spec(ok):
        acc = drafts = 0  # no speculative decoding: every step emits one token
    steps = (gen - acc) if (gen is not None and acc is not None and gen > acc) else None
    withheld = None
    bound = None
    steady_s = b - a
    if not runs:
        withheld = (f"no two scrapes inside the trial's {steady_s:.2f} s steady state: the scrape "
                    "interval is too coarse for this trial")
    elif span_s < MIN_SPAN_SHARE * steady_s:
        withheld = (f"scrapes cover {span_s:.2f} s of the {steady_s:.2f} s steady state "
                    f"(< {MIN_SPAN_SHARE:.0%}): too coarse for a rate")
    elif not gen or request_s <= 0:
        withheld = "no tokens generated between the span's scrapes"
    else:
        tps = (gen / steps) if steps else 1.0
        bound = time_err / span_s + len(runs) * tps / gen
        if bound > MAX_SPAN_ERROR:
            withheld = (f"the span's timing is known to ±{bound:.1%} only (scrape latency, "
                        "step granularity): too coarse for a rate")
    return SpanNumbers(gen, steps, drafts, _int(totals["draft_tokens"]), acc, span_s, request_s,
                       len(runs), bound, withheld, max(occ) if occ else None)


def _no_spec(scrapes: Sequence[Scrape]) -> bool:
    """vLLM exposes the spec-decode counters only when speculative decoding is configured:
    their absence on a vLLM engine means every step emits exactly one token."""
    return all(s.prefix == "vllm" and "drafts" not in s.counters for s in scrapes)


def _int(x: float | None) -> int | None:
    return None if x is None else int(round(x))
