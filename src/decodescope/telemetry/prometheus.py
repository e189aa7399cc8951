"""Prometheus `/metrics`: parse one scrape, and turn consecutive scrapes into engine windows.

Pure functions over text and `Scrape` records; the thread that fetches them lives in
`run/observers.py`. Names per engine: docs/telemetry.md and
shared/reference/engine-formats.md §1.3 (vLLM), §2.2 (SGLang), §3 (llama.cpp).

- Samples of one name are summed over label sets (data-parallel `engine="0".."N"`); the
  per-position acceptance counter is kept per `position`. `_created` samples are never
  summed as counts; they only witness restarts.
- A window between two scrapes holds counter deltas. If any counter went down, or the
  process start time or a counter's `_created` time moved, the engine restarted in between:
  the window is flagged "reset" and carries no counts, so a restart gives neither negative
  nor inflated rates.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from decodescope.records.window import EngineWindow

# Canonical counter keys -> exposed sample name, per engine prefix.
COUNTER_NAMES: dict[str, dict[str, str]] = {
    "vllm": {
        "generation_tokens": "vllm:generation_tokens_total",
        "prompt_tokens": "vllm:prompt_tokens_total",
        "drafts": "vllm:spec_decode_num_drafts_total",
        "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
        "accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
        "batch_steps": "vllm:iteration_tokens_total_count",  # one observation per engine step
    },
    "sglang": {
        "generation_tokens": "sglang:generation_tokens_total",  # incremented at request finish
        "prompt_tokens": "sglang:prompt_tokens_total",
    },
    "llamacpp": {
        "generation_tokens": "llamacpp:tokens_predicted_total",
        "prompt_tokens": "llamacpp:prompt_tokens_total",
        "decode_s": "llamacpp:tokens_predicted_seconds_total",  # summed per request
        "drafts": "llamacpp:spec_decode_num_drafts_total",
        "draft_tokens": "llamacpp:spec_decode_num_draft_tokens_total",
        "accepted_tokens": "llamacpp:spec_decode_num_accepted_tokens_total",
        "batch_steps": "llamacpp:n_decode_total",  # llama_decode() calls, prefill included
    },
}
GAUGE_NAMES: dict[str, dict[str, str]] = {
    "vllm": {"running": "vllm:num_requests_running", "waiting": "vllm:num_requests_waiting"},
    "sglang": {
        "running": "sglang:num_running_reqs",
        "waiting": "sglang:num_queue_reqs",
        "gen_throughput": "sglang:gen_throughput",  # windowed (last decode log interval)
        "accept_length": "sglang:spec_accept_length",  # windowed MAL, bonus included
    },
    "llamacpp": {"running": "llamacpp:requests_processing", "waiting": "llamacpp:requests_deferred"},
}
PER_POS_NAMES = {
    "vllm": "vllm:spec_decode_num_accepted_tokens_per_pos_total",
    "llamacpp": "llamacpp:spec_decode_num_accepted_tokens_per_pos_total",
}
# prometheus_client's default process collector (vLLM, SGLang): a change means a restart.
PROCESS_START = "process_start_time_seconds"
# llama.cpp and SGLang update their counters when a request finishes (design.md §7), so only
# whole-trial windows (trial start -> trial end scrape) mean anything there.
FINISH_UPDATED = ("llamacpp", "sglang")



def _wanted() -> frozenset[str]:
    names = {n for table in (COUNTER_NAMES, GAUGE_NAMES) for m in table.values()
             for n in m.values()} | set(PER_POS_NAMES.values()) | {PROCESS_START}
    created = {n.removesuffix("_total") + "_created" for n in names if n.endswith("_total")}
    return frozenset(names | created)


WANTED = _wanted()


# Samples of the names we use in one scrape: ~30 per engine (counters, gauges, `_created`,
# one per draft position), so 20,000 is hundreds of data-parallel ranks or models. Past it the
# scrape is refused (a scrape error), so parsing stays bounded (~0.2 s) whatever the server sends.
MAX_RELEVANT_SAMPLES = 20_000
# Draft positions of the per-position acceptance counter: k is 1-16 in practice (tree drafts
# reach a few dozen); a larger position is junk and would cost one slot per position.
MAX_SPEC_POSITIONS = 256
# A counter or gauge value no engine reaches (tokens, seconds, requests): 1e15 tokens is
# ten thousand GPU-years of decoding.
MAX_SAMPLE_VALUE = 1e15


class TooManySamples(ValueError):
    pass


def relevant_lines(text: str, limit: int = MAX_RELEVANT_SAMPLES) -> str:
    """Only the samples we use: a vLLM exposition has a thousand histogram lines, and parsing
    them every second would hold the GIL while the probe timestamps chunks. More than `limit`
    of them raises TooManySamples."""
    out = []
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        end = len(line)
        for sep in ("{", " "):
            i = line.find(sep)
            if 0 <= i < end:
                end = i
        if line[:end] in WANTED:
            out.append(line)
            if len(out) > limit:
                raise TooManySamples(f"more than {limit} samples of the engine's metric names "
                                     "(an engine exposes ~30)")
    return "\n".join(out) + "\n"


def _checked(name: str, value: float) -> float:
    """A sample value we use: finite, not negative, below MAX_SAMPLE_VALUE."""
    if not (0.0 <= value <= MAX_SAMPLE_VALUE):  # NaN fails both comparisons
        raise ValueError(f"{name} = {value!r} is not a count or time (finite, from 0 to "
                         f"{MAX_SAMPLE_VALUE:g})")
    return value


@dataclass(frozen=True)
class Scrape:
    """One GET /metrics: the relevant samples, summed over label sets."""

    t_s: float  # perf_counter of this process (the probe's clock)
    t_wall_s: float  # epoch seconds
    prefix: str | None  # "vllm" | "sglang" | "llamacpp" | None (nothing known answered)
    counters: dict[str, float] = field(default_factory=dict)
    gauges: dict[str, float] = field(default_factory=dict)
    per_pos: tuple[float, ...] | None = None
    process_start_s: float | None = None
    created_s: float | None = None  # newest `_created` of our counters (vLLM V1): moves on restart
    mark: str | None = None  # "trial_start:0" ... when scraped at a trial boundary
    error: str | None = None  # the scrape failed: why
    t_done_s: float | None = None  # perf_counter when the answer was in: the counters were read
    # by the engine somewhere in [t_s, t_done_s]

    @property
    def t_mid_s(self) -> float:
        """Best estimate of when the engine read its counters (perf_counter)."""
        return (self.t_s + self.t_done_s) / 2.0 if self.t_done_s is not None else self.t_s

    @property
    def latency_s(self) -> float:
        return (self.t_done_s - self.t_s) if self.t_done_s is not None else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"t_s": self.t_s, "t_done_s": self.t_done_s, "t_wall_s": self.t_wall_s,
                "prefix": self.prefix,
                "counters": self.counters, "gauges": self.gauges,
                "per_pos": list(self.per_pos) if self.per_pos is not None else None,
                "process_start_s": self.process_start_s, "created_s": self.created_s,
                "mark": self.mark, "error": self.error}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Scrape:
        pp = d.get("per_pos")
        return cls(t_s=d["t_s"], t_wall_s=d["t_wall_s"], prefix=d.get("prefix"),
                   counters=dict(d.get("counters") or {}), gauges=dict(d.get("gauges") or {}),
                   per_pos=tuple(pp) if pp is not None else None,
                   process_start_s=d.get("process_start_s"), created_s=d.get("created_s"),
                   mark=d.get("mark"),
                   error=d.get("error"), t_done_s=d.get("t_done_s"))


def parse_metrics(text: str, t_s: float, t_wall_s: float, mark: str | None = None,
                  t_done_s: float | None = None) -> Scrape:
    """The relevant samples of one exposition text. Malformed text gives a Scrape with error."""
    return dataclasses.replace(_parse_metrics(text, t_s, t_wall_s, mark), t_done_s=t_done_s)


def _parse_metrics(text: str, t_s: float, t_wall_s: float, mark: str | None) -> Scrape:
    sums: dict[str, float] = {}
    created: dict[str, float] = {}
    per_pos_raw: dict[str, dict[int, float]] = {}
    try:
        for fam in text_string_to_metric_families(relevant_lines(text)):
            for s in fam.samples:
                value = _checked(s.name, float(s.value))
                if s.name.endswith("_created"):
                    base = s.name[: -len("_created")] + "_total"
                    created[base] = max(created.get(base, 0.0), value)
                    continue
                if s.name in PER_POS_NAMES.values() and "position" in s.labels:
                    try:
                        pos = int(s.labels["position"])
                    except ValueError:
                        continue
                    if not 0 <= pos < MAX_SPEC_POSITIONS:
                        raise ValueError(f"{s.name} at position {s.labels['position'][:20]}, "
                                         f"past the {MAX_SPEC_POSITIONS} draft positions "
                                         "any drafter has")
                    slot = per_pos_raw.setdefault(s.name, {})
                    slot[pos] = slot.get(pos, 0.0) + value
                    continue
                sums[s.name] = sums.get(s.name, 0.0) + value
    except TooManySamples as exc:
        return Scrape(t_s, t_wall_s, None, mark=mark, error=f"/metrics refused: {exc}")
    except (ValueError, TypeError, IndexError) as exc:
        return Scrape(t_s, t_wall_s, None, mark=mark, error=f"unparsable /metrics: {exc}")
    prefix = _prefix(sums)
    if prefix is None:
        return Scrape(t_s, t_wall_s, None, mark=mark, process_start_s=sums.get(PROCESS_START))
    counters = {k: sums[n] for k, n in COUNTER_NAMES[prefix].items() if n in sums}
    gauges = {k: sums[n] for k, n in GAUGE_NAMES[prefix].items() if n in sums}
    pp = per_pos_raw.get(PER_POS_NAMES.get(prefix, ""))
    per_pos = tuple(pp.get(i, 0.0) for i in range(max(pp) + 1)) if pp else None
    ours = [created[n] for n in COUNTER_NAMES[prefix].values() if n in created]
    return Scrape(t_s, t_wall_s, prefix, counters, gauges, per_pos,
                  process_start_s=sums.get(PROCESS_START),
                  created_s=max(ours) if ours else None, mark=mark)


def _prefix(sums: dict[str, float]) -> str | None:
    """The engine whose names answered most (a gateway could expose several)."""
    best, hits = None, 0
    for prefix in COUNTER_NAMES:
        names = set(COUNTER_NAMES[prefix].values()) | set(GAUGE_NAMES[prefix].values())
        n = sum(1 for name in names if name in sums)
        if n > hits:
            best, hits = prefix, n
    return best


def is_reset(a: Scrape, b: Scrape) -> bool:
    """Did the engine restart between two scrapes (a counter went down, start time changed)?"""
    for x, y in ((a.process_start_s, b.process_start_s), (a.created_s, b.created_s)):
        if x is not None and y is not None and abs(y - x) > 1e-3:
            return True
    if any(k in a.counters and b.counters[k] < a.counters[k] for k in b.counters):
        return True
    if a.per_pos and b.per_pos:
        if len(b.per_pos) < len(a.per_pos):
            return True
        return any(y < x for x, y in zip(a.per_pos, b.per_pos, strict=False))
    return False


def window_between(a: Scrape, b: Scrape, engine: str, interior: Sequence[Scrape] = (),
                   flags: tuple[str, ...] = ()) -> EngineWindow:
    """The engine window from scrape a to scrape b (epoch times). `interior` are the scrapes
    strictly between them: their gauges give the mean running count of a long window, and a
    restart seen between any two of them flags the whole window "reset"."""
    gauges = [s.gauges for s in interior if not s.error] or [a.gauges, b.gauges]
    running = _mean([g.get("running") for g in gauges])
    waiting = _mean([g.get("waiting") for g in gauges])
    printed: dict[str, float] = {}
    for key, out in (("gen_throughput", "generation_throughput"), ("accept_length", "mal_reported")):
        v = _mean([g.get(key) for g in gauges if g.get(key)])  # 0 = no decode in that interval
        if v is not None:
            printed[out] = v
    if a.error or b.error:
        return EngineWindow("prometheus", engine, a.t_wall_s, b.t_wall_s, running=running,
                            waiting=waiting, printed=printed, flags=(*flags, "gap"))
    chain = [a, *(s for s in interior if not s.error and s.prefix), b]
    if any(is_reset(x, y) for x, y in zip(chain, chain[1:], strict=False)):
        return EngineWindow("prometheus", engine, a.t_wall_s, b.t_wall_s, running=running,
                            waiting=waiting, printed=printed, flags=(*flags, "reset"))
    d = {k: b.counters[k] - a.counters[k] for k in b.counters if k in a.counters}
    for key in ("batch_steps", "decode_s"):
        if key in d:
            printed[key] = d[key]
    per_pos = None
    if b.per_pos:
        base = a.per_pos or ()
        per_pos = tuple(int(round(y - (base[i] if i < len(base) else 0.0)))
                        for i, y in enumerate(b.per_pos))
    return EngineWindow(
        "prometheus", engine, a.t_wall_s, b.t_wall_s,
        generation_tokens=_int(d.get("generation_tokens")),
        prompt_tokens=_int(d.get("prompt_tokens")),
        drafts=_int(d.get("drafts")),
        draft_tokens=_int(d.get("draft_tokens")),
        accepted_tokens=_int(d.get("accepted_tokens")),
        accepted_per_pos=per_pos,
        running=running, waiting=waiting, printed=printed, flags=flags,
    )


def interval_windows(scrapes: Sequence[Scrape], engine: str) -> list[EngineWindow]:
    """One window per pair of consecutive good scrapes (engines that update counters
    continuously). A failed scrape loses nothing: the counters of the scrapes on each side of
    it still bracket its tokens, so they make one longer window flagged "joined" (the failed
    scrapes are its interior). Only failed scrapes at the ends, with no good one beyond, give
    "gap" windows without counts."""
    ok = [s for s in scrapes if s.prefix is not None or s.error]
    good = [i for i, s in enumerate(ok) if not s.error]
    out: list[EngineWindow] = []
    if not good:
        return [window_between(a, b, engine) for a, b in zip(ok, ok[1:], strict=False)
                if b.t_s > a.t_s]
    # failed scrapes before the first good one and after the last: nothing brackets them
    for a, b in zip(ok[:good[0] + 1], ok[1:good[0] + 1], strict=False):
        if b.t_s > a.t_s:
            out.append(window_between(a, b, engine))
    for i, j in zip(good, good[1:], strict=False):
        a, b = ok[i], ok[j]
        if b.t_s > a.t_s:
            out.append(window_between(a, b, engine, ok[i + 1:j],
                                      flags=("joined",) if j > i + 1 else ()))
    for a, b in zip(ok[good[-1]:], ok[good[-1] + 1:], strict=False):
        if b.t_s > a.t_s:
            out.append(window_between(a, b, engine))
    return out


def trial_windows(scrapes: Sequence[Scrape], engine: str) -> list[EngineWindow]:
    """One window per trial, from its trial_start scrape to its trial_end scrape, flagged
    "trial" (engines whose counters move when a request finishes)."""
    starts = {s.mark.split(":", 1)[1]: i for i, s in enumerate(scrapes)
              if s.mark and s.mark.startswith("trial_start:")}
    out = []
    for j, s in enumerate(scrapes):
        if not (s.mark and s.mark.startswith("trial_end:")):
            continue
        i = starts.get(s.mark.split(":", 1)[1])
        if i is None or j <= i:
            continue
        out.append(window_between(scrapes[i], s, engine, scrapes[i + 1:j], flags=("trial",)))
    return out


def windows_from_scrapes(scrapes: Sequence[Scrape], engine: str) -> list[EngineWindow]:
    """The windows to store: whole-trial windows where counters move at request finish,
    interval windows elsewhere."""
    scrapes = sorted(scrapes, key=lambda s: s.t_s)
    prefix = next((s.prefix for s in scrapes if s.prefix), None)
    if prefix in FINISH_UPDATED:
        return trial_windows(scrapes, engine)
    return interval_windows(scrapes, engine)


def count_resets(scrapes: Iterable[Scrape]) -> int:
    ss = [s for s in sorted(scrapes, key=lambda s: s.t_s) if not s.error and s.prefix]
    return sum(1 for a, b in zip(ss, ss[1:], strict=False) if is_reset(a, b))


def _mean(xs: Iterable[float | None]) -> float | None:
    v = [x for x in xs if x is not None]
    return sum(v) / len(v) if v else None


def _int(x: float | None) -> int | None:
    return None if x is None else int(round(x))
