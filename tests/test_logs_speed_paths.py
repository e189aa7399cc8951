"""The log reader's shortcuts (issue 22, speed) give what the plain computation gives.

Each shortcut is checked against the computation it replaces, written out plainly here:
the overlap count of llama.cpp requests (stops early while the kept requests are in end
order), the NaN-aware record comparison of the duplicate check (skips equal items; plain
equality for llama.cpp records, which hold NaN only in a draft line's per-position rates),
the elapsed stamp's looked-up milliseconds and microseconds, the per-position rates read by
one `map`, and the plain-number path of SGLang fields.
"""

from __future__ import annotations

import math
import random
import re
import statistics
from pathlib import Path
from typing import Any

import pytest

from decodescope.telemetry.logs import analyze_log, lines, llamacpp, sglang
from decodescope.telemetry.logs.accumulate import OVERLAP_KEPT, LogAccumulator
from decodescope.telemetry.logs.clock import Clock, elapsed_of
from decodescope.telemetry.logs.fields import fast_number, number
from decodescope.telemetry.logs.lines import _same
from decodescope.telemetry.logs.parse_counts import ParseCounts

DATA = Path(__file__).parent / "data"
LOGS = sorted((DATA / "real-logs").glob("*.log")) + sorted((DATA / "llamacpp-embedded").glob("*.log"))


def _spans(rng: random.Random, n: int, disorder: float, nan: float) -> list[tuple[float, float]]:
    """Requests as a llama.cpp log prints them: at their end, mostly in end order, some out
    of order (a `disorder` share: a server restart resets the elapsed clock, two slots end in
    the same millisecond), a few NaN."""
    out, t = [], 0.0
    for _ in range(n):
        t += rng.expovariate(2.0)
        end = t if rng.random() >= disorder else t - rng.uniform(0, 30)
        start = end - rng.uniform(0, 8)
        if rng.random() < nan:
            start, end = rng.choice([(math.nan, end), (start, math.nan)])
        out.append((start, end))
    return out


@pytest.mark.parametrize(("disorder", "nan"), [(0.0, 0.0), (0.02, 0.0), (0.3, 0.0),
                                               (0.0, 0.01), (0.05, 0.02), (1.0, 0.0)])
def test_overlap_count_is_the_count_over_every_kept_request(disorder: float, nan: float):
    rng = random.Random(f"{disorder}-{nan}")
    acc = LogAccumulator()
    kept: list[tuple[float, float]] = []
    for start, end in _spans(rng, 3 * OVERLAP_KEPT, disorder, nan):
        want = sum(1 for s0, e0 in kept if e0 > start and s0 < end)
        assert acc._note_span(start, end) == want
        kept = [*kept, (start, end)][-OVERLAP_KEPT:]
        bad = sum(1 for a, b in zip(kept, kept[1:], strict=False) if not a[1] <= b[1])
        assert acc._unsorted == bad  # the order bookkeeping follows the kept requests


def _same_plain(a: Any, b: Any) -> bool:
    """The comparison written out: equal, NaN equal to NaN, item by item."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same_plain(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_plain(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(6 if depth < 2 else 3)
    if kind == 0:
        return rng.choice([0.5, 1.0, math.nan, 2.0])
    if kind == 1:
        return rng.choice([1, 2, None, "eval", "total"])
    if kind == 2:
        return rng.choice([math.nan, 0.25])
    if kind == 3:
        return tuple(_value(rng, depth + 1) for _ in range(rng.randrange(3)))
    if kind == 4:
        return {k: _value(rng, depth + 1) for k in rng.sample("abc", rng.randrange(3))}
    return (_value(rng, depth + 1), _value(rng, depth + 1))


def test_nan_aware_comparison_is_the_plain_one():
    rng = random.Random(7)
    pairs = 0
    for _ in range(4000):
        a = _value(rng)
        b = a if rng.random() < 0.3 else _value(rng)
        if isinstance(a, tuple) and isinstance(b, tuple) or type(a) is type(b):
            pairs += 1
            assert _same(a, b) == _same_plain(a, b), (a, b)
    assert pairs > 1000
    assert _same((1, math.nan, {"x": math.nan}), (1, math.nan, {"x": math.nan}))
    assert not _same((1, math.nan), (1, 0.5))


def test_elapsed_stamp_lookup_is_the_arithmetic():
    rng = random.Random(11)
    for _ in range(20000):
        g = (str(rng.randint(0, 99999)), f"{rng.randint(0, 59):02d}", f"{rng.randint(0, 999):03d}",
             f"{rng.randint(0, 999):03d}")
        assert elapsed_of(g) == int(g[0]) * 60 + int(g[1]) + int(g[2]) / 1e3 + int(g[3]) / 1e6
    # `\d` also matches digits of other scripts: read as int() reads them, never a KeyError
    assert elapsed_of(("1", "02", "\u0660\u0661\u0662", "003")) == elapsed_of(("1", "02", "012", "003"))


@pytest.mark.parametrize("text", ["0.800, 0.600, 0.400", "0.5", "", " ", "0.8, 0.6,", "0.8,, 0.6",
                                  "nan, 0.5", "0.8, x", "1e-3, 2"])
def test_per_position_rates_read_as_item_by_item(text: str):
    try:
        plain = tuple(float(x) for x in text.split(",") if x.strip()) or None
    except ValueError:
        plain = None
    got = llamacpp._floats(text)
    assert repr(got) == repr(plain)  # repr: nan reads the same


def test_llamacpp_record_equality_is_the_nan_aware_one():
    recs = []
    for path in LOGS:
        c, clock = ParseCounts(), Clock(2026)
        for line in path.read_text(errors="replace").splitlines():
            if any(k.decode() in line for k in llamacpp.KEYWORDS):
                rec = llamacpp.parse(line, clock, c)
                if isinstance(rec, llamacpp.Record.__args__):  # type: ignore[attr-defined]
                    recs.append(rec)
    nan = llamacpp.LDraft((0, 1), 3, 6, 1.5, (math.nan, 0.5), 1.0)
    recs += [nan, nan._replace(per_pos=(math.nan, 0.5)), nan._replace(per_pos=(0.5, 0.5))]
    assert len(recs) > 100
    rng = random.Random(5)
    same = 0
    for _ in range(5000):
        a = rng.choice(recs)
        b = a._replace() if rng.random() < 0.3 else rng.choice(recs)
        if type(a) is type(b):
            assert lines._same_llama(a, b) == lines._same_record(a, b), (a, b)
            same += lines._same_llama(a, b)
    assert same > 100
    assert lines._same_llama(nan, nan._replace(per_pos=(math.nan, 0.5)))


@pytest.mark.parametrize("raw", ["12", " 0.85", "201.78 ", "0", "12.", "1e3", "-3", "nan",
                                 "inf", "1_000", "82.5%", "3279.0 tokens/s", "True", "false",
                                 "abc", "", " ", "0.39,", "2.64 (x)", "NaN%", "1,234"])
def test_plain_number_path_reads_what_number_reads(raw: str):
    a, b = fast_number(raw), number(raw)
    assert (a is None and b is None) or a == b or (a != a and b != b), (raw, a, b)


_FAST = ("_FAST_TIME", "_FAST_DRAFT", "_FAST_STATS", "_FAST_RELEASE")
# The lines of the embedded engine and PR #24536 with the one-match patterns' edge cases: a
# draft line without per-position rates, a fractional statistics count, trailing blanks, a
# release line with another tail, an old `draft acceptance rate` line.
_EDGE_LINES = [
    "0.08.388.799 I slot print_timing: id  1 | task 1 | draft acceptance = 0.70065 "
    "(  323 accepted /   461 generated), mean len =  6.57   ",
    "0.08.388.799 I slot print_timing: id  1 | task 1 | draft acceptance = nan "
    "(    0 accepted /     0 generated)",
    "0.08.388.799 I slot print_timing: id 12 | task 7 | draft acceptance rate = 0.50000 "
    "(    5 accepted /    10 generated)",
    "0.06.896.057 I statistics     draft-eagle3: #calls(b,g,a) =    1     87     87, #gen "
    "drafts =     87.0, #acc drafts =    70, #gen tokens =    259, #acc tokens =   167, #mean "
    "acc len = 2.92, #acc rate/pos = (0.805, 0.632, 0.483), dur(b,g,a) = 0.005, 325.555, "
    "0.114 ms",
    "0.06.896.125 I slot      release: id  1 | task 0 | stop processing: n_tokens = 275",
    "12.59.999.999 W slot      release: id 3 | task 1234 | stop processing: n_tokens = 9, "
    "truncated = 1",
]


def _general(line: str, clock: Clock, counts: ParseCounts) -> Any:
    saved = {name: getattr(llamacpp, name) for name in _FAST}
    try:
        for name in _FAST:
            setattr(llamacpp, name, re.compile(r"(?!)"))
        return llamacpp.parse(line, clock, counts)
    finally:
        for name, rx in saved.items():
            setattr(llamacpp, name, rx)


@pytest.mark.parametrize("path", [*LOGS, None], ids=lambda p: p.name if p else "edge-lines")
def test_llamacpp_lines_read_as_by_the_general_path(path: Path | None):
    """Every line of a real log (and each edge case) that a one-match pattern takes — the
    timing, draft, statistics and release lines as llama.cpp writes them — gives the record
    the general path gives (the general path still reads every other shape)."""
    clock_a, clock_b, counts = Clock(2026), Clock(2026), ParseCounts()
    taken: dict[str, int] = {}
    text = _EDGE_LINES if path is None else path.read_text(errors="replace").splitlines()
    for line in text:
        fast = llamacpp.parse(line, clock_a, counts)
        for name in _FAST:
            if getattr(llamacpp, name).match(line) is not None:
                taken[name] = taken.get(name, 0) + 1
                assert _general(line, clock_b, counts) == fast, line
                break
    if path is None:
        assert set(taken) == {"_FAST_DRAFT", "_FAST_STATS", "_FAST_RELEASE"}, taken
        assert taken == {"_FAST_DRAFT": 3, "_FAST_STATS": 1, "_FAST_RELEASE": 2}
    elif path.parent.name == "llamacpp-embedded" or path.name == "llamacpp_pr_24536.log":
        assert {"_FAST_TIME", "_FAST_RELEASE"} <= set(taken), taken
        if "draft acceptance" in "\n".join(text):
            assert "_FAST_DRAFT" in taken


@pytest.mark.parametrize("values", [[1.0], [2.0, 1.0], [3.0, 1.0, 2.0], [0.5, 0.25, 4.0, 1.0],
                                    [1.0, 1.0, 2.0, 9.0, 3.0, 0.1, 7.0, 7.5]])
def test_median_is_statistics_median(values: list[float]):
    assert sglang._median(values) == statistics.median(values)


def _plain_overlap(self: LogAccumulator, start: float, end: float) -> int:
    n = sum(1 for s0, e0 in self._spans if e0 > start and s0 < end)
    self._spans.append((start, end))
    return n


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.name)
def test_real_logs_read_as_without_the_shortcuts(path: Path, monkeypatch: pytest.MonkeyPatch):
    fast = analyze_log(str(path)).to_dict()
    monkeypatch.setattr(LogAccumulator, "_note_span", _plain_overlap)
    monkeypatch.setattr(lines, "_same", _same_plain)
    monkeypatch.setattr(sglang, "fast_number", number)
    monkeypatch.setattr(sglang, "_median", statistics.median)
    for name in _FAST:
        monkeypatch.setattr(llamacpp, name, re.compile(r"(?!)"))  # never matches
    plain = analyze_log(str(path)).to_dict()
    assert plain["windows_total"] == fast["windows_total"]
    assert repr(plain) == repr(fast)  # repr: NaN in both reads the same
