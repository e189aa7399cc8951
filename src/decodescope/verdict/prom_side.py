"""A comparison side from a Prometheus server's history: the engine windows of
`telemetry.prom_history` (one per query step) made into units exactly as log windows are
(`side_from_windows.side_from_windows`: partial windows trimmed, blocks of adjacent windows, the
caliber unknown unless shown or asserted)."""

from __future__ import annotations

import dataclasses
import statistics
from typing import Any

from decodescope.errors import UsageError
from decodescope.records.window import EngineWindow
from decodescope.telemetry.prom_history import (
    PromClient,
    PromRead,
    parse_selector,
    read_windows,
)
from decodescope.verdict.side import Side
from decodescope.verdict.side_from_windows import side_from_windows


def read_prom(selector: str, *, engine: str | None = None, server: str | None = None,
              client: PromClient | None = None, now_s: float | None = None) -> PromRead:
    sel = parse_selector(selector, default_server=server)
    return read_windows(sel, engine=engine, client=client, now_s=now_s)


def side_from_prom(name: str, read: PromRead) -> Side:
    side = side_from_windows(name, read.windows, engine=read.engine, logged_spec=read.spec,
                             before=read.before)
    blocks = f" in blocks of {side.block_windows}" if side.block_windows > 1 else ""
    source = (f"{name.split('@')[0]}, {side.when()}, {len(read.windows)} windows × "
              f"{read.step_s:g} s (query step)"
              + (f", {side.windows_trimmed} partial trimmed" if side.windows_trimmed else "")
              + blocks + (" [SIMULATED]" if side.simulated else ""))
    return dataclasses.replace(side, source=source, notes=(*read.notes, *side.notes))


def load_prom_side(selector: str, *, engine: str | None = None, server: str | None = None,
                   client: PromClient | None = None, now_s: float | None = None) -> Side:
    read = read_prom(selector, engine=engine, server=server, client=client, now_s=now_s)
    sel = parse_selector(selector, default_server=server)
    if not any(w.generation_tokens for w in read.windows):
        raise UsageError(f"no engine activity in {sel.describe()} in that range",
                         where=sel.server, remedy="Check the time range (`decodescope prom "
                                                  "SELECTOR` lists its windows)")
    name = f"{sel.describe()}@{sel.start or ''}..{sel.end or ''}"
    return side_from_prom(name, read)


@dataclasses.dataclass(frozen=True)
class PromSummary:
    """`decodescope prom`: an engine's history read from Prometheus, summed up once — the
    engine's decode rate over all requests (median and peak of the windows that generated),
    the side's medians (per request, MAL, step rate, running), the series and queries."""

    windows: list[EngineWindow]
    side: dict[str, Any]
    engine: str | None
    step_s: float
    series: list[str]
    notes: list[str]
    queries: int
    start_s: float
    end_s: float
    decode_median: float | None  # tok/s of all requests, over the windows that generated
    decode_peak: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "step_s": self.step_s, "series": self.series,
                "start_s": self.start_s, "end_s": self.end_s, "queries": self.queries,
                "decode_median": self.decode_median, "decode_peak": self.decode_peak,
                "median": self.side["median"], "spec_method": self.side["spec_method"],
                "spec_k": self.side["spec_k"], "units": len(self.side["units"]),
                "notes": self.notes, "windows": [w.to_dict() for w in self.windows]}


def prom_summary(name: str, read: PromRead) -> PromSummary:
    side = side_from_prom(name, read)
    busy = [d for w in read.windows if (d := w.decode_rate) is not None and w.generation_tokens]
    return PromSummary(read.windows, side.to_dict(), read.engine, read.step_s, read.series,
                       [*side.notes], read.queries, read.start_s, read.end_s,
                       statistics.median(busy) if busy else None, max(busy) if busy else None)
