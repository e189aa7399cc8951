"""llama.cpp server per-request timing lines -> one engine window per request.

`slot print_timing` prints, when a request ends: prompt eval / eval / total time, then with
speculative decoding either `draft acceptance rate = R (A accepted / G generated)` (older) or
`draft acceptance = R (A accepted / G generated), mean acceptance length = M, acceptance rate
per position = (...)` (PR #24536), or `draft acceptance = R (A accepted / G generated), mean len =
M` (llama.cpp b1-0c1e570, embedded by `decodescope engine`; M = 1 + A / drafted steps, two
decimals), and a `statistics <impl>: ... #gen drafts = N ...` line (trace level: often absent).
The stamp, when present, is elapsed time since server start (no clock time), so windows carry
no t_start/t_end (flag `no_clock_time`); `printed['t_elapsed_s']` keeps the elapsed time.
A request without a draft line drafted nothing (`spec_off`: one token per step) only where no
other line of the log drafts; where one does, its drafting is unknown (`draft_stats_missing`:
a block cut before its draft line, a paste that lost it; llama.cpp also leaves the line out
of a request that drafted nothing, which the log cannot tell apart): drafting.py.
Drafts (verify steps with a draft) come from the statistics line when its token counts match
the request (per request, or cumulative and diffed; the line may come before or after the
release line); else from the accepted count and the printed MAL where exactly one whole number
of drafted steps gives that MAL at its printed precision (flag `drafts_from_mal`); else MAL is
the printed one.

The eval time excludes the first token (sampled at the end of the prompt eval): the tokens
generated in it are the printed count minus one, and each of its verify steps emits its
accepted tokens plus one, so steps = (tokens − 1) − accepted (PR #24536: 256 tokens, 167
accepted = 88 steps, 87 of them drafted). The window's generation_tokens are those n − 1
tokens over the eval time (`printed['predicted_n']` keeps the printed n).
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

from decodescope.records.window import EngineWindow
from decodescope.telemetry.logs import formats as F
from decodescope.telemetry.logs.clock import ELAPSED_RE, Clock, elapsed_of, elapsed_s
from decodescope.telemetry.logs.drafting import MISSING, UNDECIDED, Drafting
from decodescope.telemetry.logs.parse_counts import ParseCounts, Unparsed

ENGINE = "llamacpp"
KEYWORDS = tuple(k.encode() for row in (F.LLAMACPP_TIMING, F.LLAMACPP_DRAFT,
                                         F.LLAMACPP_STATISTICS, F.LLAMACPP_RELEASE)
                 for k in row.keywords)
LEAN_KEYWORDS = KEYWORDS

_SLOT = re.compile(r"\bid\s+(\d+)\s*\|\s*task\s+(\d+)")
_SLOT_AT = re.compile(_SLOT.pattern[2:])  # _SLOT without its \b, matched where _slot says
_TIME = F.LLAMACPP_TIMING.patterns["time"]
_MEAN_LEN_END = re.compile(r"mean len =\s*\d+\.\d\d$")
# The timing lines as `print_timing` writes them (3 of a request's ~6 lines), read in one
# match: the elapsed stamp, the slot and the timing row's own pattern (nothing before the slot
# or the time can hold another); any other shape takes the general path.
# The draft, statistics and release lines as llama.cpp writes them, each read in one match
# anchored at both ends from its row's own patterns (numbers only where a row allows any
# text, so nothing another branch looks for can be inside); any other shape takes the
# general path, which gives the same record.
_STAMP = ELAPSED_RE.pattern.removeprefix("^")  # the elapsed stamp: groups 1-4
_AT_SLOT = _SLOT_AT.pattern + r"\s*\|\s*"  # the slot: groups 5-6
_FAST_TIME = re.compile(_STAMP + r"slot print_timing: " + _AT_SLOT + _TIME.pattern)
_DRAFT = F.LLAMACPP_DRAFT.patterns
_FAST_DRAFT = re.compile(
    _STAMP + r"slot print_timing: " + _AT_SLOT + _DRAFT["draft"].pattern
    + r"(?:, " + _DRAFT["mal"].pattern + r")?"
    + r"(?:, " + _DRAFT["per_pos"].pattern.replace("[^)]*", r"[\d., ]*") + r")?\s*$")
_STATS = F.LLAMACPP_STATISTICS.patterns
_FAST_STATS = re.compile(
    _STAMP + _STATS["impl"].pattern + r" #calls\(b,g,a\) =[\d ]*, "
    + ", ".join(_STATS[k].pattern.replace("(?P<v>", f"(?P<v{i}>")
                for i, k in enumerate(F._STAT_NAMES))
    + r", " + _STATS["mal"].pattern + r", #acc rate/pos = \([\d., ]*\), "
    r"dur\(b,g,a\) = [\d., ]* ms\s*$")
_FAST_RELEASE = re.compile(_STAMP + r"slot\s+release: " + _AT_SLOT + r"stop processing")
# positions in a match's groups() of the fields read
_D_ACC, _D_GEN, _D_MAL, _D_PER_POS = (_FAST_DRAFT.groupindex[k] - 1 for k in
                                      ("accepted", "generated", "mal", "per_pos"))
_S_GEN_DRAFTS, _S_GEN_TOKENS, _S_ACC_TOKENS, _S_MAL = (_FAST_STATS.groupindex[k] - 1 for k in
                                                       ("v0", "v2", "v3", "mal"))


class LTime(NamedTuple):
    slot: tuple[int, int] | None
    kind: str  # "prompt eval" | "eval" | "total"
    ms: float
    tokens: int
    t_elapsed_s: float | None


class LDraft(NamedTuple):
    slot: tuple[int, int] | None
    accepted: int
    generated: int
    mal: float | None
    per_pos: tuple[float, ...] | None
    t_elapsed_s: float | None = None


class LStats(NamedTuple):
    impl: str
    gen_drafts: int
    gen_tokens: int
    acc_tokens: int
    t_elapsed_s: float | None = None
    mal: float | None = None  # `#mean acc len`, when printed


class LRelease(NamedTuple):
    slot: tuple[int, int] | None
    t_elapsed_s: float | None = None


Record = LTime | LDraft | LStats | LRelease


def parse(text: str, clock: Clock, counts: ParseCounts) -> Record | Unparsed | None:
    if "llama_perf" in text:  # context-level perf print at exit, not a request
        return None
    if "stop processing" in text:
        f = _FAST_RELEASE.match(text)
        if f is not None:
            g = f.groups()
            return LRelease((int(g[4]), int(g[5])), elapsed_of(g))
        return LRelease(_slot_of(text), elapsed_s(text))
    if "draft acceptance" in text:
        f = _FAST_DRAFT.match(text)
        if f is not None:
            g = f.groups()
            mal, per_pos = g[_D_MAL], g[_D_PER_POS]
            return LDraft((int(g[4]), int(g[5])), int(g[_D_ACC]), int(g[_D_GEN]),
                          float(mal) if mal is not None else None,
                          (_floats(per_pos) if per_pos is not None else None) or None,
                          elapsed_of(g))
        slot = _slot_of(text)
        d = F.groups(F.LLAMACPP_DRAFT, text)
        if d is None:
            return Unparsed("llamacpp.draft")
        per_pos = _floats(d["per_pos"]) if "per_pos" in d else None
        return LDraft(slot, int(d["accepted"]), int(d["generated"]),
                      float(d["mal"]) if "mal" in d else None, per_pos or None,
                      elapsed_s(text))
    if "#gen drafts" in text:  # (the statistics line has no slot)
        f = _FAST_STATS.match(text)
        if f is not None:
            g = f.groups()
            mal = g[_S_MAL]
            return LStats(g[4], int(float(g[_S_GEN_DRAFTS])), int(float(g[_S_GEN_TOKENS])),
                          int(float(g[_S_ACC_TOKENS])), elapsed_of(g),
                          float(mal) if mal is not None else None)
        d = F.groups(F.LLAMACPP_STATISTICS, text)
        if d is None:
            return Unparsed("llamacpp.statistics")
        return LStats(d["impl"], int(float(d["#gen drafts"])), int(float(d["#gen tokens"])),
                      int(float(d["#acc tokens"])), elapsed_s(text),
                      float(d["mal"]) if "mal" in d else None)
    f = _FAST_TIME.match(text)  # a timing line (none of the words above in it)
    if f is not None:
        g = f.groups()
        return LTime((int(g[4]), int(g[5])), g[6], float(g[7]), int(g[8]), elapsed_of(g))
    slot = _slot_of(text)
    t = _TIME.search(text)
    if t is None:
        return Unparsed("llamacpp.timing")
    return LTime(slot, t.group("kind"), float(t.group("ms")), int(t.group("tokens")),
                 elapsed_s(text))


def _slot_of(text: str) -> tuple[int, int] | None:
    m = _slot(text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _slot(text: str) -> re.Match[str] | None:
    """_SLOT.search(text), sooner: a regex that starts with \\b is tried at every position of
    the line; here only where `id` starts a word."""
    i = text.find("id")
    while i >= 0:
        if i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_"):  # \b before `id`
            m = _SLOT_AT.match(text, i)
            if m is not None:
                return m
        i = text.find("id", i + 1)
    return None


def complete(text: str, rec: Record) -> bool:
    """True when a line that may have been cut (no newline after it) is whole: it ends as
    its format does (`tokens per second)`, `N tokens`, the closing `)` of the draft line, the
    `ms` of the statistics line, the two decimals of `mean len`). The release line carries no
    number."""
    msg = text.rstrip(" \r\n")
    if isinstance(rec, LRelease):
        return True
    if isinstance(rec, LTime):
        return msg.endswith(F.LLAMACPP_TIMING.ends[rec.kind])
    if isinstance(rec, LDraft):
        if "draft acceptance rate" in msg:  # the older line ends at its counts
            return msg.endswith("generated)")
        if "mean len" in msg:  # `mean len = %5.2f`: whole with its two decimals
            return _MEAN_LEN_END.search(msg) is not None
        return msg.endswith(")") and rec.per_pos is not None
    return msg.endswith(F.LLAMACPP_STATISTICS.ends["statistics"])


def drafts_from_mal(accepted: int, mal: float, decimals: int = 2) -> int | None:
    """The drafted steps D with round(1 + accepted / D, decimals) == mal, when exactly one
    whole number fits (llama.cpp prints MAL = 1 + accepted / drafted steps with two
    decimals); None when none or several fit (MAL 1.00: no accepted token says nothing of D)."""
    if accepted <= 0 or mal <= 1.0:
        return None
    half = 0.5 * 10.0 ** -decimals
    lo, hi = mal - half - 1.0, mal + half - 1.0  # accepted / D within [lo, hi)
    if hi <= 0:
        return None
    d_min = max(1, math.ceil(accepted / hi - 1e-9))
    d_max = math.floor(accepted / lo + 1e-9) if lo > 0 else d_min + 2
    if d_max - d_min >= 3:  # the inner ones of 4+ candidates all fit: several, in bounded
        return None  # time (a huge count with a MAL near 1 spans ~10**12 of them)
    fits = [d for d in range(d_min, max(d_min, d_max) + 1)
            if round(1.0 + accepted / d, decimals) == round(mal, decimals)]
    return fits[0] if len(fits) == 1 else None


def _floats(text: str) -> tuple[float, ...] | None:
    try:
        return tuple(map(float, text.split(","))) or None  # float() takes the spaces
    except ValueError:  # an empty item (a trailing comma), or not a number
        pass
    try:
        return tuple(float(x) for x in text.split(",") if x.strip()) or None
    except ValueError:
        return None


class _Req:
    __slots__ = ("slot", "times", "draft", "stats", "t_elapsed_s", "released")

    def __init__(self, slot: tuple[int, int] | None) -> None:
        self.slot = slot
        self.times: dict[str, LTime] = {}
        self.draft: LDraft | None = None
        self.stats: LStats | None = None
        self.t_elapsed_s: float | None = None
        self.released = False  # its release line was read: a statistics line may still come


class LlamacppAssembler:
    engine = "llamacpp"

    def __init__(self, counts: ParseCounts) -> None:
        self._cur: _Req | None = None
        self._last_stats: dict[str, LStats] = {}
        self.config_known = True  # no launch-config keywords
        self.drafting = Drafting()

    def feed(self, rec: Record) -> list[EngineWindow]:
        kind = type(rec)
        if kind is LDraft or kind is LStats:
            self.drafting.note_on()  # some request drafted: a missing draft line is unknown
        out = self._feed(rec)
        return self.drafting.release(out) if out or self.drafting.held else out

    def _feed(self, rec: Record) -> list[EngineWindow]:
        cur = self._cur
        if isinstance(rec, LRelease):
            if cur is not None:
                cur.released = True
            return []
        if isinstance(rec, LStats):
            if cur is not None and cur.stats is None:
                cur.stats = rec
                if cur.released:  # release, then statistics: the request is complete
                    return self._flush()
            return []
        slot = rec.slot
        out: list[EngineWindow] = []
        if cur is None or cur.released or (
                slot is not None and cur.slot is not None and slot != cur.slot) or (
                isinstance(rec, LTime) and rec.kind in cur.times):
            # a new request (a second "eval time": the previous one ended)
            out = self._flush()
            cur = self._cur = _Req(slot)
        elif cur.slot is None:
            cur.slot = slot
        if isinstance(rec, LTime):
            cur.times[rec.kind] = rec
            if rec.t_elapsed_s is not None:
                cur.t_elapsed_s = rec.t_elapsed_s
        else:
            cur.draft = rec
        return out

    def flush(self) -> list[EngineWindow]:
        return self.drafting.flush(self._flush())

    def _flush(self) -> list[EngineWindow]:
        cur, self._cur = self._cur, None
        if cur is None or "eval" not in cur.times:
            return []
        return [self._build(cur)]

    def _drafts(self, r: _Req, d: LDraft) -> int | None:
        s = r.stats
        if s is None:
            return None
        prev = self._last_stats.get(s.impl)
        self._last_stats[s.impl] = s
        if (s.gen_tokens, s.acc_tokens) == (d.generated, d.accepted):
            return s.gen_drafts  # the statistics cover exactly this request
        if prev is not None and (s.gen_tokens - prev.gen_tokens, s.acc_tokens - prev.acc_tokens) \
                == (d.generated, d.accepted):
            return s.gen_drafts - prev.gen_drafts  # cumulative over the slot's life
        return None

    def _build(self, r: _Req) -> EngineWindow:
        ev = r.times["eval"]
        # The eval time runs from the first token on: it generated the tokens after it.
        gen = max(ev.tokens - 1, 0)
        decode_s = ev.ms / 1e3
        printed: dict[str, float] = {"decode_s": decode_s, "predicted_n": float(ev.tokens)}
        if ev.ms > 0:  # the decode rate: tokens generated in the eval time / the eval time
            printed["generation_throughput"] = gen / decode_s
            printed["tokens_per_second_printed"] = ev.tokens / decode_s
        pe = r.times.get("prompt eval")
        if pe is not None and pe.ms > 0:
            printed["prompt_throughput"] = pe.tokens / (pe.ms / 1e3)
            printed["prompt_s"] = pe.ms / 1e3
        if r.slot is not None:
            printed["slot"], printed["task"] = float(r.slot[0]), float(r.slot[1])
        if r.t_elapsed_s is not None:
            printed["t_elapsed_s"] = r.t_elapsed_s
        flags = ["no_clock_time"]
        d = r.draft
        drafts = accepted = draft_tokens = None
        per_pos = None
        if d is None:  # no draft line: off, or unknown where other lines say it drafts
            state = self.drafting.state()
            flags.append("spec_off" if state is False else MISSING if state else UNDECIDED)
        else:
            accepted, draft_tokens = d.accepted, d.generated
            if d.generated:
                printed["draft_acceptance"] = d.accepted / d.generated
            if d.mal is not None:
                printed["mal_reported"] = d.mal
            drafts = self._drafts(r, d)
            if drafts is None and d.mal is not None:
                drafts = drafts_from_mal(d.accepted, d.mal)
                if drafts is not None:
                    flags.append("drafts_from_mal")
            if drafts:
                if r.stats is not None and r.stats.mal is not None:
                    printed["statistics_mal"] = r.stats.mal
                if d.mal is None:  # older draft line: the MAL the statistics give
                    printed["mal_from_statistics"] = 1.0 + d.accepted / drafts
            if d.per_pos:
                printed["spec_k"] = float(len(d.per_pos))
                if drafts:
                    per_pos = tuple([round(p * drafts) for p in d.per_pos])
        return EngineWindow(
            source="log", engine="llamacpp", t_start_s=None, t_end_s=None,
            generation_tokens=gen, prompt_tokens=pe.tokens if pe else None,
            drafts=drafts, draft_tokens=draft_tokens, accepted_tokens=accepted,
            accepted_per_pos=per_pos, running=1.0,
            engine_id=f"slot {r.slot[0]}" if r.slot else None, printed=printed,
            flags=tuple(flags),
        )
