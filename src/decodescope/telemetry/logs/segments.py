"""Reading one byte range of a log as if the whole file had been read up to it.

A range read starts a little earlier (`warm_from`, the warm-up: the same lines the whole read
saw just before the range, to rebuild the assembler state: each engine's stats interval, the
stats line waiting for its spec line, the recent records the duplicate check compares with)
and goes on past its end only until the windows of its own lines are out (the lookahead).
Windows are owned by the range holding their first line: the windows of protos queued at
`start` belong to the range before and are skipped (the assembler releases windows in line
order), those of protos queued at `stop` are still given out.

`signature(reader)` is everything about a reader's state that decides its later windows. A
range whose signature at `start` equals the one the range before ended with reads exactly like
the whole file (parallel.py checks, and re-reads the range from the exact state otherwise).
vLLM logs only: the other engines' assemblers hold state the signature does not cover.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from decodescope.records.window import EngineWindow
from decodescope.telemetry.logs.parse_counts import ParseCounts
from decodescope.telemetry.logs.pipeline import LineReader
from decodescope.telemetry.logs.reader import read_lines
from decodescope.telemetry.logs.vllm_windows import VllmAssembler

CONFIG_FIELDS = ("_k_config", "spec_method", "spec_configured", "_k_lines", "config_known")


@dataclass
class RangeInfo:
    """What a range read reports besides its windows."""

    start_signature: Any = None  # signature at `start`, after the warm-up
    new_keys: frozenset[Any] = frozenset()  # engine keys first seen at or after `start`
    spec_lines: int = 0  # spec lines in [start, stop)
    end_state: bytes | None = None  # the reader pickled at `stop` (None: read to the end)
    final: LineReader | None = None  # the reader at the end of the file (last range only)
    counts: ParseCounts = field(default_factory=ParseCounts)


def supported(reader: LineReader) -> bool:
    """A vLLM log read for vLLM alone: a second engine (pipeline.LineReader.others, or its
    lines counted under --engine) leaves the file to the sequential read."""
    return isinstance(reader.assembler, VllmAssembler) and not reader.others \
        and not reader.counts.other_engines


def signature(reader: LineReader) -> dict[str, Any]:
    """The reader state that decides its later windows (vLLM), as comparable values."""
    asm: VllmAssembler = reader.assembler
    queue = list(asm._queue)
    index = {id(p): i for i, p in enumerate(queue)}
    return {
        "engine": reader.engine.name if reader.engine else None,
        "clock": reader.clock.state(),
        "last_t": dict(reader.last_t),  # the backwards-stamp check compares with these
        "others": tuple(reader.others),
        "recent": tuple(reader._recent),
        "queue": tuple((p.key, p.pid, p.t_s, p.stats, p.spec, p.v0, tuple(p.flags))
                       for p in queue),
        "open": {pid: index.get(id(p)) for pid, p in asm._open.items()},
        "keys": {k: v.state() for k, v in asm._keys.items()},
        "config": tuple(getattr(asm, f) for f in CONFIG_FIELDS),
        "v0": dict(asm._v0),
    }


def continues(before: dict[str, Any], start: dict[str, Any], new_keys: frozenset[Any]) -> bool:
    """True when a range that began in state `start` reads on exactly like the whole file,
    which was in state `before` there: equal state, except engines the warm-up did not see,
    which must not appear again in the range."""
    if any(before[k] != start[k] for k in before if k not in ("keys", "last_t")):
        return False
    # An engine's last stamp is known to the warm-up when it printed there; one it did not
    # see has no key there either, and the key check below keeps it out of the range.
    if any(before["last_t"].get(k) != v for k, v in start["last_t"].items()):
        return False
    keys_b, keys_s = before["keys"], start["keys"]
    return all(keys_b.get(k) == v for k, v in keys_s.items()) and not (new_keys & keys_b.keys())


def copy_config(src: LineReader, dst: LineReader) -> None:
    """Give `dst` the launch configuration `src` read (a range that skips the file's head)."""
    for f in CONFIG_FIELDS:
        setattr(dst.assembler, f, getattr(src.assembler, f))


def read_range(path: str, reader: LineReader, start: int, stop: int | None, warm_from: int,
               info: RangeInfo) -> Iterator[EngineWindow]:
    """Windows of the lines in [start, stop) (stop None: to the end), in line order.

    `reader.counts` receives the counters of [start, stop) only; warm-up and lookahead
    lines are counted elsewhere and dropped.
    """
    counts = reader.counts
    if warm_from < start:
        reader.counts = ParseCounts()
        for raw in read_lines(path, reader.keywords, reader.counts, warm_from, start,
                              at=reader.at):
            reader.feed(raw)
        reader.counts = counts
    asm: VllmAssembler | None = reader.assembler  # None: the engine is still to be detected
    if start > 0 and asm is not None:
        info.start_signature = signature(reader)
    skip = len(asm._queue) if asm else 0  # protos of lines before `start`: not ours
    keys0 = set(asm._keys) if asm else set()
    spec0 = asm.spec_lines if asm else 0
    released = 0  # windows released since `start` (skipped ones included)
    for raw in read_lines(path, reader.keywords, counts, start, stop, at=reader.at,
                          tail=reader.tail):
        for w in reader.feed(raw):
            released += 1
            if released > skip:
                yield w
    asm = reader.assembler
    if asm is None:  # nothing parsed
        info.final = reader
        return
    info.new_keys = frozenset(set(asm._keys) - keys0)
    info.spec_lines = asm.spec_lines - spec0
    if stop is None:
        for w in reader.flush():
            released += 1
            if released > skip:
                yield w
        info.final = reader
        return
    info.end_state = pickle.dumps(reader, protocol=pickle.HIGHEST_PROTOCOL)
    held = len(asm._queue)  # protos of lines before `stop` still held: ours (or skipped)
    if held == 0:
        return
    reader.counts = ParseCounts()
    out: list[EngineWindow] = []
    for raw in read_lines(path, reader.keywords, reader.counts, stop, at=reader.at,
                          tail=reader.tail):
        out += reader.feed(raw)
        if len(out) >= held:
            break
    else:
        out += reader.flush()
    reader.counts = counts
    yield from out[max(0, skip - released):held]  # line order: skipped ones come first
