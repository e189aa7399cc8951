"""Time bins of consecutive windows for the compact table, in constant memory.

Windows are added in stream order; when there are more than 2 x MAX_BINS bins, neighbours are
merged pairwise, so a bin covers 1, 2, 4, ... windows. Up to MAX_BINS windows, one row each.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

MAX_BINS = 24  # rows of the window table: fits a terminal


@dataclass(frozen=True)
class WindowBin:
    t_start_s: float | None
    t_end_s: float | None
    windows: int
    engine_id: str | None  # set when one window, or all windows of the bin share it
    decode_mean: float | None  # tok/s, mean of the windows' decode rates
    decode_peak: float | None
    mal: float | None  # 1 + accepted / drafts over the bin (printed MAL when no counts)
    step_rate_mean: float | None
    running_mean: float | None
    flags: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["flags"] = list(self.flags)
        return d


class _Bin:
    __slots__ = ("t0", "t1", "n", "eid", "dsum", "dn", "dmax", "acc", "dr", "step", "sn",
                 "run", "rn", "flags")

    def __init__(self) -> None:
        self.t0: float | None = None
        self.t1: float | None = None
        self.n = 0
        self.eid: str | None = None
        self.dsum = self.acc = self.dr = self.step = self.run = 0.0
        self.dn = self.sn = self.rn = 0
        self.dmax: float | None = None
        self.flags: set[str] = set()

    def merge(self, o: _Bin) -> None:
        self.t0 = _min(self.t0, o.t0)
        self.t1 = _max(self.t1, o.t1)
        self.eid = self.eid if self.eid == o.eid else None
        self.n += o.n
        self.dsum += o.dsum
        self.dn += o.dn
        self.dmax = _max(self.dmax, o.dmax)
        self.acc += o.acc
        self.dr += o.dr
        self.step += o.step
        self.sn += o.sn
        self.run += o.run
        self.rn += o.rn
        self.flags |= o.flags


class Binner:
    def __init__(self) -> None:
        self._bins: list[_Bin] = []
        self._per_bin = 1  # windows per bin; doubles when the bins are merged pairwise

    def _current(self, engine_id: str | None) -> _Bin:
        """The bin the next window goes into: a new one when the last is full (pairing the
        bins first when there are 2 × MAX_BINS of them)."""
        bins = self._bins
        if not bins or bins[-1].n >= self._per_bin:
            if len(bins) >= 2 * MAX_BINS:
                bins = self._bins = _pairwise(bins)
                self._per_bin *= 2
            if not bins or bins[-1].n >= self._per_bin:
                b = _Bin()
                b.eid = engine_id
                bins.append(b)
        return bins[-1]

    def add(self, t0: float | None, t1: float | None, engine_id: str | None,
            decode: float | None, acc: float, drafts: float, step: float | None,
            running: float | None, flags: tuple[str, ...]) -> None:
        b = self._current(engine_id)
        if t0 is not None and (b.t0 is None or t0 < b.t0):
            b.t0 = t0
        if t1 is not None and (b.t1 is None or t1 > b.t1):
            b.t1 = t1
        if b.n and b.eid != engine_id:
            b.eid = None
        b.n += 1
        if decode is not None:
            b.dsum += decode
            b.dn += 1
            if b.dmax is None or decode > b.dmax:
                b.dmax = decode
        b.acc += acc
        b.dr += drafts
        if step is not None:
            b.step += step
            b.sn += 1
        if running is not None:
            b.run += running
            b.rn += 1
        if flags:
            b.flags.update(flags)

    def bins(self) -> tuple[WindowBin, ...]:
        bins = [_copy(b) for b in self._bins]  # merging mutates: keep ours intact
        while len(bins) > MAX_BINS:
            bins = _pairwise(bins)
        return tuple(
            WindowBin(
                t_start_s=b.t0, t_end_s=b.t1, windows=b.n, engine_id=b.eid,
                decode_mean=b.dsum / b.dn if b.dn else None, decode_peak=b.dmax,
                mal=1.0 + b.acc / b.dr if b.dr else None,
                step_rate_mean=b.step / b.sn if b.sn else None,
                running_mean=b.run / b.rn if b.rn else None,
                flags=tuple(sorted(b.flags)),
            )
            for b in bins
        )


def _pairwise(bins: list[_Bin]) -> list[_Bin]:
    out = []
    for i in range(0, len(bins), 2):
        b = bins[i]
        if i + 1 < len(bins):
            b.merge(bins[i + 1])
        out.append(b)
    return out




def _copy(b: _Bin) -> _Bin:
    c = _Bin()
    for name in _Bin.__slots__:
        setattr(c, name, getattr(b, name))
    c.flags = set(b.flags)
    return c


def _min(a: float | None, b: float | None) -> float | None:
    return b if a is None else (a if b is None else min(a, b))


def _max(a: float | None, b: float | None) -> float | None:
    return b if a is None else (a if b is None else max(a, b))
