"""vLLM log lines: periodic stats (V0, early V1, V1) and speculative-decoding lines.

Formats: docs/logs.md and shared reference engine-formats.md §1.1-1.2. Each line is read by
field name; the text before the message (any prefix: `(APIServer pid=N)`, `INFO MM-DD ...`,
`[loggers.py:N]`, V0 `metrics.py:N]`, docker stamps) only gives the time, pid and engine id.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import NamedTuple

from decodescope.telemetry.logs import formats as F
from decodescope.telemetry.logs.clock import Clock
from decodescope.telemetry.logs.fields import Fields, number
from decodescope.telemetry.logs.parse_counts import ParseCounts, Unparsed

ENGINE = "vllm"
STATS_KEY = F.VLLM_STATS.keyword
SPEC_ROWS = (F.VLLM_SPEC, F.VLLM_SPEC_V0)
SPEC_KEYS = tuple(r.keyword for r in SPEC_ROWS)
CONFIG_KEY = F.VLLM_CONFIG.keyword
LAUNCH_KEY = F.VLLM_LAUNCH.keyword  # vLLM ≥ 0.8 logs its non-default launch arguments once
# " metrics: " finds both spec spellings in one pass; the launch-config keywords are searched
# only until k is known from the spec lines themselves (LEAN_KEYWORDS).
LEAN_KEYWORDS = (STATS_KEY.encode(), b" metrics: ")
KEYWORDS = (*LEAN_KEYWORDS, CONFIG_KEY.encode(), LAUNCH_KEY.encode())

_INT = re.compile(r"\d+")
_ENGINE_TAG = re.compile(r"(?:Engine (\d+)|(\d+) Engines Aggregated):\s*$")
STATS_FIELDS = F.VLLM_STATS.field_map  # printed name -> name in EngineWindow.printed
SPEC_FIELDS = F.VLLM_SPEC.field_map
# The rows' common print order as one anchored regex each (built from the rows: formats.py)
_FAST_STATS = F.VLLM_STATS.fast
_FAST_SPEC = F.VLLM_SPEC.fast


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
    for row in SPEC_ROWS:
        i = text.find(row.keyword)
        if i >= 0:
            return _spec(text, i, row, clock, counts)
    if CONFIG_KEY in text:
        m = F.VLLM_CONFIG.patterns["k"].search(text)
        if m is None:
            return None
        meth = F.VLLM_CONFIG.patterns["method"].search(text, max(0, text.find("speculative")))
        return VConfig(int(m.group("k")), meth.group("method").lower() if meth else None)
    if LAUNCH_KEY in text:
        return None if "speculative" in text else VConfig(None, None, spec=False)
    return None


def complete(text: str, rec: Record) -> bool:
    """True when a line that may have been cut (no newline after it) is whole: it ends with
    the last field of its format, unit included. V1-a ends with its ", " separator. V1-b and
    V1-c end in a bare number or list (a cut there cannot be told): never complete."""
    if isinstance(rec, VConfig):
        return False
    msg = text.rstrip(" \r\n")
    if isinstance(rec, VSpec) and rec.variant == "v1-a":
        return msg.endswith(",") and msg.rsplit(", ", 1)[-1].startswith("Number of draft tokens")
    if isinstance(rec, VStats):
        return F.ends_whole(F.VLLM_STATS, msg)
    return F.ends_whole(F.VLLM_SPEC, msg)


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
    f = F.fields(F.VLLM_STATS, text[i:])
    gen = f.num("Avg generation throughput")
    if gen is None or gen != gen:
        return Unparsed("vllm.stats")
    variant = "v0" if ("Pending" in f or "Swapped" in f) else ("v1" if engine_id else "v1-early")
    printed = _printed(f, STATS_FIELDS, counts)
    return VStats(t_s, pid, engine_id, variant, gen, printed.get("prompt_throughput"),
                  printed.get("running"), printed.get("waiting"), printed)


def _spec(text: str, i: int, row: F.Row, clock: Clock, counts: ParseCounts) -> VSpec | Unparsed:
    t_s, pid, _ = _head(text, i, clock)
    f = F.fields(row, text[i + len(row.keyword):])
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


def _printed(f: Fields, known: Mapping[str, str], counts: ParseCounts,
             skip: tuple[str, ...] = ()) -> dict[str, float]:
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
