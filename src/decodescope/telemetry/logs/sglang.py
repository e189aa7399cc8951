"""SGLang `Decode batch` log lines -> engine windows (reference engine-formats.md §2.1).

A line is logged every `--decode-log-interval` decode batches (default 40) on TP0 and holds
windowed numbers: `gen throughput (token/s)` (all emitted tokens / window time) and, with
speculative decoding, `accept len` (tokens per request-step, bonus included = MAL; without it
drafting is off, or unknown where other lines say it is on: drafting.py). No counts
are printed, so a window carries the printed values: decode rate = gen throughput, MAL =
accept len (printed['mal_reported']), request-step rate = gen throughput / accept len. Its
duration is modelled as steps x running x accept len / gen throughput (tokens in 40 batch
steps / rate); SGLang's own window runs from the previous Decode line, so the first line after
an idle period spans the idle time (flag `may_include_idle`).
"""

from __future__ import annotations

import re
from collections import deque
from typing import NamedTuple

from decodescope.records.window import EngineWindow
from decodescope.telemetry.logs import formats as F
from decodescope.telemetry.logs.clock import Clock
from decodescope.telemetry.logs.drafting import MISSING, SPAN_NEEDS_MAL, UNDECIDED, Drafting
from decodescope.telemetry.logs.fields import fast_number
from decodescope.telemetry.logs.parse_counts import ParseCounts, Unparsed

ENGINE = "sglang"
DECODE_KEY = F.SGLANG_DECODE.keyword
CONFIG_KEY = F.SGLANG_CONFIG.keyword
LEAN_KEYWORDS = (DECODE_KEY.encode(),)
KEYWORDS = (*LEAN_KEYWORDS, CONFIG_KEY.encode())
DEFAULT_DECODE_LOG_INTERVAL = 40  # SGLang --decode-log-interval default
IDLE_DILUTION_FACTOR = 3.0  # window 3x longer than its neighbours: it spans an idle period
IDLE_DILUTION_SLACK_S = 2.0  # ... and by more than the 1 s stamp resolution twice
RECENT_WINDOWS = 8  # neighbours used for "typical duration"

_AFTER = re.compile(r"Decode batch(?: \[(\d+)\])?\s*[.,]?\s*")
_TAG = re.compile(r"\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?((?: [A-Za-z]+\d+)*)\s*\]")

FIELDS = F.SGLANG_DECODE.field_map  # printed name -> name in EngineWindow.printed


class SDecode(NamedTuple):
    t_s: float | None
    tag: str | None  # "TP0", "DP1 TP0"
    running: float
    gen_tput: float
    accept_len: float | None
    waiting: float | None
    printed: dict[str, float]


class SConfig(NamedTuple):
    steps: int
    spec: bool | None = None  # speculative_algorithm named (True) / None (False) / not printed


def parse(text: str, clock: Clock, counts: ParseCounts) -> SDecode | SConfig | Unparsed | None:
    i = text.find(DECODE_KEY)
    if i < 0:
        if CONFIG_KEY in text:
            g = F.groups(F.SGLANG_CONFIG, text)
            if g is None:
                return None
            spec = g.get("spec")
            return SConfig(int(g["steps"]),
                           None if spec is None else spec.lower() not in ("none", "null"))
        return None
    head = text[:i]
    m = _AFTER.match(text, i)
    assert m is not None  # the pattern's only required part is the keyword found above
    msg = text[m.end():]
    printed = F.numbers(F.SGLANG_DECODE, msg)  # the common order; else by name:
    if printed is None:
        printed = _by_name(msg, counts)
    gen, running = printed.get("generation_throughput"), printed.get("running")
    if gen is None or running is None:
        return Unparsed("sglang.decode")
    if m.group(1):
        printed["forward_ct"] = float(m.group(1))
    tag = _TAG.search(head)
    return SDecode(clock.stamp(head), (tag.group(1).strip() or None) if tag else None, running,
                   gen, printed.get("mal_reported"), printed.get("waiting"), printed)


def _by_name(msg: str, counts: ParseCounts) -> dict[str, float]:
    f = F.fields(F.SGLANG_DECODE, msg)
    printed: dict[str, float] = {}
    for name, raw in f.items():
        key = FIELDS.get(name)
        if key is None:
            counts.unknown_fields[name] += 1
            continue
        v = fast_number(raw)
        if v is not None:
            printed[key] = v
    return printed


def complete(text: str, rec: SDecode | SConfig) -> bool:
    """True when a line that may have been cut (no newline after it) is whole: only the
    Decode lines that end with `#queue-req: N, ` (the separator after the last number) can
    show it; a 2026 line ending `#queue-req: N` cannot (a cut there cannot be told)."""
    if not isinstance(rec, SDecode):
        return False
    return F.ends_whole(F.SGLANG_DECODE, text)


class _Tag:
    __slots__ = ("held", "recent")

    def __init__(self, held: SDecode) -> None:
        self.held: SDecode | None = held  # the tag's first line waits for a neighbour
        self.recent: deque[float] = deque(maxlen=RECENT_WINDOWS)


class SglangAssembler:
    engine = "sglang"

    def __init__(self, counts: ParseCounts) -> None:
        self._steps = DEFAULT_DECODE_LOG_INTERVAL
        self._tags: dict[str | None, _Tag] = {}
        self.config_known = False  # the launch line with decode_log_interval was seen
        self.drafting = Drafting()

    def feed(self, rec: SDecode | SConfig) -> list[EngineWindow]:
        if isinstance(rec, SConfig):
            self._steps, self.config_known = rec.steps, True
            self.drafting.note_config(rec.spec)
            return []
        if rec.accept_len is not None or "accept_rate" in rec.printed:
            self.drafting.note_on()  # accept rate without accept len: a line cut mid-way
        return self.drafting.release(self._feed(rec))

    def _feed(self, rec: SDecode) -> list[EngineWindow]:
        st = self._tags.get(rec.tag)
        if st is None:
            self._tags[rec.tag] = _Tag(rec)
            return []
        out = []
        d = self._duration(rec)
        if st.held is not None:
            first, st.held = st.held, None
            d0 = self._duration(first)
            out.append(self._build(first, d0, _diluted(d0, [d] if d else [])))
            if d0 is not None and not _diluted(d0, [d] if d else []):
                st.recent.append(d0)
        diluted = _diluted(d, st.recent)
        if d is not None and not diluted:
            st.recent.append(d)
        out.append(self._build(rec, d, diluted))
        return out

    def spec_info(self) -> dict[str, object]:
        """What the windows assumed: decode steps per line, from the launch line or the
        default (said in a note: the windows' durations and step counts rest on it)."""
        return {"decode_log_interval": self._steps,
                "decode_log_interval_assumed": not self.config_known}

    def flush(self) -> list[EngineWindow]:
        out = []
        for st in self._tags.values():
            if st.held is not None:
                first, st.held = st.held, None
                out.append(self._build(first, self._duration(first), False))
        return self.drafting.flush(out)

    def _duration(self, r: SDecode) -> float | None:
        """Steps x running x accept len / gen throughput; without accept len one token per
        step, unless drafting is on (or may be): then unknown."""
        if r.gen_tput <= 0 or r.running <= 0:
            return None
        if r.accept_len is None and self.drafting.state():
            return None
        return self._steps * r.running * (r.accept_len or 1.0) / r.gen_tput

    def _build(self, r: SDecode, d: float | None, diluted: bool) -> EngineWindow:
        printed = dict(r.printed)
        printed["decode_steps"] = float(self._steps)
        flags = []
        if r.accept_len is None:  # drafting off, or its statistics missing (drafting.py)
            state = self.drafting.state()
            flags.append("spec_off" if state is False else MISSING if state else UNDECIDED)
        if diluted:
            flags.append("may_include_idle")
        if r.gen_tput <= 0:
            flags.append("idle")
        if UNDECIDED in flags and d is not None:
            flags.append(SPAN_NEEDS_MAL)  # d assumed one token per step
        return EngineWindow(
            source="log", engine="sglang",
            t_start_s=r.t_s - d if (r.t_s is not None and d is not None) else None,
            t_end_s=r.t_s, running=r.running, waiting=r.waiting, engine_id=r.tag,
            printed=printed, flags=tuple(flags),
        )


def _diluted(d: float | None, neighbours: list[float] | deque[float]) -> bool:
    if d is None or not neighbours:
        return False
    typical = _median(neighbours)
    return d > IDLE_DILUTION_FACTOR * typical + IDLE_DILUTION_SLACK_S


def _median(xs: list[float] | deque[float]) -> float:
    """statistics.median's arithmetic, without its generality (a few floats, per line)."""
    data = sorted(xs)
    n = len(data)
    i = n // 2
    return data[i] if n % 2 else (data[i - 1] + data[i]) / 2
