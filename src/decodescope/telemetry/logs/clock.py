"""Timestamps in engine log lines: year-less vLLM stamps, ISO stamps, llama.cpp elapsed time.

vLLM prints `MM-DD hh:mm:ss` without a year. The year comes from the caller (`year=`, the
year of the first year-less line) or from the file's mtime (the year of the *last* line), and
a December -> January step moves to the next year. Times are naive local time, like the
engine printed them (and like the user types `--since 23:30`), converted to epoch seconds.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

# Last stamp in the text before the message wins (the engine's own, after docker/k8s stamps).
STAMP_RE = re.compile(
    r"(?:(\d{4})-)?(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?(Z|[+-]\d\d:?\d\d)?"
)
# llama.cpp `common/log.cpp` elapsed stamp: minutes.seconds.millis.micros, then a level letter.
ELAPSED_RE = re.compile(r"^\s*(\d+)\.(\d\d)\.(\d\d\d)\.(\d\d\d) [IWEDT] ")


def _last_stamp_colon(text: str) -> int:
    """Index of the first ':' of the last `MM-DD hh:mm:ss` in text, or -1 (no regex scan:
    a search over every position costs more than the rest of the line's parsing)."""
    best = -1
    i = text.find(":")
    while i >= 0:
        if i >= 8 and text[i + 3:i + 4] == ":" and text[i - 6] == "-" and text[i - 3] in " T" \
                and text[i - 2:i].isdigit() and text[i - 8:i - 6].isdigit():
            best = i
            i = text.find(":", i + 4)
        else:
            i = text.find(":", i + 1)
    return best


_MORE = (".", ",", "Z", "+", "-")


def _has_year(text: str, i: int) -> bool:
    return i >= 13 and text[i - 9] == "-" and text[i - 13:i - 9].isdigit()


def strip_ansi(text: str) -> str:
    return ANSI_RE.sub("", text) if "\x1b" in text else text


def elapsed_s(text: str) -> float | None:
    """Seconds since server start from a llama.cpp elapsed-time prefix, else None."""
    m = ELAPSED_RE.match(text)
    if m is None:
        return None
    return elapsed_of(m.groups())


# The three-digit millisecond and microsecond fields' values, looked up: every line of a
# llama.cpp log has a stamp, and a lookup costs a third of int() and a division (the values
# are those of the division: the sum is the same float).
_MILLI = {f"{i:03d}": i / 1e3 for i in range(1000)}
_MICRO = {f"{i:03d}": i / 1e6 for i in range(1000)}


def elapsed_of(g: Sequence[str | Any]) -> float:
    """Seconds of an ELAPSED_RE match's four groups (minutes, seconds, ms, µs), first in `g`:
    minutes × 60 + seconds + ms / 1e3 + µs / 1e6."""
    try:
        return int(g[0]) * 60 + int(g[1]) + _MILLI[g[2]] + _MICRO[g[3]]
    except KeyError:  # digits of another script (`\d` matches them): int() reads them
        return int(g[0]) * 60 + int(g[1]) + int(g[2]) / 1e3 + int(g[3]) / 1e6


class Clock:
    """Turns the stamps of one log file into epoch seconds, inferring missing years."""

    def __init__(self, year: int | None = None, mtime_s: float | None = None) -> None:
        self._year_arg = year
        self._mtime = datetime.fromtimestamp(mtime_s) if mtime_s is not None else None
        self._year: int | None = None  # year of the latest year-less line
        self._month: int | None = None
        self._hours: dict[tuple[int, int, int, int], float] = {}
        self._last_key: str | None = None
        self._last_t: float | None = None
        self._min_key: str | None = None  # `[YYYY-]MM-DD hh:mm` of the last stamp parsed
        self._min_t: float | None = None  # ... its epoch seconds at second 0

    def state(self) -> tuple[int | None, int | None]:
        """(year, month) of the latest year-less line: what the next line's year depends on."""
        return self._year, self._month

    def resume(self, year: int | None, month: int | None) -> None:
        """Continue as if the previous year-less line was in this year and month (a read that
        starts in the middle of the file: segments.py)."""
        self._year, self._month = year, month
        self._last_key = self._last_t = self._min_key = self._min_t = None

    def stamp(self, text: str) -> float | None:
        """Epoch seconds of the last date-time stamp in `text`, or None."""
        i = _last_stamp_colon(text)
        if i < 0:
            return None
        start = i - 8 - (5 if _has_year(text, i) else 0)
        if text[i + 6:i + 7] in _MORE:  # a fraction or zone follows: no cache
            return self._parse_at(text, start)
        key = text[start:i + 6]
        if key == self._last_key:  # Engine and SpecDecoding lines share their stamp
            return self._last_t
        # The same minute as the last stamp parsed: its seconds added to that minute's start
        # (the year and month are the minute's: no rollover to note).
        minute, sec = key[:-3], key[-2:]
        t: float | None
        if minute == self._min_key and sec.isdecimal() and len(sec) == 2 and \
                self._min_t is not None:
            t = self._min_t + int(sec)
        else:
            t = self._parse_at(text, start)
            if t is not None and text[i + 3:i + 4] == ":":
                self._min_key, self._min_t = minute, t - int(sec)
        self._last_key, self._last_t = key, t
        return t

    def _parse_at(self, text: str, start: int) -> float | None:
        m = STAMP_RE.match(text, start)
        if m is None:
            return None
        y, mo, d, h, mi, s, frac, tz = m.groups()
        month = int(mo)
        if y is not None:
            year = int(y)
            self._year, self._month = year, month
        else:
            year = self._year_for(month, int(d))
        t = self.epoch(year, month, int(d), int(h), int(mi), int(s))
        if t is None:
            return None
        if frac:
            t += int(frac) / 10 ** len(frac)
        if tz:
            t += self._tz_correction(year, month, int(d), int(h), tz)
        return t

    def _year_for(self, month: int, day: int) -> int:
        if self._year is None or self._month is None:
            if self._year_arg is not None:
                year = self._year_arg
            elif self._mtime is not None:
                # mtime is the time of the last line: a first line "later in the year" than
                # the mtime must come from the year before.
                later = (month, day) > (self._mtime.month, self._mtime.day)
                year = self._mtime.year - 1 if later else self._mtime.year
            else:
                year = datetime.now().year
            self._year, self._month = year, month
            return year
        if self._month == 12 and month == 1:  # rollover
            self._year += 1
            self._month = month
        elif self._month == 1 and month == 12:  # a straggler from before the rollover
            return self._year - 1
        else:
            self._month = month
        return self._year

    def epoch(self, y: int, mo: int, d: int, h: int, mi: int = 0, s: int = 0) -> float | None:
        key = (y, mo, d, h)
        base = self._hours.get(key)
        if base is None:
            try:
                base = datetime(y, mo, d, h).timestamp()
            except ValueError:  # 02-30, hour 24 ...
                return None
            if len(self._hours) > 4096:
                self._hours.clear()
            self._hours[key] = base
        return base + mi * 60 + s

    @staticmethod
    def _tz_correction(y: int, mo: int, d: int, h: int, tz: str) -> float:
        """Shift from naive-local interpretation to the stamp's explicit zone."""
        if tz == "Z":
            offset = 0
        else:
            sign = -1 if tz[0] == "-" else 1
            digits = tz[1:].replace(":", "")
            offset = sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
        naive = datetime(y, mo, d, h)
        local_offset = naive.astimezone().utcoffset()
        local_s = local_offset.total_seconds() if local_offset is not None else 0.0
        return local_s - offset


def stamp_fields(text: str) -> tuple[int | None, int, int, int, int, int] | None:
    """(year or None, month, day, hour, minute, second) of the last stamp in text, or None:
    the order key of a line for the byte-offset bisection (seek.py)."""
    i = _last_stamp_colon(text)
    if i < 0:
        return None
    start = i - 8 - (5 if _has_year(text, i) else 0)
    m = STAMP_RE.match(text, start)
    if m is None:
        return None
    y, mo, d, h, mi, s = m.groups()[:6]
    return (int(y) if y else None, int(mo), int(d), int(h), int(mi), int(s))


def epoch_to_local(t_s: float) -> datetime:
    return datetime.fromtimestamp(t_s)


def epoch_to_utc_iso(t_s: float) -> str:
    return datetime.fromtimestamp(t_s, tz=timezone.utc).isoformat()
