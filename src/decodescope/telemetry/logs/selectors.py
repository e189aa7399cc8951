"""`--since` / `--until` times, and the `FILE@START..END` selector that triage passes on.

Accepted: `HH:MM[:SS]`, `MM-DD HH:MM[:SS]`, an ISO date-time (`2026-09-15T23:30`,
`2026-09-15 23:30:05`, with or without a zone), or epoch seconds. A time without a date is
resolved against the log itself: `since` to the occurrence nearest the first window, `until`
to the first occurrence at or after `since` (else nearest the first window). Naive times are
local time, like the engine's own stamps.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from decodescope.errors import UsageError
from decodescope.records.window import EngineWindow

_HM = re.compile(r"^(\d{1,2}):(\d\d)(?::(\d\d))?$")
_MDHM = re.compile(r"^(\d\d)-(\d\d)[ T](\d{1,2}):(\d\d)(?::(\d\d))?$")
_EPOCH = re.compile(r"^\d{9,11}(?:\.\d+)?$")
_FORMS = "HH:MM, MM-DD HH:MM[:SS], an ISO date-time (2026-09-15T23:30) or epoch seconds"


@dataclass(frozen=True)
class TimeSpec:
    text: str
    absolute_s: float | None = None  # fully specified
    month: int | None = None
    day: int | None = None
    hour: int = 0
    minute: int = 0
    second: int = 0
    # The unit of the last field given: 1 s for `23:45` / `23:45:10` / ISO without a fraction
    # (an --until names that whole second), 0 for an exact instant (fraction, epoch float).
    resolution_s: float = 0.0

    def resolve(self, anchor_s: float, *, not_before_s: float | None = None) -> float:
        """Epoch seconds; partial times are placed relative to `anchor_s` (see module doc)."""
        if self.absolute_s is not None:
            return self.absolute_s
        a = datetime.fromtimestamp(not_before_s if not_before_s is not None else anchor_s)
        if self.month is None:
            base = a.replace(hour=self.hour, minute=self.minute, second=self.second, microsecond=0)
            candidates = [base + timedelta(days=k) for k in (-1, 0, 1, 2)]
        else:
            candidates = []
            for y in (a.year - 1, a.year, a.year + 1):
                try:
                    candidates.append(datetime(y, self.month, self.day or 1, self.hour,
                                               self.minute, self.second))
                except ValueError:
                    continue
        ts = sorted(c.timestamp() for c in candidates)
        if not ts:
            raise UsageError(f"no such date {self.text!r}", remedy=f"Use {_FORMS}")
        if not_before_s is not None:
            later = [t for t in ts if t >= not_before_s]
            return later[0] if later else ts[-1]
        return min(ts, key=lambda t: abs(t - anchor_s))


def parse_time(text: str | float | datetime) -> TimeSpec:
    """Parse a `--since/--until` value. Raises UsageError with the accepted forms."""
    if isinstance(text, datetime):
        return TimeSpec(text.isoformat(), absolute_s=text.timestamp())
    if isinstance(text, (int, float)):
        return TimeSpec(str(text), absolute_s=float(text))
    s = text.strip()
    try:
        if m := _HM.match(s):
            h, mi, sec = int(m[1]), int(m[2]), int(m[3] or 0)
            _check(h, mi, sec, s)
            return TimeSpec(s, hour=h, minute=mi, second=sec, resolution_s=1.0)
        if m := _MDHM.match(s):
            mo, d, h, mi, sec = int(m[1]), int(m[2]), int(m[3]), int(m[4]), int(m[5] or 0)
            _check(h, mi, sec, s)
            if not (1 <= mo <= 12 and 1 <= d <= 31):
                raise ValueError(s)
            return TimeSpec(s, month=mo, day=d, hour=h, minute=mi, second=sec, resolution_s=1.0)
        if _EPOCH.match(s):
            return TimeSpec(s, absolute_s=float(s), resolution_s=0.0 if "." in s else 1.0)
        dt = datetime.fromisoformat(s.replace("Z", "+00:00"))
        return TimeSpec(s, absolute_s=dt.timestamp(),
                        resolution_s=0.0 if dt.microsecond else 1.0)
    except ValueError:
        raise UsageError(f"cannot read time {text!r}", remedy=f"Use {_FORMS}") from None


def _check(h: int, mi: int, s: int, text: str) -> None:
    if not (0 <= h <= 23 and 0 <= mi <= 59 and 0 <= s <= 59):
        raise ValueError(text)


def split_selector(selector: str) -> tuple[str, str | None, str | None]:
    """`FILE@START..END` -> (FILE, START, END); either side may be empty; no `@` -> whole file."""
    path, at, rng = selector.rpartition("@")
    if not at:
        return selector, None, None
    if ".." not in rng:
        raise UsageError(f"bad log selector {selector!r}",
                         remedy="Write FILE@START..END, e.g. engine.log@23:30..23:45")
    start, _, end = rng.partition("..")
    return path, start.strip() or None, end.strip() or None


@dataclass
class Selection:
    """`--since/--until`, resolved against the log's first window (see selectors)."""

    since: TimeSpec | None = None
    until: TimeSpec | None = None
    since_s: float | None = None
    until_s: float | None = None
    resolved: bool = False
    without_time: int = 0  # windows left out because they carry no clock time
    # `--until 23:45:00` names a whole second: with sub-second stamps, 23:45:00.4 is inside it.
    _until_res: float = 0.0

    @property
    def active(self) -> bool:
        return self.since is not None or self.until is not None

    def apply(self, windows: Iterator[EngineWindow]) -> Iterator[EngineWindow]:
        if not self.active:
            yield from windows
            return
        for w in windows:
            t = w.t_end_s
            if t is None:
                self.without_time += 1
                continue
            if not self.resolved:
                self._resolve(w.t_start_s if w.t_start_s is not None else t)
            if (self.since_s is None or t >= self.since_s) and \
                    (self.until_s is None or t < self.until_s + self._until_res
                     or t <= self.until_s):
                yield w

    def resolve_at(self, anchor_s: float) -> None:
        """Resolve date-less times against the log's first window (a seek knows it before
        the windows come)."""
        if not self.resolved:
            self._resolve(anchor_s)

    def _resolve(self, anchor_s: float) -> None:
        self.resolved = True
        if self.since is not None:
            self.since_s = self.since.resolve(anchor_s)
        if self.until is not None:
            self.until_s = self.until.resolve(anchor_s, not_before_s=self.since_s)
            self._until_res = self.until.resolution_s
        if self.since_s is not None and self.until_s is not None and self.until_s < self.since_s:
            raise UsageError(f"--until {self.until.text if self.until else ''} is before "
                             f"--since {self.since.text if self.since else ''}",
                             remedy="Give an --until later than --since")
