"""The format table (telemetry/logs/formats.py): every row's sample lines parse to the record
the row names, with the field values the row says, by the engine's one parser."""

from __future__ import annotations

import pytest

from decodescope.telemetry.logs import formats as F
from decodescope.telemetry.logs import llamacpp, sglang, vllm
from decodescope.telemetry.logs.clock import Clock
from decodescope.telemetry.logs.fields import split_fields
from decodescope.telemetry.logs.parse_counts import ParseCounts

PARSERS = {"vllm": vllm.parse, "sglang": sglang.parse, "llamacpp": llamacpp.parse}
CASES = [(row, sample) for row in F.ROWS for sample in row.samples]


def _id(case: tuple[F.Row, F.Sample]) -> str:
    row, sample = case
    return f"{row.engine}-{row.kind}-{row.samples.index(sample)}"


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_sample_parses_to_its_record(case: tuple[F.Row, F.Sample]) -> None:
    row, sample = case
    assert any(k in sample.line for k in row.keywords)
    counts = ParseCounts()
    rec = PARSERS[row.engine](sample.line, Clock(2026), counts)
    assert type(rec).__name__ == row.record, rec
    for name, want in sample.expect.items():
        assert getattr(rec, name) == want, (name, rec)
    assert not counts.unknown_fields  # every printed name of a sample is in its row
    assert not counts.unparsed


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_sample_is_real_or_labelled_synthetic(case: tuple[F.Row, F.Sample]) -> None:
    row, sample = case
    if sample.source == "synthetic":
        return
    from pathlib import Path

    path = Path(__file__).parent.parent / sample.source
    assert sample.line in path.read_text(errors="replace").splitlines()


def test_every_engine_and_record_has_a_row_with_a_sample() -> None:
    assert {r.engine for r in F.ROWS} == set(PARSERS)
    assert all(r.samples for r in F.ROWS)
    want = {"VStats", "VSpec", "VConfig", "SDecode", "SConfig", "LTime", "LDraft", "LStats",
            "LRelease"}
    assert {r.record for r in F.ROWS} == want


@pytest.mark.parametrize("row", [r for r in F.ROWS if r.common], ids=lambda r: r.kind)
def test_common_order_regex_finds_what_the_field_split_finds(row: F.Row) -> None:
    """The fast regex is built from the row: on a line in the common order it gives the same
    raw values as splitting by name."""
    for sample in row.samples:
        msg = sample.line[sample.line.index(row.keyword) + len(row.keyword):]
        assert row.fast is not None
        m = row.fast.match(msg)
        if m is None:
            continue
        split = split_fields(msg)
        for (name, _, unit), raw in zip(row.common, m.groups(), strict=True):
            assert split.num(name) == F.fields(row, msg).num(name)
            assert raw + unit == split[name].strip()


@pytest.mark.parametrize(("row", "line", "whole"), [
    (F.VLLM_STATS, F.VLLM_STATS.samples[0].line, True),
    (F.VLLM_STATS, F.VLLM_STATS.samples[0].line[:-4], False),  # cut inside the last number
    (F.VLLM_SPEC, F.VLLM_SPEC.samples[0].line, True),
    (F.VLLM_SPEC, F.VLLM_SPEC.samples[0].line[:-1], False),  # the % unit lost
    (F.SGLANG_DECODE, F.SGLANG_DECODE.samples[0].line, True),
    (F.SGLANG_DECODE, F.SGLANG_DECODE.samples[1].line, False),  # no separator: cannot tell
])
def test_how_a_complete_line_ends(row: F.Row, line: str, whole: bool) -> None:
    assert F.ends_whole(row, line) is whole
