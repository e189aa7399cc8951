"""A Prometheus window's step rate survives the scrape landing between an engine's counter
increments (generated − accepted a few tokens below the drafts), and is still withheld when
the counts contradict each other beyond one step of every running request at each end."""

from __future__ import annotations

import pytest

from decodescope.records.window import EngineWindow
from decodescope.telemetry.logs.steps import step_info


def window(gen: int, acc: int, drafts: int, running: float = 1.0,
           source: str = "prometheus") -> EngineWindow:
    return EngineWindow(source, "vllm", 0.0, 10.0, generation_tokens=gen,  # type: ignore[arg-type]
                        drafts=drafts, draft_tokens=3 * drafts, accepted_tokens=acc,
                        running=running)


def test_scrape_skew_of_a_step_is_not_a_contradiction() -> None:
    # 32 drafting steps of MAL ≈ 3.2; the generation counter read one step early: 30 < 32
    info = step_info(window(gen=100, acc=70, drafts=32))
    assert not info.withheld and info.rate == pytest.approx(32 / 10.0)
    assert info.coverage == 1.0


def test_a_real_contradiction_is_still_withheld() -> None:
    info = step_info(window(gen=100, acc=70, drafts=60))  # 30 steps, 60 drafts: not skew
    assert info.withheld and info.rate is None and "below the drafts" in info.basis


def test_skew_scales_with_running_requests() -> None:
    # 8 running: one step at each end is up to 2 × 8 × (1 + 70/50) = 38.4 tokens
    assert not step_info(window(gen=100, acc=70, drafts=50, running=8.0)).withheld
    assert step_info(window(gen=100, acc=70, drafts=50, running=1.0)).withheld


def test_exact_counts_elsewhere_keep_their_tolerance() -> None:
    # llama.cpp's per-request counts are exact: two tokens short is a contradiction there
    assert step_info(window(gen=100, acc=70, drafts=32, source="request")).withheld
