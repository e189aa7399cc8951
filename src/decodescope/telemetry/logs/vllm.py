"""vLLM log lines: periodic stats (V0, early V1, V1) and speculative-decoding lines.

Formats: docs/logs.md and shared reference engine-formats.md §1.1-1.2. Each line is read by
field name; the text before the message (any prefix: `(APIServer pid=N)`, `INFO MM-DD ...`,
`[loggers.py:N]`, V0 `metrics.py:N]`, docker stamps) only gives the time, pid and engine id.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from decodescope.telemetry.logs.clock import Clock
from decodescope.telemetry.logs.fields import Fields, split_fields
from decodescope.telemetry.logs.parse_counts import ParseCounts, Unparsed

ENGINE = "vllm"
STATS_KEY = "Avg prompt throughput: "
SPEC_KEYS = ("SpecDecoding metrics: ", "Speculative metrics: ")
CONFIG_KEY = "num_spec"
LAUNCH_KEY = "non-default args"  # vLLM ≥ 0.8 logs its non-default launch arguments once
# " metrics: " finds both spec spellings in one pass; the launch-config keywords are searched
# only until k is known from the spec lines themselves (LEAN_KEYWORDS).
LEAN_KEYWORDS = (STATS_KEY.encode(), b" metrics: ")
KEYWORDS = (*LEAN_KEYWORDS, CONFIG_KEY.encode(), LAUNCH_KEY.encode())

_INT = re.compile(r"\d+")
_ENGINE_TAG = re.compile(r"(?:Engine (\d+)|(\d+) Engines Aggregated):\s*$")
# Fast paths: the whole message in the most common field order. A line that deviates in any
# way (extra, missing or reordered fields) goes to the field-by-name parser, which gives the
# same record (tests/test_logs_vllm.py checks both paths agree).
_N = r"(\d+(?:\.\d+)?)"  # a printed number
_FAST_STATS = re.compile(
    rf"Avg prompt throughput: {_N} tokens/s, Avg generation throughput: {_N} tokens/s, "
    rf"Running: (\d+) reqs, Waiting: (\d+) reqs, GPU KV cache usage: {_N}%, "
    rf"Prefix cache hit rate: {_N}%\s*$")
_FAST_SPEC = re.compile(
    rf"Mean acceptance length: {_N}, Accepted throughput: {_N} tokens/s, "
    rf"Drafted throughput: {_N} tokens/s, Accepted: (\d+) tokens, Drafted: (\d+) tokens, "
    rf"Per-position acceptance rate: (\d+(?:\.\d+)?(?:, \d+(?:\.\d+)?)*), "
    rf"Avg Draft acceptance rate: {_N}%\s*$")
_CONFIG_K = re.compile(r"num_spec(?:ulative)?_tokens['\"]?\s*[=:]\s*(\d+)")
_CONFIG_METHOD = re.compile(r"\bmethod['\"]?\s*[=:]\s*['\"]?([A-Za-z][\w\-]*)")

# Stats fields we know -> name in EngineWindow.printed.
STATS_FIELDS = {
    "Avg prompt throughput": "prompt_throughput",
    "Avg generation throughput": "generation_throughput",
    "Running": "running",
    "Waiting": "waiting",
    "Pending": "waiting",
    "Swapped": "swapped",
    "Deferred": "deferred",
    "Preemptions": "preemptions",
    "GPU KV cache usage": "kv_cache_usage_pct",
    "KV cache usage": "kv_cache_usage_pct",
    "CPU KV cache usage": "cpu_kv_cache_usage_pct",
    "Prefix cache hit rate": "prefix_cache_hit_rate_pct",
    "Corrupted": "corrupted",
    "External prefix cache hit rate": "external_prefix_cache_hit_rate_pct",
    "MM cache hit rate": "mm_cache_hit_rate_pct",
}
SPEC_FIELDS = {
    "Draft acceptance rate": "draft_acceptance_rate",
    "Avg Draft acceptance rate": "avg_draft_acceptance_rate_pct",
    "Mean acceptance length": "mean_acceptance_length",
    "Accepted throughput": "accepted_throughput",
    "Drafted throughput": "drafted_throughput",
    "Accepted": "accepted",
    "Drafted": "drafted",
    "Per-position acceptance rate": "per_position",
    "System efficiency": "system_efficiency",
    "Number of speculative tokens": "k",
    "Number of accepted tokens": "accepted",
    "Number of draft tokens": "drafted",
    "Number of draft tokens tokens": "drafted",
    "Number of emitted tokens": "emitted",
    "Number of emitted tokens tokens": "emitted",
}


class VStats(NamedTuple):
    t_s: float | None
    pid: int | None
    engine_id: str | None  # "Engine 000", "2 Engines Aggregated", None (V0, early V1)
    variant: str  # "v0" | "v1-early" | "v1"
    gen_tput: float
    prompt_tput: float | None
    running: float | None
    waiting: float | None
    printed: dict[str, float]


class VSpec(NamedTuple):
    t_s: float | None
    pid: int | None
    variant: str  # "v0" | "v0-early" | "v1-a" | "v1-b" | "v1-c" | "v1-c'" | "v1-d"
    accepted: int  # V1: accepted draft tokens; V0: accepted tokens (any position)
    drafted: int  # draft tokens
    per_pos: tuple[float, ...] | None  # V1-c/V1-d rates, k values
    mal_printed: float | None
    k: int | None  # V0 "Number of speculative tokens"
    emitted: int | None  # V0 emitted tokens (accepted prefix + bonus)
    printed: dict[str, float]


class VConfig(NamedTuple):
    """Speculative settings from a launch line: k and method (`ngram`, `suffix`, `mtp`,
    `eagle3` ...); k None with `spec` False: a launch line without any speculative config."""

    k: int | None
    method: str | None = None
    spec: bool = True


Record = VStats | VSpec | VConfig


def parse(text: str, clock: Clock, counts: ParseCounts) -> Record | Unparsed | None:
    """Read one vLLM line (ANSI already stripped). None: keyword seen but not a stats line."""
    i = text.find(STATS_KEY)
    if i >= 0:
        return _stats(text, i, clock, counts)
    for key in SPEC_KEYS:
        i = text.find(key)
        if i >= 0:
            return _spec(text, i, len(key), clock, counts)
    if CONFIG_KEY in text:
        m = _CONFIG_K.search(text)
        if m is None:
            return None
        meth = _CONFIG_METHOD.search(text, max(0, text.find("speculative")))
        return VConfig(int(m.group(1)), meth.group(1).lower() if meth else None)
    if LAUNCH_KEY in text:
        return None if "speculative" in text else VConfig(None, None, spec=False)
    return None


# The field each format ends with, and how its value ends (a unit or a separator a cut number
# cannot end with): a line without a newline is complete only when it ends so.
_LAST_STATS = {"Prefix cache hit rate": ("%",), "CPU KV cache usage": ("%.",),
               "External prefix cache hit rate": ("%",), "MM cache hit rate": ("%",),
               "Corrupted": (" reqs",)}
_LAST_SPEC = {"Avg Draft acceptance rate": ("%",), "Number of emitted tokens": (".",),
              "Number of emitted tokens tokens": (".",)}


def complete(text: str, rec: Record) -> bool:
    """True when a line that may have been cut (no newline after it) is whole: it ends with
    the last field of its format, unit included. V1-a ends with its ", " separator. V1-b and
    V1-c end in a bare number or list (a cut there cannot be told): never complete."""
    if isinstance(rec, VConfig):
        return False
    msg = text.rstrip(" \r\n")
    if isinstance(rec, VSpec) and rec.variant == "v1-a":
        return msg.endswith(",") and msg.rsplit(", ", 1)[-1].startswith("Number of draft tokens")
    name, _, value = msg.rsplit(", ", 1)[-1].partition(": ")
    ends = (_LAST_STATS if isinstance(rec, VStats) else _LAST_SPEC).get(name.strip())
    return ends is not None and value.endswith(ends)


def _head(text: str, i: int, clock: Clock) -> tuple[float | None, int | None, str]:
    head = text[:i]
    pid = None
    j = head.find("pid=")
    if j >= 0:
        m = _INT.match(head, j + 4)
        pid = int(m.group()) if m else None
    return clock.stamp(head), pid, head


def _engine_id(head: str) -> str | None:
    if not head.endswith(": ") and not head.endswith(":"):
        return None
    j = head.rfind("Engine ")
    if j >= 0 and head[j + 7:].rstrip(": ").isdigit():
        return f"Engine {head[j + 7:].rstrip(': ')}"
    m = _ENGINE_TAG.search(head)
    if m is None:
        return None
    return f"Engine {m.group(1)}" if m.group(1) else f"{m.group(2)} Engines Aggregated"


def _stats(text: str, i: int, clock: Clock, counts: ParseCounts) -> VStats | Unparsed:
    t_s, pid, head = _head(text, i, clock)
    engine_id = _engine_id(head)
    m = _FAST_STATS.match(text, i)
    if m is not None:
        pt, gt, run, wait, kv, pc = m.groups()
        g, running, waiting = float(gt), float(run), float(wait)
        printed = {"prompt_throughput": float(pt), "generation_throughput": g,
                   "running": running, "waiting": waiting, "kv_cache_usage_pct": float(kv),
                   "prefix_cache_hit_rate_pct": float(pc)}
        return VStats(t_s, pid, engine_id, "v1" if engine_id else "v1-early", g,
                      printed["prompt_throughput"], running, waiting, printed)
    f = split_fields(text[i:])
    gen = f.num("Avg generation throughput")
    if gen is None or gen != gen:
        return Unparsed("vllm.stats")
    variant = "v0" if ("Pending" in f or "Swapped" in f) else ("v1" if engine_id else "v1-early")
    printed = _printed(f, STATS_FIELDS, counts)
    return VStats(t_s, pid, engine_id, variant, gen, printed.get("prompt_throughput"),
                  printed.get("running"), printed.get("waiting"), printed)


def _spec(text: str, i: int, n: int, clock: Clock, counts: ParseCounts) -> VSpec | Unparsed:
    t_s, pid, _ = _head(text, i, clock)
    m = _FAST_SPEC.match(text, i + n)
    if m is not None:
        mal, at, dt, acc, dr, pp, avg = m.groups()
        rates = tuple(map(float, pp.split(", ")))
        printed = {"mean_acceptance_length": float(mal), "accepted_throughput": float(at),
                   "drafted_throughput": float(dt), "avg_draft_acceptance_rate_pct": float(avg)}
        return VSpec(t_s, pid, "v1-d", int(acc), int(dr), rates, printed["mean_acceptance_length"],
                     None, None, printed)
    f = split_fields(text[i + n:])
    accepted = f.int_("Accepted")
    drafted = f.int_("Drafted")
    if accepted is None:
        accepted = f.int_("Number of accepted tokens")
        drafted = f.int_("Number of draft tokens")
        if drafted is None:
            drafted = f.int_("Number of draft tokens tokens")
    if accepted is None or drafted is None:
        return Unparsed("vllm.spec")
    per_pos = f.nums("Per-position acceptance rate")
    k = f.int_("Number of speculative tokens")
    emitted = f.int_("Number of emitted tokens")
    if emitted is None:
        emitted = f.int_("Number of emitted tokens tokens")
    if "System efficiency" in f:
        if k is None or emitted is None or k <= 0:
            return Unparsed("vllm.spec")
        variant = "v0-early" if "Number of draft tokens tokens" in f else "v0"
    elif "Accepted" not in f:
        variant = "v1-a"
    elif per_pos is None:
        variant = "v1-b"
    elif "Avg Draft acceptance rate" in f:
        variant = "v1-d"
    elif "Accepted throughput" in f:
        variant = "v1-c'"
    else:
        variant = "v1-c"
    printed = _printed(f, SPEC_FIELDS, counts, skip=("per_position", "accepted", "drafted",
                                                      "emitted", "k"))
    rate = f.get("Draft acceptance rate")
    if rate is not None and "%" in rate:
        printed["draft_acceptance_rate_pct"] = printed.pop("draft_acceptance_rate")
    return VSpec(t_s, pid, variant, accepted, drafted, per_pos, printed.get("mean_acceptance_length"),
                 k, emitted, printed)


def _printed(f: Fields, known: dict[str, str], counts: ParseCounts,
             skip: tuple[str, ...] = ()) -> dict[str, float]:
    out: dict[str, float] = {}
    for name in f:
        key = known.get(name)
        if key is None:
            counts.unknown_fields[name] += 1
        elif key not in skip:
            v = f.num(name)
            if v is not None:
                out[key] = v
    return out
