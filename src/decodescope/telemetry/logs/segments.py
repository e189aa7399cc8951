"""Reading one byte range of a log as if the whole file had been read up to it.

A range read starts a little earlier (`warm_from`, the warm-up: the same lines the whole read
saw just before the range, to rebuild the assembler state: each engine's stats interval, the
stats line waiting for its spec line, the recent records the duplicate check compares with)
and goes on past its end only until the windows of its own lines are out (the lookahead).
Windows are owned by the range holding their first line: the windows of protos queued at
`start` belong to the range before and are skipped (the assembler releases windows in line
order), those of protos queued at `stop` are still given out.

Used by the seek (seek.py) for vLLM logs read for vLLM alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from decodescope.records.window import EngineWindow
from decodescope.telemetry.logs.lines import LineReader
from decodescope.telemetry.logs.parse_counts import ParseCounts
from decodescope.telemetry.logs.reader import read_lines
from decodescope.telemetry.logs.vllm_windows import VllmAssembler

CONFIG_FIELDS = ("_k_config", "spec_method", "spec_configured", "_k_lines", "config_known")


@dataclass
class RangeInfo:
    """What a range read reports besides its windows."""

    final: LineReader | None = None  # the reader at the end of the file (read to the end)
    counts: ParseCounts = field(default_factory=ParseCounts)


def supported(reader: LineReader) -> bool:
    """A vLLM log read for vLLM alone: a second engine (pipeline.LineReader.others, or its
    lines counted under --engine) leaves the file to the sequential read."""
    return isinstance(reader.assembler, VllmAssembler) and not reader.others \
        and not reader.counts.other_engines


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
    skip = len(asm._queue) if asm else 0  # protos of lines before `start`: not ours
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
    if stop is None:
        for w in reader.flush():
            released += 1
            if released > skip:
                yield w
        info.final = reader
        return
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
