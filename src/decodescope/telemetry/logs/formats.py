"""The log line formats: one row per (engine, line kind), read by one parser.

A row holds what marks the line (`keyword`), how its numbers are found — a field map for
`key: value, key: value` messages (printed name -> record field) or regexes with named groups
— the fields a line must have, how a complete line ends (a line without a newline may have
been cut: see `complete`), the record it makes, and sample lines (real excerpts from
tests/data, or synthetic and labelled so) with the record fields each must give
(tests/test_log_formats_table.py parses every sample).

`fields(row, message)` is the one parser of field-map rows: the printed name -> raw value
map of the message. A row's `common` (the field order the engine prints most) only makes it
sooner: one anchored regex built from the same row finds the same raw values of a line
printed in that order; any other line is split by name (fields.split_fields).

vLLM rows also say how their record is made: the record types (VStats, VSpec, VConfig) and
their `make` are defined next to their rows, and a row without `make` gives a VLine (its
fields as numbers, `make_line`); vllm.py reads every line by row, with no code per kind.
SGLang and llama.cpp records are made by their engine modules (sglang.py, llamacpp.py); the
assemblers build windows from the records.

To add a vLLM line kind: a row here (with a sample; a VLine needs nothing more) and its case
in vllm_windows.VllmAssembler, and a fixture line in a test (docs/logs.md). For SGLang
and llama.cpp: a row here, its record and case in the engine's parse and assembler.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from decodescope.telemetry.logs.clock import Clock
from decodescope.telemetry.logs.fields import Fields, fast_number, number, split_fields
from decodescope.telemetry.logs.parse_counts import ParseCounts, Unparsed

NUM = r"\d+(?:\.\d+)?"  # a printed number
NUMS = rf"{NUM}(?:, {NUM})*"  # a printed list of numbers


@dataclass(frozen=True)
class Sample:
    line: str
    source: str  # "tests/data/real-logs/X.log" or "synthetic"
    expect: Mapping[str, Any]  # record field -> value the line must give


@dataclass(frozen=True)
class Row:
    engine: str
    kind: str
    keyword: str  # the text that marks the line (searched in every block)
    record: str  # the record type the engine module makes
    # vLLM: make(row, text, i, j, clock, counts) -> record | Unparsed | None, the keyword at
    # text[i:j]; None: make_line (a VLine). whole(row, message, record): a line that may have
    # been cut is whole; None: ends_whole when the row has `ends`, else never.
    make: Callable[[Row, str, int, int, Clock, ParseCounts], Any] | None = None
    whole: Callable[[Row, str, Any], bool] | None = None
    # The text searched for in the blocks (vllm.KEYWORDS), when not the keyword: each text is
    # one more pass over every block (~0.3 ms per MiB), so rows share one where they can.
    search: str | None = None
    lean: bool = True  # False: searched only until the assembler knows the spec config
    # `key: value` lines: printed name -> record field (EngineWindow.printed name)
    field_map: Mapping[str, str] = field(default_factory=dict)
    # regex lines: name -> pattern (named groups), searched in the line
    patterns: Mapping[str, re.Pattern[str]] = field(default_factory=dict)
    required: tuple[tuple[str, ...], ...] = ()  # each: one of these names must be there
    # complete line: last field (or kind) -> how its value ends (a unit, a separator)
    ends: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # the most common print order: (name, number pattern, unit after it); builds `fast`
    common: tuple[tuple[str, str, str], ...] = ()
    samples: tuple[Sample, ...] = ()
    also: tuple[str, ...] = ()  # further keywords that mark the same kind of line
    optional: tuple[str, ...] = ()  # fields of `common` a line may leave out (not the first)
    end: str = r"\s*$"  # what may follow the last field of `common`

    @property
    def keywords(self) -> tuple[str, ...]:
        return (self.keyword, *self.also)

    fast: re.Pattern[str] | None = field(init=False, default=None, compare=False)
    _names: tuple[str, ...] = field(init=False, default=(), compare=False)
    # (name, pattern, the name its one group's value goes under, or None: use groupdict)
    _pats: tuple[tuple[str, re.Pattern[str], str | None], ...] = field(
        init=False, default=(), compare=False)
    # `common`, mapped once: (record field, True where its pattern is a plain number)
    _keys: tuple[tuple[str, bool], ...] | None = field(init=False, default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_pats", tuple(
            (name, rx, (name if next(iter(rx.groupindex)) == "v" else next(iter(rx.groupindex)))
             if rx.groups == 1 and len(rx.groupindex) == 1 else None)
            for name, rx in self.patterns.items()))
        if self.common:  # one anchored regex of the common order, from the row itself
            parts = []
            for i, (n, v, u) in enumerate(self.common):
                part = f"{', ' if i else ''}{re.escape(n)}: ({v}){re.escape(u)}"
                parts.append(f"(?:{part})?" if n in self.optional else part)
            object.__setattr__(self, "fast", re.compile("".join(parts) + self.end))
            object.__setattr__(self, "_names", tuple(n for n, _, _ in self.common))
            if all(n in self.field_map for n, _, _ in self.common):
                object.__setattr__(self, "_keys", tuple(
                    (self.field_map[n], v in (NUM, r"\d+")) for n, v, _ in self.common))


def fields(row: Row, message: str) -> Fields:
    """Printed name -> raw value of a field-map row's message (the text after its keyword).
    A line in the row's common order gives its numbers without their units (the same
    numbers `Fields.num` reads from the whole value)."""
    fast = row.fast
    if fast is not None:
        m = fast.match(message)
        if m is not None:
            if row.optional:  # a field left out: no value
                return Fields((n, v) for n, v in zip(row._names, m.groups(), strict=True)
                              if v is not None)
            return Fields(zip(row._names, m.groups(), strict=True))
    return split_fields(message)


def numbers(row: Row, message: str) -> dict[str, float] | None:
    """Record field -> number of a field-map row's message printed in the row's common order:
    what `fields` and fields.fast_number give for it, sooner (the names mapped once, a plain
    number read with float); None for a message in another order (read it with `fields`)."""
    keys = row._keys
    if keys is None or row.fast is None:
        return None
    m = row.fast.match(message)
    if m is None:
        return None
    out: dict[str, float] = {}
    for (key, plain), raw in zip(keys, m.groups(), strict=True):
        if raw is None:  # an optional field left out
            continue
        if plain:
            out[key] = float(raw)
        else:
            v = fast_number(raw)
            if v is not None:
                out[key] = v
    return out


def groups(row: Row, text: str) -> dict[str, str] | None:
    """The named groups of a regex row's patterns found in `text` (a pattern whose one group
    is `v` gives its value under the pattern's name); None when a required pattern is not
    found. The one parser of regex rows."""
    out: dict[str, str] = {}
    found: list[str] = []
    for name, rx, one in row._pats:
        m = rx.search(text)
        if m is None:
            continue
        found.append(name)
        if one is not None:  # a pattern with one named group: no groupdict
            v = m.group(1)
            if v is not None:
                out[one] = v
            continue
        for k, v in m.groupdict().items():
            if v is not None:
                out[name if k == "v" else k] = v
    for names in row.required:
        for n in names:
            if n in found:
                break
        else:
            return None
    return out


def has_required(row: Row, f: Mapping[str, Any]) -> bool:
    return all(any(n in f for n in names) for names in row.required)


def ends_whole(row: Row, message: str) -> bool:
    """True when a field-map line ends with the last field of its format, unit included."""
    msg = message.rstrip(" \r\n")
    name, _, value = msg.rsplit(", ", 1)[-1].partition(": ")
    ends = row.ends.get(name.strip())
    return ends is not None and value.endswith(ends)


# -- vLLM ---------------------------------------------------------------------------------
# Each vLLM row names its record type, defined next to it, and says how it is made (`make`);
# vllm.py only dispatches: the first row whose keyword is in the line makes its record. A
# row without `make` gives a VLine (make_line): its fields as numbers, no code of its own.
# Add a kind: a row here (with a sample) and its case in vllm_windows.VllmAssembler._line
# (a VLine) or .feed (a record type of its own).
_INT = re.compile(r"\d+")
_ENGINE_TAG = re.compile(r"(?:Engine (\d+)|(\d+) Engines Aggregated):\s*$")


def vllm_head(text: str, i: int, clock: Clock) -> tuple[float | None, int | None, str]:
    """(time, pid, prefix) of a vLLM line from the text before its keyword at `i`: any
    prefix (`(APIServer pid=N)`, `INFO MM-DD ...`, `[loggers.py:N]`, docker stamps)."""
    head = text[:i]
    pid = None
    j = head.find("pid=")
    if j >= 0:
        m = _INT.match(head, j + 4)
        pid = int(m.group()) if m else None
    return clock.stamp(head), pid, head


def vllm_engine_id(head: str) -> str | None:
    """`Engine 000` / `2 Engines Aggregated` right before the message, else None."""
    if not head.endswith(": ") and not head.endswith(":"):
        return None
    j = head.rfind("Engine ")
    if j >= 0 and head[j + 7:].rstrip(": ").isdigit():
        return f"Engine {head[j + 7:].rstrip(': ')}"
    m = _ENGINE_TAG.search(head)
    if m is None:
        return None
    return f"Engine {m.group(1)}" if m.group(1) else f"{m.group(2)} Engines Aggregated"


def printed_numbers(f: Fields, known: Mapping[str, str], counts: ParseCounts,
                    skip: tuple[str, ...] = ()) -> dict[str, float]:
    """Record field -> number of the printed names a row knows; unknown names are counted."""
    out: dict[str, float] = {}
    for name, raw in f.items():
        key = known.get(name)
        if key is None:
            counts.unknown_fields[name] += 1
        elif key not in skip:
            try:  # fields.fast_number, inline: a plain number (most fields) at once
                out[key] = float(raw)
            except ValueError:
                v = number(raw)
                if v is not None:
                    out[key] = v
    return out


class VLine(NamedTuple):
    """A line of a vLLM row without a record type of its own: its fields as numbers."""

    t_s: float | None
    pid: int | None
    engine_id: str | None
    kind: str  # the row's kind: the assembler's case
    printed: dict[str, float]  # field-map row: record field -> number; regex row: group -> number


def make_line(row: Row, text: str, i: int, j: int, clock: Clock,
              counts: ParseCounts) -> VLine | Unparsed:
    """The VLine of any row: a field-map row's fields after its keyword (`text[j:]`), or a
    regex row's named groups; Unparsed(`vllm.<kind>`) when a required one is missing."""
    t_s, pid, head = vllm_head(text, i, clock)
    if row.field_map:
        f = fields(row, text[j:])
        if not has_required(row, f):
            return Unparsed(f"vllm.{row.kind}")
        printed = printed_numbers(f, row.field_map, counts)
    else:
        g = groups(row, text)
        if g is None:
            return Unparsed(f"vllm.{row.kind}")
        printed = {k: v for k, v in ((k, number(raw)) for k, raw in g.items()) if v is not None}
    return VLine(t_s, pid, vllm_engine_id(head), row.kind, printed)


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


def _make_stats(row: Row, text: str, i: int, j: int, clock: Clock,
                counts: ParseCounts) -> VStats | Unparsed:
    t_s, pid, head = vllm_head(text, i, clock)
    engine_id = vllm_engine_id(head)
    common = numbers(row, text[i:])  # the common order (V1: no Pending, no Swapped)
    if common is not None:
        return VStats(t_s, pid, engine_id, "v1" if engine_id else "v1-early",
                      common["generation_throughput"], common.get("prompt_throughput"),
                      common.get("running"), common.get("waiting"), common)
    f = fields(row, text[i:])  # the keyword is the first field's name
    gen = f.num("Avg generation throughput")
    if gen is None or gen != gen:
        return Unparsed("vllm.stats")
    variant = "v0" if ("Pending" in f or "Swapped" in f) else ("v1" if engine_id else "v1-early")
    printed = printed_numbers(f, row.field_map, counts)
    return VStats(t_s, pid, engine_id, variant, gen, printed.get("prompt_throughput"),
                  printed.get("running"), printed.get("waiting"), printed)


VLLM_STATS = Row(
    "vllm", "stats", "Avg prompt throughput: ", "VStats", make=_make_stats,
    field_map={
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
    },
    required=(("Avg generation throughput",),),
    ends={"Prefix cache hit rate": ("%",), "CPU KV cache usage": ("%.",),
          "External prefix cache hit rate": ("%",), "MM cache hit rate": ("%",),
          "Corrupted": (" reqs",)},
    common=(("Avg prompt throughput", NUM, " tokens/s"),
            ("Avg generation throughput", NUM, " tokens/s"),
            ("Running", r"\d+", " reqs"), ("Waiting", r"\d+", " reqs"),
            ("GPU KV cache usage", NUM, "%"), ("Prefix cache hit rate", NUM, "%")),
    samples=(
        Sample("(APIServer pid=5020) INFO 05-19 10:30:43 [loggers.py:271] Engine 000: Avg "
               "prompt throughput: 3279.0 tokens/s, Avg generation throughput: 1004.4 "
               "tokens/s, Running: 8 reqs, Waiting: 7 reqs, GPU KV cache usage: 82.5%, Prefix "
               "cache hit rate: 0.0%", "tests/data/real-logs/vllm_issue_43295.log",
               {"variant": "v1", "pid": 5020, "engine_id": "Engine 000", "gen_tput": 1004.4,
                "prompt_tput": 3279.0, "running": 8.0, "waiting": 7.0}),
        Sample("INFO 04-08 10:43:07 metrics.py:455] Avg prompt throughput: 33127.2 tokens/s, "
               "Avg generation throughput: 238.0 tokens/s, Running: 4 reqs, Swapped: 0 reqs, "
               "Pending: 0 reqs, GPU KV cache usage: 0.3%, CPU KV cache usage: 0.0%.",
               "tests/data/real-logs/vllm_issue_16258.log",
               {"variant": "v0", "gen_tput": 238.0, "running": 4.0, "waiting": 0.0}),
    ),
)
_SPEC_FIELDS = {
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
_SPEC_REQUIRED = (("Accepted", "Number of accepted tokens"),
                  ("Drafted", "Number of draft tokens", "Number of draft tokens tokens"))
# (V1-a lines end with `Number of draft tokens: N, `: vllm.complete tells those by variant)
_SPEC_ENDS = {"Avg Draft acceptance rate": ("%",), "Number of emitted tokens": (".",),
              "Number of emitted tokens tokens": (".",)}
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


def _make_spec(row: Row, text: str, i: int, j: int, clock: Clock,
               counts: ParseCounts) -> VSpec | Unparsed:
    t_s, pid, _ = vllm_head(text, i, clock)
    f = fields(row, text[j:])
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
    printed = printed_numbers(f, row.field_map, counts, skip=(
        "per_position", "accepted", "drafted", "emitted", "k"))
    rate = f.get("Draft acceptance rate")
    if rate is not None and "%" in rate:
        printed["draft_acceptance_rate_pct"] = printed.pop("draft_acceptance_rate")
    return VSpec(t_s, pid, variant, accepted, drafted, per_pos,
                 printed.get("mean_acceptance_length"), k, emitted, printed)


def _spec_whole(row: Row, msg: str, rec: Any) -> bool:
    """V1-a ends with its ", " separator after `Number of draft tokens`; V1-b and V1-c end in
    a bare number or list (a cut there cannot be told): never whole."""
    if rec.variant == "v1-a":
        return msg.endswith(",") and msg.rsplit(", ", 1)[-1].startswith("Number of draft tokens")
    return ends_whole(row, msg)


VLLM_SPEC = Row(
    "vllm", "spec", "SpecDecoding metrics: ", "VSpec", make=_make_spec, whole=_spec_whole,
    search=" metrics: ",
    field_map=_SPEC_FIELDS, required=_SPEC_REQUIRED, ends=_SPEC_ENDS,
    common=(("Mean acceptance length", NUM, ""), ("Accepted throughput", NUM, " tokens/s"),
            ("Drafted throughput", NUM, " tokens/s"), ("Accepted", r"\d+", " tokens"),
            ("Drafted", r"\d+", " tokens"), ("Per-position acceptance rate", NUMS, ""),
            ("Avg Draft acceptance rate", NUM, "%")),
    samples=(
        Sample("(APIServer pid=5020) INFO 05-19 10:30:33 [metrics.py:101] SpecDecoding "
               "metrics: Mean acceptance length: 2.53, Accepted throughput: 553.18 tokens/s, "
               "Drafted throughput: 721.24 tokens/s, Accepted: 5533 tokens, Drafted: 7214 "
               "tokens, Per-position acceptance rate: 0.832, 0.702, Avg Draft acceptance "
               "rate: 76.7%", "tests/data/real-logs/vllm_issue_43295.log",
               {"variant": "v1-d", "pid": 5020, "accepted": 5533, "drafted": 7214,
                "per_pos": (0.832, 0.702), "mal_printed": 2.53}),
    ),
)
VLLM_SPEC_V0 = Row(
    "vllm", "spec-v0", "Speculative metrics: ", "VSpec", make=_make_spec, whole=_spec_whole,
    search=" metrics: ",
    field_map=_SPEC_FIELDS, required=_SPEC_REQUIRED, ends=_SPEC_ENDS,
    samples=(
        Sample("INFO 10-16 19:05:47 metrics.py:367] Speculative metrics: Draft acceptance rate: "
               "0.642, System efficiency: 0.598, Number of speculative tokens: 3, Number of "
               "accepted tokens: 8547, Number of draft tokens: 13311, Number of emitted "
               "tokens: 10616.", "tests/data/real-logs/vllm_issue_9539.log",
               {"variant": "v0", "accepted": 8547, "drafted": 13311, "k": 3,
                "emitted": 10616}),
    ),
)
class VConfig(NamedTuple):
    """Speculative settings from a launch line: k and method (`ngram`, `suffix`, `mtp`,
    `eagle3` ...); k None with `spec` False: a launch line without any speculative config."""

    k: int | None
    method: str | None = None
    spec: bool = True


def _make_config(row: Row, text: str, i: int, j: int, clock: Clock,
                 counts: ParseCounts) -> VConfig | None:
    m = row.patterns["k"].search(text)
    if m is None:
        return None
    meth = row.patterns["method"].search(text, max(0, text.find("speculative")))
    return VConfig(int(m.group("k")), meth.group("method").lower() if meth else None)


def _make_launch(row: Row, text: str, i: int, j: int, clock: Clock,
                 counts: ParseCounts) -> VConfig | None:
    """vLLM >= 0.8 logs its non-default launch arguments once: no speculative config there
    (a `num_spec` one is the config row's) says speculative decoding is off."""
    return None if "speculative" in text else VConfig(None, None, spec=False)


VLLM_CONFIG = Row(
    "vllm", "config", "num_spec", "VConfig", make=_make_config, lean=False,
    patterns={"k": re.compile(r"num_spec(?:ulative)?_tokens['\"]?\s*[=:]\s*(?P<k>\d+)"),
              "method": re.compile(r"\bmethod['\"]?\s*[=:]\s*['\"]?(?P<method>[A-Za-z][\w\-]*)")},
    required=(("k",),),
    samples=(
        Sample("(APIServer pid=4242) INFO 09-15 09:58:00 [utils.py:253] non-default args: "
               "{'model': 'gemma', 'speculative_config': {'method': 'ngram', "
               "'num_speculative_tokens': 3, 'prompt_lookup_max': 4}}", "synthetic",
               {"k": 3, "method": "ngram", "spec": True}),
    ),
)
VLLM_LAUNCH = Row(
    "vllm", "launch", "non-default args", "VConfig", make=_make_launch, lean=False,
    samples=(
        Sample("(APIServer pid=4242) INFO 09-15 09:58:00 [utils.py:253] non-default args: "
               "{'model': 'gemma', 'max_num_seqs': 8}", "synthetic",
               {"k": None, "spec": False}),
    ),
)

# -- SGLang -------------------------------------------------------------------------------
SGLANG_DECODE = Row(
    "sglang", "decode", "Decode batch", "SDecode",
    field_map={
        "#running-req": "running",
        "#token": "tokens",
        "token usage": "token_usage",
        "accept len": "mal_reported",
        "accept rate": "accept_rate",
        "cuda graph": "cuda_graph",
        "cpu graph": "cpu_graph",
        "npu graph": "npu_graph",
        "gen throughput (token/s)": "generation_throughput",
        "#queue-req": "waiting",
        "largest-len": "largest_len",
        "#full token": "full_tokens",
        "full token usage": "full_token_usage",
        "#swa token": "swa_tokens",
        "swa token usage": "swa_token_usage",
        "mamba num": "mamba_num",
        "mamba usage": "mamba_usage",
        "pre-allocated usage": "preallocated_usage",
        "#prealloc-req": "prealloc_req",
        "#transfer-req": "transfer_req",
        "#retracted-req": "retracted_req",
    },
    required=(("gen throughput (token/s)",), ("#running-req",)),
    ends={"#queue-req": (",",)},  # only lines that print the separator after it can tell
    common=(("#running-req", r"\d+", ""), ("#token", r"\d+", ""), ("token usage", NUM, ""),
            ("accept len", NUM, ""), ("accept rate", NUM, ""), ("cuda graph", "True|False", ""),
            ("gen throughput (token/s)", NUM, ""), ("#queue-req", r"\d+", "")),
    optional=("accept len", "accept rate"), end=r",?\s*$",
    samples=(
        Sample("[2025-10-22 10:27:57 TP0] Decode batch. #running-req: 1, #token: 186, token "
               "usage: 0.00, accept len: 1.95, accept rate: 0.49, cuda graph: True, gen "
               "throughput (token/s): 178.86, #queue-req: 0, ",
               "tests/data/real-logs/sglang_issue_11948.log",
               {"tag": "TP0", "running": 1.0, "gen_tput": 178.86, "accept_len": 1.95,
                "waiting": 0.0}),
        Sample("[2026-04-08 14:05:21 TP0] Decode batch, #running-req: 5, #token: 20800, token "
               "usage: 0.29, cuda graph: True, gen throughput (token/s): 144.95, #queue-req: 0",
               "tests/data/real-logs/sglang_pr_22331.log",
               {"tag": "TP0", "running": 5.0, "gen_tput": 144.95, "accept_len": None}),
    ),
)
SGLANG_CONFIG = Row(
    "sglang", "config", "decode_log_interval", "SConfig",
    patterns={"steps": re.compile(r"decode_log_interval['\"]?\s*[=:]\s*(?P<steps>\d+)"),
              "spec": re.compile(r"speculative_algorithm['\"]?\s*[=:]\s*['\"]?(?P<spec>\w+)")},
    required=(("steps",),),
    samples=(
        Sample("[2025-10-22 10:27:40] server_args=ServerArgs(model_path='m', "
               "speculative_algorithm='EAGLE', decode_log_interval=20, dp_size=1)", "synthetic",
               {"steps": 20, "spec": True}),
    ),
)

# -- llama.cpp ----------------------------------------------------------------------------
LLAMACPP_TIMING = Row(
    "llamacpp", "timing", "eval time =", "LTime",
    patterns={"time": re.compile(rf"(?P<kind>prompt eval|eval|total) time =\s*(?P<ms>{NUM}) "
                                 r"ms /\s*(?P<tokens>\d+) (?:tokens|runs)")},
    required=(("time",),),
    ends={"prompt eval": ("tokens per second)",), "eval": ("tokens per second)",),
          "total": (" tokens",)},
    samples=(
        Sample("0.06.895.998 I slot print_timing: id  1 | task 0 |        eval time =    "
               "2296.72 ms /   256 tokens (    8.97 ms per token,   111.46 tokens per second)",
               "tests/data/real-logs/llamacpp_pr_24536.log",
               {"slot": (1, 0), "kind": "eval", "ms": 2296.72, "tokens": 256}),
        Sample("0.06.895.999 I slot print_timing: id  1 | task 0 |       total time =    "
               "2596.83 ms /   276 tokens", "tests/data/real-logs/llamacpp_pr_24536.log",
               {"kind": "total", "ms": 2596.83, "tokens": 276}),
    ),
    also=("total time =",),
)
LLAMACPP_DRAFT = Row(
    "llamacpp", "draft", "draft acceptance", "LDraft",
    patterns={
        "draft": re.compile(r"draft acceptance(?: rate)? =\s*(?P<rate>\d+(?:\.\d+)?|nan)\s*"
                            r"\(\s*(?P<accepted>\d+) accepted /\s*(?P<generated>\d+) generated\)"),
        "mal": re.compile(rf"mean (?:acceptance length|len) =\s*(?P<mal>{NUM})"),
        "per_pos": re.compile(r"acceptance rate per position =\s*\((?P<per_pos>[^)]*)\)"),
    },
    required=(("draft",),),
    samples=(
        Sample("0.06.896.015 I slot print_timing: id  1 | task 0 | draft acceptance = 0.64479 "
               "(  167 accepted /   259 generated), mean acceptance length =  2.92, acceptance "
               "rate per position = (0.805, 0.632, 0.483)",
               "tests/data/real-logs/llamacpp_pr_24536.log",
               {"slot": (1, 0), "accepted": 167, "generated": 259, "mal": 2.92,
                "per_pos": (0.805, 0.632, 0.483)}),
        Sample("0.08.388.799 I slot print_timing: id  1 | task 1 | draft acceptance = 0.70065 "
               "(  323 accepted /   461 generated), mean len =  6.57",
               "tests/data/llamacpp-embedded/ngram_np2_c4.log",
               {"accepted": 323, "generated": 461, "mal": 6.57, "per_pos": None}),
    ),
)
_STAT_NAMES = ("#gen drafts", "#acc drafts", "#gen tokens", "#acc tokens")
LLAMACPP_STATISTICS = Row(
    "llamacpp", "statistics", "#gen drafts", "LStats",
    patterns={"impl": re.compile(r"statistics\s+(?P<impl>[\w.-]+):"),
              **{k: re.compile(rf"{re.escape(k)} =\s*(?P<v>{NUM})") for k in _STAT_NAMES},
              "mal": re.compile(rf"#mean acc len =\s*(?P<mal>{NUM})")},
    required=(("impl",), *((k,) for k in _STAT_NAMES)),
    ends={"statistics": (" ms",)},
    samples=(
        Sample("0.06.896.057 I statistics     draft-eagle3: #calls(b,g,a) =    1     87     87, "
               "#gen drafts =     87, #acc drafts =    70, #gen tokens =    259, #acc tokens =   "
               "167, #mean acc len = 2.92, #acc rate/pos = (0.805, 0.632, 0.483), "
               "dur(b,g,a) = 0.005, 325.555, 0.114 ms",
               "tests/data/real-logs/llamacpp_pr_24536.log",
               {"impl": "draft-eagle3", "gen_drafts": 87, "gen_tokens": 259, "acc_tokens": 167,
                "mal": 2.92}),
    ),
)
LLAMACPP_RELEASE = Row(
    "llamacpp", "release", "stop processing", "LRelease",
    samples=(
        Sample("0.06.896.125 I slot      release: id  1 | task 0 | stop processing: n_tokens = "
               "275, truncated = 0", "tests/data/real-logs/llamacpp_pr_24536.log",
               {"slot": (1, 0)}),
    ),
)

ROWS: tuple[Row, ...] = (
    VLLM_STATS, VLLM_SPEC, VLLM_SPEC_V0, VLLM_CONFIG, VLLM_LAUNCH,
    SGLANG_DECODE, SGLANG_CONFIG,
    LLAMACPP_TIMING, LLAMACPP_DRAFT, LLAMACPP_STATISTICS, LLAMACPP_RELEASE,
)
