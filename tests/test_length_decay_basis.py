"""Issue 21, class 5: no length decay whose basis cannot carry it.

A slope "per 1K output tokens" is stated only for outputs of at least
MIN_DECAY_OUTPUT_TOKENS; shorter, it is withheld with the reason and the length that would
suffice — in the analysis, in stored results read back, and in every output that shows it.
"""

from __future__ import annotations

import pytest
from test_decompose_unit import run_of, trace

from decodescope.analysis.decay import (
    MIN_DECAY_OUTPUT_TOKENS,
    decay_pct,
    length_decay,
    too_short,
    withheld_reason,
)
from decodescope.analysis.run_result import analyze_run
from decodescope.report.cells import run_rows
from decodescope.report.document import run_section
from decodescope.verdict import thresholds as th


def test_the_threshold_is_a_named_verdict_threshold() -> None:
    assert th.MIN_LENGTH_DECAY_OUTPUT_TOKENS == MIN_DECAY_OUTPUT_TOKENS
    # a slope per 1K tokens needs at least 1K tokens of output to be more than an extrapolation
    assert MIN_DECAY_OUTPUT_TOKENS >= 1000


@pytest.mark.parametrize("n", [384, 1024, MIN_DECAY_OUTPUT_TOKENS - 1])
def test_short_outputs_withhold_the_slope_with_reason_and_remedy(n: int) -> None:
    d = length_decay([trace(0.0, 0.1, n, 100.0, decay_per_1k=0.2) for _ in range(3)])
    assert d is not None and d["per_1k_pct"] is None and d["r2"] is None
    assert d["per_request_pct"] == []  # no per-request slope leaks out either
    assert f"{n} tokens" in d["reason"] and str(MIN_DECAY_OUTPUT_TOKENS) in d["reason"]
    assert d["points"], "the curve itself (rate by position) is still kept for the plot"


def test_long_outputs_state_the_slope() -> None:
    d = length_decay([trace(0.0, 0.1, MIN_DECAY_OUTPUT_TOKENS, 100.0, decay_per_1k=0.2)])
    assert d is not None and d["per_1k_pct"] is not None and "reason" not in d
    assert d["per_1k_pct"] < 0  # the simulated trace slows down along its output


def test_stored_results_from_before_the_rule_are_read_under_it() -> None:
    """A result stored before the threshold (no output_tokens) that states +130 % per 1K
    for 384-token outputs: its length is read from its last bucket, and the figure withheld."""
    old = {"bucket_tokens": 48, "per_1k_pct": 130.0, "r2": 0.4,
           "points": [{"position": p, "rate": 100.0, "n": 1} for p in range(0, 384, 48)]}
    assert decay_pct(old) is None
    reason = withheld_reason(old)
    assert reason is not None and "384 tokens" in reason
    long = {**old, "points": [{"position": p, "rate": 1.0, "n": 1} for p in range(0, 4096, 256)],
            "bucket_tokens": 256}
    assert decay_pct(long) == 130.0 and withheld_reason(long) is None
    assert too_short(None) is not None and too_short(MIN_DECAY_OUTPUT_TOKENS) is None


def test_run_outputs_say_withheld_and_never_print_the_number() -> None:
    run = run_of([[trace(0.0, 0.1, 384, 100.0, decay_per_1k=0.5)] for _ in range(3)])
    res = analyze_run(run)
    assert res["length_decay"]["per_1k_pct"] is None
    sec = run_section(run.__class__(**{**run.__dict__, "result": res}), 0)
    assert sec.length_decay_pct is None and sec.length_decay_withheld
    row = next(r for r in run_rows(sec) if r[0] == "length decay")
    assert row[1].startswith("withheld") and "per 1K" in row[1] and "%" not in row[1]
