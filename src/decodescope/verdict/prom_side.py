"""A comparison side from a Prometheus server's history: the engine windows of
`telemetry.prom_history` (one per query step) made into units exactly as log windows are
(`side_values.side_from_windows`: partial windows trimmed, blocks of adjacent windows, the
caliber unknown unless shown or asserted)."""

from __future__ import annotations

import dataclasses

from decodescope.errors import UsageError
from decodescope.telemetry.prom_history import (
    PromClient,
    PromRead,
    parse_selector,
    read_windows,
)
from decodescope.verdict.side_values import Side, side_from_windows


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
