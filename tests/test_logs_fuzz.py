"""Never crash: mutated real lines (cut, characters swapped, fields dropped) for all engines."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from decodescope.telemetry.logs import ParseCounts, analyze_log, iter_windows

DATA = Path(__file__).parent / "data" / "real-logs"


def mutate(rng: random.Random, line: str) -> str:
    op = rng.randrange(5)
    if op == 0 and line:
        return line[: rng.randrange(len(line))]
    if op == 1 and line:
        i = rng.randrange(len(line))
        return line[:i] + rng.choice("0:,.%x\x1b[ -") + line[i + 1:]
    if op == 2:
        parts = line.split(", ")
        if len(parts) > 1:
            del parts[rng.randrange(len(parts))]
        return ", ".join(parts)
    if op == 3:
        return line.replace(": ", ":", 1)
    return line


@pytest.mark.parametrize("engine", [None, "vllm", "sglang", "llamacpp"])
def test_mutated_lines_never_crash(tmp_path: Path, engine: str | None):
    rng = random.Random(42)
    source = [ln for p in sorted(DATA.glob("*.log")) for ln in p.read_text().splitlines()]
    lines = [mutate(rng, rng.choice(source)) for _ in range(3000)]
    p = tmp_path / "fuzz.log"
    p.write_text("\n".join(lines) + "\n")
    counts = ParseCounts()
    windows = list(iter_windows(str(p), engine=engine, counts=counts, year=2026))
    assert counts.bytes_read == p.stat().st_size
    assert counts.lines_matched == (counts.lines_parsed + sum(counts.unparsed.values())
                                    + counts.duplicates)
    for w in windows:  # derived numbers never blow up
        for v in (w.mal, w.decode_rate, w.step_rate, w.duration_s):
            assert v is None or v == v
    s = analyze_log(str(p), engine=engine, year=2026)
    assert s.to_dict()["windows_total"] == s.windows_total
