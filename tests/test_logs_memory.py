"""The log summary in bounded memory (issue 22): each figure is exact up to EXACT_MAX values,
then a log-bucket histogram whose size does not grow with the number of windows."""

from __future__ import annotations

import math
import random
from datetime import datetime
from pathlib import Path

import pytest

from decodescope.records.summary import Summary
from decodescope.telemetry.logs import analyze_log
from decodescope.telemetry.logs import figures as figures_mod
from decodescope.telemetry.logs.figures import EXACT_MAX, REL_ERROR, Figure
from decodescope.telemetry.logs.synth import engine_line, spec_line


def _values(n: int, seed: int) -> list[float]:
    r = random.Random(seed)
    return [r.lognormvariate(5, 0.6) for _ in range(n)] + [0.0, float("nan")]


def test_exact_up_to_the_limit():
    xs = _values(1000, 1)
    f = Figure()
    for x in xs:
        f.append(x)
    assert not f.approx and f.summary() == Summary.of(xs)
    assert Figure().summary() is None


def test_beyond_the_limit_within_the_stated_error():
    xs = _values(EXACT_MAX + 50_000, 2)
    f = Figure()
    for x in xs:
        f.append(x)
    got, ref = f.summary(), Summary.of(xs)
    assert f.approx and got is not None and ref is not None
    assert (got.n, got.min, got.max) == (ref.n, ref.min, ref.max)
    assert got.mean == pytest.approx(ref.mean, rel=1e-12)
    assert got.stdev == pytest.approx(ref.stdev, rel=1e-9)
    for name in ("median", "p5", "p95", "p99", "mad"):
        assert getattr(got, name) == pytest.approx(getattr(ref, name), rel=REL_ERROR), name


def test_memory_does_not_grow_with_the_values():
    f = Figure()
    r = random.Random(3)
    for _ in range(EXACT_MAX + 1):
        f.append(r.uniform(10, 1000))
    for _ in range(4 * EXACT_MAX):
        f.append(r.uniform(10, 1000))
    # values in [10, 1000): at most one bucket per factor GAMMA, however many values come
    bound = math.ceil(math.log(1000 / 10) / math.log(figures_mod.GAMMA)) + 1
    assert f._xs is None and len(f._pos) <= bound


def test_a_long_log_sums_up_approximately_and_says_so(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(figures_mod, "EXACT_MAX", 50)
    t0 = datetime(2026, 9, 15, 12, 0, 0).timestamp()
    lines = []
    for i in range(200):
        t = t0 + 10 * i
        lines += [engine_line(t, 100.0 + i, running=2), spec_line(t, 300, [200, 150, 100])]
    p = tmp_path / "long.log"
    p.write_text("\n".join(lines) + "\n")
    s = analyze_log(str(p), year=2026)
    assert s.decode is not None and s.decode.n == 200
    assert s.decode.median == pytest.approx(100.0 + 99.5, rel=REL_ERROR)
    assert any(n.code == "logs.figures_approx" for n in s.notes)
    assert s.to_dict()["figures_rel_error"] == REL_ERROR


def test_json_all_windows_is_written_as_it_goes(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """`logs --json --max-windows 0` spools every window as it comes (nothing kept in memory)
    and gives the same document as a run that keeps them all."""
    import json

    from decodescope.cli.common import to_jsonable
    from decodescope.cli.main import main

    t0 = datetime(2026, 9, 15, 12, 0, 0).timestamp()
    lines = []
    for i in range(40):
        t = t0 + 10 * i
        lines += [engine_line(t, 100.0 + i, running=2), spec_line(t, 300, [200, 150, 100])]
    p = tmp_path / "v.log"
    p.write_text("\n".join(lines) + "\n")
    assert main(["logs", str(p), "--year", "2026", "--json", "--max-windows", "0"]) == 0
    got = json.loads(capsys.readouterr().out)
    want = to_jsonable(analyze_log(str(p), year=2026, max_windows=1000))
    assert got == json.loads(json.dumps(want))
    assert got["windows_listed"] == got["windows_total"] == 40
