"""`runs list` names a run without drafts as MAL 1 (no drafts), as the report does — never "—"
beside a report that says "1 by definition"."""

from __future__ import annotations

from decodescope.analysis.run_quantities import quantities_of, speculative_of


def run_speculative(result: dict | None) -> bool | None:
    """The rule moved out of cli/runs.py: the run's MAL record says it (analysis.run_quantities)."""
    return speculative_of(quantities_of(result))


def _trials(**engine: float | None) -> dict:
    return {"trials": [{"status": "ok", **{f"engine_{k}": v for k, v in engine.items()}},
                       {"status": "failed", "engine_tokens_per_step": 9.0}]}


def test_steps_without_drafts_is_speculation_off() -> None:
    assert run_speculative(_trials(tokens_per_step=1.0, mal=None)) is False


def test_a_mal_is_speculation_on() -> None:
    assert run_speculative(_trials(tokens_per_step=2.5, mal=2.5)) is True


def test_no_engine_counts_says_nothing() -> None:
    assert run_speculative(_trials(tokens_per_step=None)) is None
    assert run_speculative(None) is None
    # a failed trial's counts do not speak for the run
    assert run_speculative({"trials": [{"status": "failed", "engine_tokens_per_step": 1.0}]}
                           ) is None


def test_demo_numbers_side_by_side_say_no_drafts_as_runs_list_does() -> None:
    from decodescope.cli.demo.parts import side_by_side

    rows = [{"run": 1, "caliber": "demo-code-rewrite@1", "client_decode": 51.3,
             "engine_decode": 52.5, "mal": 3.78, "speculative": True, "tokens_per_step": 3.78,
             "step_rate": 13.9, "simulated": False},
            {"run": 3, "caliber": "demo-code-rewrite@1", "client_decode": 14.9,
             "engine_decode": 14.9, "mal": None, "speculative": False, "tokens_per_step": 1.0,
             "step_rate": 14.9, "simulated": False},
            {"run": 4, "caliber": "demo-code-rewrite@1", "client_decode": 14.9,
             "engine_decode": None, "mal": None, "speculative": None, "tokens_per_step": None,
             "step_rate": None, "simulated": False}]
    lines = side_by_side(rows).splitlines()
    assert "3.78" in lines[1]
    assert "1 (no drafts)" in lines[2]  # was "—" beside the verdict's "1 by definition"
    assert "1 (no drafts)" not in lines[3] and "—" in lines[3]  # unknown stays unknown
