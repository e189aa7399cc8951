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
    duplicates: int = 0  # lines dropped as copies (same engine, same text, stamps ≤ 50 ms apart)

    def note_unknown(self, names: Any) -> None:
        for name in names:
            self.unknown_fields[name] += 1

    def to_dict(self) -> dict[str, Any]:
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
        }
