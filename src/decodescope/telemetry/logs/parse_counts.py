"""What the line parsers share: the per-file counters and the "matched but unreadable" marker."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, NamedTuple


class Unparsed(NamedTuple):
    """A line that carried an engine keyword but not the fields its kind needs."""

    kind: str  # e.g. "vllm.stats", "vllm.spec", "sglang.decode", "llamacpp.timing"


@dataclass
class ParseCounts:
    """Running counters of one read (mutable: the reader and parsers add to it)."""

    bytes_read: int = 0  # lines are not counted: a newline count costs as much as the search
    lines_matched: int = 0  # lines that carried an engine keyword
    lines_parsed: int = 0  # of those, read into a record
    unparsed: Counter[str] = field(default_factory=Counter)  # kind -> lines
    unknown_fields: Counter[str] = field(default_factory=Counter)  # field name -> lines
    formats: Counter[str] = field(default_factory=Counter)  # format variant -> lines
    rotations: int = 0  # follow mode: file replaced (new inode)
    truncations: int = 0  # follow mode: file shrank
    # Bytes a seek to the --since/--until window did not read (seek.py); only in to_dict when
    # a seek happened, so a full read's counters are unchanged.
    bytes_skipped: int = 0
    duplicates: int = 0  # lines dropped as copies (same engine, same text, stamps ≤ 50 ms apart)
    compressed: str | None = None  # "gzip" | "bzip2" | "xz": read through the decompressor
    damaged: str | None = None  # a compressed file that ended early or is corrupt: why
    # Stamps going backwards: records stamped more than BACKWARDS_SLACK_S (pipeline.py) before
    # the previous record of the same engine and pid. The first one: (offset of its line in
    # the log, the previous stamp, its stamp); the largest jump back, seconds.
    backwards: int = 0
    backwards_first: tuple[int, float, float] | None = None
    backwards_max_s: float = 0.0
    # Lines of another engine than the one read (--engine given): engine name -> lines.
    other_engines: Counter[str] = field(default_factory=Counter)
    # A stats line cut short (the last line of a log still being written, a truncated copy or
    # paste, the growing tail in --follow): read for no number, counted and said.
    cut_lines: int = 0
    long_lines: int = 0  # lines over reader.MAX_LINE_BYTES: skipped, never held whole

    def note_unknown(self, names: Any) -> None:
        for name in names:
            self.unknown_fields[name] += 1

    def add(self, other: ParseCounts) -> None:
        """Add the counters of another read (a byte range of the same file: seek.py)."""
        self.bytes_read += other.bytes_read
        self.bytes_skipped += other.bytes_skipped
        self.lines_matched += other.lines_matched
        self.lines_parsed += other.lines_parsed
        self.unparsed.update(other.unparsed)
        self.unknown_fields.update(other.unknown_fields)
        self.formats.update(other.formats)
        self.duplicates += other.duplicates
        self.backwards += other.backwards
        if self.backwards_first is None:
            self.backwards_first = other.backwards_first
        self.backwards_max_s = max(self.backwards_max_s, other.backwards_max_s)
        self.other_engines.update(other.other_engines)
        self.damaged = self.damaged or other.damaged
        self.cut_lines += other.cut_lines
        self.long_lines += other.long_lines

    def note_backwards(self, offset: int, before_s: float, t_s: float) -> None:
        self.backwards += 1
        if self.backwards_first is None:
            self.backwards_first = (offset, before_s, t_s)
        self.backwards_max_s = max(self.backwards_max_s, before_s - t_s)

    def to_dict(self) -> dict[str, Any]:
        extra: dict[str, Any] = {"bytes_skipped": self.bytes_skipped} if self.bytes_skipped \
            else {}
        # Only when they happened, so the counters of an ordinary log are unchanged.
        if self.compressed:
            extra["compressed"] = self.compressed
        if self.damaged:
            extra["damaged"] = self.damaged
        if self.backwards:
            first = self.backwards_first
            extra["backwards"] = {
                "jumps": self.backwards, "largest_s": self.backwards_max_s,
                "first": None if first is None else
                {"offset": first[0], "from_s": first[1], "to_s": first[2]}}
        if self.other_engines:
            extra["other_engine_lines"] = dict(self.other_engines)
        if self.cut_lines:
            extra["cut_lines"] = self.cut_lines
        if self.long_lines:
            extra["long_lines"] = self.long_lines
        return {
            "bytes_read": self.bytes_read,
            "lines_matched": self.lines_matched,
            "lines_parsed": self.lines_parsed,
            "lines_unparsed": sum(self.unparsed.values()),
            "unparsed": dict(self.unparsed),
            "unknown_fields": dict(self.unknown_fields),
            "formats": dict(self.formats),
            "rotations": self.rotations,
            "truncations": self.truncations,
            "duplicates": self.duplicates,
            **extra,
        }
