"""History points from llama.cpp's Prometheus windows: llama.cpp counts a request's tokens
when it finishes, with the seconds it spent decoding them (tokens_predicted_seconds_total,
kept as printed["decode_s"]). A window's rate is read over those engine seconds, not over the
window's wall time (which would count how many requests happened to finish in it)."""

from __future__ import annotations

import pytest

from decodescope.records.window import EngineWindow
from decodescope.verdict.history_store import points_from_windows

NO_SPEC = {"off": True, "k": 0}


def _finished(t: float, requests: int, tok_s: float, running: float) -> EngineWindow:
    """A 4 s window in which `requests` 96-token requests finished, each decoded at tok_s."""
    tokens = 96 * requests
    return EngineWindow("prometheus", "llamacpp", t, t + 4.0, generation_tokens=tokens,
                        drafts=0, draft_tokens=0, accepted_tokens=0, running=running,
                        printed={"decode_s": tokens / tok_s, "batch_steps": float(tokens)})


def test_a_window_reads_the_requests_decode_rate_however_many_finished_in_it():
    ws = [_finished(1000.0 + 4 * i, n, 30.0, running=r)
          for i, (n, r) in enumerate([(1, 1.0), (2, 1.0), (3, 1.0), (1, 0.0)])]
    pts = points_from_windows(ws, engine="llamacpp", spec=NO_SPEC)
    # one, two, three finishes per window: the same decode rate (over the window's wall time
    # they read 24, 48, 72 tok/s); a request that finished before the window's end (running
    # gauge 0 there) still counts its own seconds
    assert [p.decode for p in pts] == pytest.approx([30.0] * 4)
    assert [p.step_rate for p in pts] == pytest.approx([30.0] * 4)
    assert [p.t for p in pts] == [w.t_start_s for w in ws]


def test_a_window_without_the_engine_seconds_keeps_its_wall_time():
    w = EngineWindow("prometheus", "vllm", 1000.0, 1004.0, generation_tokens=96, drafts=0,
                     draft_tokens=0, accepted_tokens=0, running=1.0)
    (p,) = points_from_windows([w], engine="vllm", spec=NO_SPEC)
    assert p.decode == pytest.approx(24.0)


@pytest.mark.parametrize("df", [1e8, 1e13, 1e17, 1e20, 1e300])
def test_student_t_at_huge_df_is_the_normal_not_a_crash(df):
    """Welch's df of a stretch whose values barely vary (llama.cpp's tokens per step of 1.0
    exactly, every window) reached 1e20: t_quantile divided by zero (exit 70), and t_cdf
    read 0.5 at 1.96 from df ≈ 1e17."""
    from decodescope.verdict.stats import t_cdf, t_pdf, t_quantile

    assert t_quantile(0.975, df) == pytest.approx(1.959964, abs=1e-5)
    assert t_cdf(1.959964, df) == pytest.approx(0.975, abs=1e-6)
    assert t_pdf(0.0, df) == pytest.approx(0.398942, abs=1e-6)
    # and the ordinary range is untouched
    assert t_quantile(0.975, 10) == pytest.approx(2.228139, abs=1e-5)
