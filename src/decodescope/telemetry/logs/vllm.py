"""vLLM log lines: the reader of the vLLM rows of the format table (formats.py).

Formats: docs/logs.md and shared reference engine-formats.md §1.1-1.2. A line is read by the
first vLLM row (in table order) whose keyword it holds: the row makes its record (its
`make`, defined next to the row; a row without one gives a VLine of its fields). Nothing here
is per kind: a new kind is a row in formats.py and its case in vllm_windows.py. The text
before the message (any prefix: `(APIServer pid=N)`, `INFO MM-DD ...`, `[loggers.py:N]`, V0
`metrics.py:N]`, docker stamps) only gives the time, pid and engine id.
"""

from __future__ import annotations

from typing import Any

from decodescope.telemetry.logs import formats as F
from decodescope.telemetry.logs.clock import Clock
from decodescope.telemetry.logs.formats import VConfig, VLine, VSpec, VStats
from decodescope.telemetry.logs.parse_counts import ParseCounts, Unparsed

__all__ = ["VConfig", "VLine", "VSpec", "VStats", "complete", "parse"]

ENGINE = "vllm"
ROWS = tuple(r for r in F.ROWS if r.engine == ENGINE)
STATS_KEY = F.VLLM_STATS.keyword  # the periodic stats line: seek and the watch keyword
# The texts searched in blocks: a row's `search` (" metrics: " finds both spec spellings in
# one pass) or its keywords. Rows not `lean` (the launch config) are searched only until k is
# known from the spec lines themselves (the assembler's config_known).
LEAN_KEYWORDS = tuple(dict.fromkeys(
    kw.encode() for r in ROWS if r.lean for kw in ((r.search,) if r.search else r.keywords)))
KEYWORDS = (*LEAN_KEYWORDS, *dict.fromkeys(
    kw.encode() for r in ROWS if not r.lean for kw in ((r.search,) if r.search else r.keywords)))

# (keyword, its length, its row, how the row makes its record), in table order: the first one found wins
_DISPATCH = tuple((kw, len(kw), r, r.make or F.make_line) for r in ROWS for kw in r.keywords)
_ROW_OF_RECORD = {r.record: r for r in reversed(ROWS)}  # record type name -> its first row
_ROW_OF_KIND = {r.kind: r for r in ROWS}
# The rows' common print order as one anchored regex each (built from the rows: formats.py)
_FAST_STATS = F.VLLM_STATS.fast
_FAST_SPEC = F.VLLM_SPEC.fast

Record = VStats | VSpec | VConfig | VLine


def parse(text: str, clock: Clock, counts: ParseCounts) -> Record | Unparsed | None:
    """Read one vLLM line (ANSI already stripped). None: keyword seen but not a line of its
    row (a keyword in other text)."""
    for kw, n, row, make in _DISPATCH:
        i = text.find(kw)
        if i >= 0:
            rec: Record | Unparsed | None = make(row, text, i, i + n, clock, counts)
            return rec
    return None


def complete(text: str, rec: Any) -> bool:
    """True when a line that may have been cut (no newline after it) is whole, as its row
    says (`whole`, or it ends with the last field of its format, unit included)."""
    row = _ROW_OF_KIND[rec.kind] if isinstance(rec, VLine) else \
        _ROW_OF_RECORD[type(rec).__name__]
    msg = text.rstrip(" \r\n")
    if row.whole is not None:
        return row.whole(row, msg, rec)
    return bool(row.ends) and F.ends_whole(row, msg)
