"""vLLM lines read by row (issue 33, one table, one reader): a row without a record type of
its own gives a VLine of its fields (formats.make_line), and vllm.py holds no code per kind."""

from __future__ import annotations

import re

from decodescope.telemetry.logs import formats as F
from decodescope.telemetry.logs import vllm
from decodescope.telemetry.logs.clock import Clock
from decodescope.telemetry.logs.parse_counts import ParseCounts, Unparsed
from decodescope.telemetry.logs.vllm_windows import VllmAssembler

# A V0 prefix-cache line (real format: tests/data/real-logs/vllm_issue_9539.log), read by a
# row made here: the table's rows are not changed.
LINE = "INFO 10-16 19:06:01 metrics.py:361] Prefix cache hit rate: GPU: 94.35%, CPU: 0.00%"
FIELD_ROW = F.Row("vllm", "prefix-test", "Prefix cache hit rate: ", "VLine",
                  field_map={"GPU": "gpu_pct", "CPU": "cpu_pct"}, required=(("GPU",),),
                  ends={"CPU": ("%",)})
REGEX_ROW = F.Row("vllm", "regex-test", "Prefix cache hit rate", "VLine",
                  patterns={"gpu": re.compile(r"GPU: (?P<v>[\d.]+)%"),
                            "cpu": re.compile(r"CPU: (?P<cpu_pct>[\d.]+)%")},
                  required=(("gpu",),))


def _make(row: F.Row, line: str, counts: ParseCounts) -> object:
    i = line.index(row.keyword)
    return F.make_line(row, line, i, i + len(row.keyword), Clock(2026), counts)


def test_field_map_row_gives_a_vline_of_its_fields():
    counts = ParseCounts()
    rec = _make(FIELD_ROW, LINE + ", Disk: 3.00%", counts)
    assert isinstance(rec, F.VLine) and rec.kind == "prefix-test"
    assert rec.printed == {"gpu_pct": 94.35, "cpu_pct": 0.0}
    assert rec.t_s == Clock(2026).stamp(LINE) and rec.pid is None and rec.engine_id is None
    assert counts.unknown_fields == {"Disk": 1}  # a name the row does not know is counted


def test_regex_row_gives_a_vline_of_its_groups():
    rec = _make(REGEX_ROW, LINE, ParseCounts())
    assert isinstance(rec, F.VLine) and rec.printed == {"gpu": 94.35, "cpu_pct": 0.0}


def test_a_required_field_missing_is_not_understood_by_kind():
    line = "INFO 10-16 19:06:01 metrics.py:361] Prefix cache hit rate: CPU: 0.00%"
    assert _make(FIELD_ROW, line, ParseCounts()) == Unparsed("vllm.prefix-test")
    assert _make(REGEX_ROW, line, ParseCounts()) == Unparsed("vllm.regex-test")


def test_reader_is_the_table():
    """Every vLLM row is dispatched and searched; the texts searched are the rows' own."""
    rows = [r for r in F.ROWS if r.engine == "vllm"]
    assert [r for _, _, r, _ in vllm._DISPATCH] == rows
    texts = {(r.search or r.keyword).encode() for r in rows}
    assert set(vllm.KEYWORDS) == texts
    assert set(vllm.LEAN_KEYWORDS) == {(r.search or r.keyword).encode() for r in rows if r.lean}
    for row in rows:  # each row's samples are read by that row's record type
        for s in row.samples:
            assert type(vllm.parse(s.line, Clock(2026), ParseCounts())).__name__ == row.record


def test_a_vline_kind_without_a_case_adds_nothing_to_the_windows():
    asm = VllmAssembler(ParseCounts())
    rec = _make(FIELD_ROW, LINE, ParseCounts())
    assert isinstance(rec, F.VLine)
    assert asm.feed(rec) == [] and asm.flush() == []
