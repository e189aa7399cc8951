"""`runs list` names a run without drafts as MAL 1 (no drafts), as the report does — never "—"
beside a report that says "1 by definition"."""

from __future__ import annotations

from decodescope.cli.runs import _speculative


def _trials(**engine: float | None) -> dict:
    return {"trials": [{"status": "ok", **{f"engine_{k}": v for k, v in engine.items()}},
                       {"status": "failed", "engine_tokens_per_step": 9.0}]}


def test_steps_without_drafts_is_speculation_off() -> None:
    assert _speculative(_trials(tokens_per_step=1.0, mal=None), None) is False


def test_a_mal_is_speculation_on() -> None:
    assert _speculative(_trials(tokens_per_step=2.5, mal=2.5), 2.5) is True


def test_no_engine_counts_says_nothing() -> None:
    assert _speculative(_trials(tokens_per_step=None), None) is None
    assert _speculative(None, None) is None
    # a failed trial's counts do not speak for the run
    assert _speculative({"trials": [{"status": "failed", "engine_tokens_per_step": 1.0}]},
                        None) is None
