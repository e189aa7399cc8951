"""Log-window verdict truth: unknown caliber is not same, partial windows and dependence,
step rate when not every step drafts, speculative decoding off (synthetic vLLM logs built
from a request timeline with known truth: tests/logsynth.py)."""

from __future__ import annotations

import dataclasses
import math
from datetime import datetime
from pathlib import Path

import pytest
from logsynth import timeline, vllm_log

from decodescope.cli.main import main
from decodescope.records.window import EngineWindow
from decodescope.telemetry.logs import analyze_log
from decodescope.telemetry.logs.steps import step_info
from decodescope.verdict.bands import DEFAULT_BANDS, Band, bands_fit, load_bands
from decodescope.verdict.render import render_text
from decodescope.verdict.side import Side
from decodescope.verdict.side_from_windows import side_from_windows
from decodescope.verdict.side_resolve import read_log, resolve_side
from decodescope.verdict.triage import triage
from decodescope.verdict.types import fmt_num

T0 = datetime(2026, 9, 15, 10, 0).timestamp()
NGRAM_CFG = ("(APIServer pid=4242) INFO 09-15 09:58:00 [utils.py:253] non-default args: "
             "{'model': 'gemma', 'speculative_config': {'method': 'ngram', "
             "'num_speculative_tokens': 3, 'prompt_lookup_max': 4, 'prompt_lookup_min': 2}}")
PLAIN_CFG = ("(APIServer pid=4242) INFO 09-15 09:58:00 [utils.py:253] non-default args: "
             "{'model': 'gemma', 'max_num_seqs': 8}")


def _write(path: Path, lines: list[str]) -> str:
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _side(path: str, rng: str = "..") -> Side:
    return resolve_side(f"{path}@{rng}", store=None, year=2026)


# -- 5. unknown is not same -------------------------------------------------------------------
@pytest.fixture(scope="module")
def ngram_log(tmp_path_factory) -> tuple[str, str]:
    """A k=3 n-gram server (vLLM on CPU numbers): code rewrite (MAL ~3.8, 92–95 % of steps
    drafted, ~38 steps/s), then chat (MAL ~1.2, 3 % drafted, ~25 steps/s)."""
    code = timeline(T0, 30, step_rate=38.5, tps=(3.5, 3.7), coverage=(0.9, 0.95), seed=1,
                    tokens=(2000, 4000))
    chat = timeline(code[-1].t1 + 600, 30, step_rate=24.8, tps=(1.005, 1.01),
                    coverage=(0.02, 0.04), seed=2, tokens=(600, 1200))
    p = _write(tmp_path_factory.mktemp("ng") / "ngram.log",
               vllm_log(code + chat, k=3, config=NGRAM_CFG))
    return p, datetime.fromtimestamp(code[-1].t1 + 300).strftime("%H:%M:%S")


def test_ngram_code_then_chat_is_not_a_regression(ngram_log):
    path, mid = ngram_log
    b, c = _side(path, f"..{mid}"), _side(path, f"{mid}..")
    assert (b.spec_method, b.spec_k, b.every_step_drafts) == ("ngram", 3, False)
    v = triage(b, c)
    assert v.kind not in ("REGRESSION", "IMPROVEMENT") and v.exit_code != 1
    # Same n-gram settings, 92 % → 3 % of steps drafted: the lookup speculator's coverage
    # follows the content alone, so the logs show a content change.
    assert v.kind == "CALIBER_MISMATCH", v.headline
    assert v.caliber.same is False
    assert "share of steps that drafted moved" in v.caliber.text


def test_ngram_mal_change_without_a_coverage_change_is_not_established(ngram_log, tmp_path):
    """MAL falls 3.6 → 2.4 with the same share of steps drafting: content or a worse
    acceptance? The logs cannot tell: INCONCLUSIVE, mismatch suspected, never REGRESSION."""
    a = timeline(T0, 30, step_rate=38.5, tps=(3.5, 3.7), coverage=(0.9, 0.95), seed=1,
                 tokens=(2000, 4000))
    b = timeline(a[-1].t1 + 600, 30, step_rate=38.5, tps=(2.3, 2.5), coverage=(0.9, 0.95),
                 seed=2, tokens=(2000, 4000))
    path = _write(tmp_path / "ng2.log", vllm_log(a + b, k=3, config=NGRAM_CFG))
    mid = datetime.fromtimestamp(a[-1].t1 + 300).strftime("%H:%M:%S")
    v = triage(_side(path, f"..{mid}"), _side(path, f"{mid}.."))
    assert v.kind == "INCONCLUSIVE" and v.cause == "caliber unknown", v.headline
    assert v.caliber.same is None
    assert "bands are for mtp k=6; this stack: ngram" in v.caliber.text
    assert "mismatch suspected" in v.caliber.text
    assert any("--assume-same-caliber" in s for s in v.next_steps)
    assert any("--label side=baseline" in s for s in v.next_steps)


def test_ngram_code_then_chat_through_the_cli(ngram_log, capsys):
    path, mid = ngram_log
    rc = main(["triage", f"{path}@{mid}..", "--baseline", f"{path}@..{mid}", "--year", "2026",
               "--json"])
    assert rc == 3
    import json
    d = json.loads(capsys.readouterr().out)
    assert d["verdict"] == "CALIBER_MISMATCH" and d["caliber"]["same"] is False


def test_assume_same_caliber_lets_the_user_assert_it(ngram_log):
    path, mid = ngram_log
    b, c = _side(path, f"..{mid}"), _side(path, f"{mid}..")
    b, c = (dataclasses.replace(x, caliber_asserted=True) for x in (b, c))
    v = triage(b, c, assume_same_caliber=True)
    assert v.caliber.same is True and "--assume-same-caliber" in v.caliber.text
    assert v.kind == "REGRESSION"
    assert "asserted with --assume-same-caliber" in v.headline


def test_bands_for_the_stack(tmp_path: Path):
    assert bands_fit(DEFAULT_BANDS, None, 6, True)[0]
    assert bands_fit(DEFAULT_BANDS, "mtp", 6, None)[0]
    assert bands_fit(DEFAULT_BANDS, "eagle3", 6, None)[0]  # drafts every step, k=6
    assert not bands_fit(DEFAULT_BANDS, "ngram", 3, False)[0]
    assert not bands_fit(DEFAULT_BANDS, None, 3, True)[0]  # k=3
    assert not bands_fit(DEFAULT_BANDS, None, None, None)[0]  # nothing known
    assert not bands_fit(DEFAULT_BANDS, "off", None, None)[0]
    f = tmp_path / "ngram.toml"
    f.write_text('method = "ngram"\nk = 3\n[[band]]\nname = "echoed code"\nmin = 3.3\n'
                 '[[band]]\nname = "prose"\nmax = 1.6\n')
    bands = load_bands(f)
    assert [(b.method, b.k) for b in bands] == [("ngram", 3), ("ngram", 3)]
    assert bands_fit(bands, "ngram", 3, False)[0] and not bands_fit(bands, "ngram", 4, False)[0]
    assert bands_fit((Band("x", 1.0, None),), None, None, None)[0]  # no stack declared: any


def test_ngram_bands_file_shows_the_content_change(ngram_log, tmp_path: Path):
    path, mid = ngram_log
    f = tmp_path / "ngram.toml"
    f.write_text('method = "ngram"\nk = 3\n[[band]]\nname = "echoed code"\nmin = 3.3\n'
                 '[[band]]\nname = "prose"\nmax = 1.6\n')
    v = triage(_side(path, f"..{mid}"), _side(path, f"{mid}.."), bands=load_bands(f))
    assert v.kind == "CALIBER_MISMATCH" and "echoed code → prose" in v.caliber.text


# -- 6. partial windows and dependence --------------------------------------------------------
@pytest.fixture(scope="module")
def step_drop(tmp_path_factory) -> tuple[str, str]:
    """MTP k=6, ordinary text (MAL 2.6–3.0), 2000–6000-token requests with idle gaps: the
    current side's step rate is exactly 25 % lower (30 → 22.5 steps/s)."""
    d = tmp_path_factory.mktemp("sd")
    a = _write(d / "a.log", vllm_log(timeline(T0, 60, step_rate=30.0, tps=(2.6, 3.0), seed=1,
                                              tokens=(2000, 6000)), k=6))
    b = _write(d / "b.log", vllm_log(timeline(T0, 60, step_rate=22.5, tps=(2.6, 3.0), seed=2,
                                              tokens=(2000, 6000)), k=6))
    return a, b


def test_a_25_percent_step_rate_drop_reads_25_percent(step_drop):
    a, b = step_drop
    v = triage(_side(a), _side(b))
    assert v.label == "REGRESSION (step rate)"
    s = v.changes["step_rate"]
    assert s.rel == pytest.approx(-0.25, abs=0.02)
    assert s.ci_lo is not None and s.ci_hi is not None and s.ci_lo < -0.25 + 0.02 < s.ci_hi + 0.04
    # the same windows without trimming and blocks read the drop several points too small
    ra, rb = (read_log(x, None, None, engine=None, year=2026) for x in (a, b))
    raw = triage(side_from_windows("a", ra.windows, trim=False, block=1),
                 side_from_windows("b", rb.windows, trim=False, block=1))
    assert abs((raw.changes["step_rate"].rel or 0) + 0.25) > abs((s.rel or 0) + 0.25) + 0.03


def test_partial_windows_are_trimmed_and_adjacent_windows_blocked(step_drop):
    side = _side(step_drop[0])
    assert side.windows_trimmed > 0 and side.block_windows > 1
    assert side.unit_name == "window block"
    assert any("partial window(s) trimmed" in n for n in side.notes)
    assert any("lag-1 autocorrelation" in n for n in side.notes)


def test_headline_numbers_and_percent_come_from_one_statistic(step_drop):
    v = triage(_side(step_drop[0]), _side(step_drop[1]))
    s = v.changes["step_rate"]
    line = next(x for x in v.explanation if "steps/s" in x)
    arrow = line.split("step rate ", 1)[1].split(" steps/s", 1)[0]
    lo, hi = (float(x) for x in arrow.split(" → "))
    assert hi / lo - 1 == pytest.approx(s.rel, abs=0.006)  # 1-decimal rounding only


def test_iid_windows_are_not_blocked():
    from test_triage_support import seed_windows

    side = side_from_windows("a", seed_windows(T0, 120, 2.6, 3.0, seed=3))
    assert side.block_windows == 1 and len(side.units) == 120


def test_short_requests_are_named(tmp_path: Path):
    # 300–600-token requests at ~84 tok/s last 4–7 s: shorter than the 10 s log interval
    reqs = timeline(T0, 60, step_rate=30.0, tps=(2.6, 3.0), seed=4, tokens=(300, 600))
    side = _side(_write(tmp_path / "short.log", vllm_log(reqs, k=6)))
    assert any("busy stretches are short" in n for n in side.notes)


# -- 7. step rate when not every step drafts ---------------------------------------------------
def test_logs_never_print_a_draft_rate_as_a_step_rate(ngram_log):
    path, mid = ngram_log
    s = analyze_log(path, year=2026, since=mid)
    assert s.step_rate is not None and s.step_rate.median == pytest.approx(24.8, rel=0.06)
    assert s.drafts_rate is not None and s.drafts_rate.median < 2.0  # drafts/s, not steps/s
    assert s.draft_coverage is not None and s.draft_coverage < 0.05
    assert "3% of steps drafted" in s.headline()
    assert any(n.code == "logs.partial_draft_coverage" for n in s.notes)
    assert s.spec == {"method": "ngram", "k": 3, "lines": s.spec["lines"], "off": False}


def test_steps_below_drafts_are_withheld():
    w = EngineWindow("log", "vllm", T0, T0 + 10, generation_tokens=100, drafts=60,
                     draft_tokens=180, accepted_tokens=90, running=1)
    info = step_info(w)  # generated − accepted = 10 < 60 drafts: the counts contradict
    assert info.rate is None and info.withheld and "below the drafts" in info.basis
    assert info.drafts_rate == 6.0


def test_drafts_only_is_unknown_unless_every_step_drafts():
    w = EngineWindow("log", "vllm", T0, T0 + 10, drafts=50, draft_tokens=150,
                     accepted_tokens=90, running=1, flags=("spec_line_only",))
    assert step_info(w).rate is None
    assert step_info(w, every_step_drafts=True).rate == 5.0


def test_every_step_drafts_uses_the_draft_count():
    w = EngineWindow("log", "vllm", T0, T0 + 10, generation_tokens=141, drafts=50,
                     draft_tokens=300, accepted_tokens=90, running=1)
    info = step_info(w)  # 141 − 90 = 51 ≈ 50 drafts (rebuilt tokens): every step drafts
    assert info.rate == 5.0 and info.coverage == 1.0


def test_speculative_decoding_off_on_one_side(tmp_path: Path):
    on = _write(tmp_path / "on.log", vllm_log(
        timeline(T0, 20, step_rate=30.0, tps=(2.6, 3.0), seed=1, tokens=(2000, 6000)), k=6))
    off = _write(tmp_path / "off.log", vllm_log(
        timeline(T0, 20, step_rate=31.0, tps=(1.0, 1.0), seed=2, tokens=(1000, 3000)),
        k=6, spec=False, config=PLAIN_CFG))
    b, c = _side(on), _side(off)
    assert c.spec_method == "off" and c.speculative is False and b.speculative is True
    assert set(c.values("mal")) == {1.0} and set(c.values("tokens_per_step")) == {1.0}
    assert any("speculative decoding off" in n for n in c.notes)
    s = analyze_log(off, year=2026)
    assert "speculative decoding off (MAL 1)" in s.headline()
    v = triage(b, c)
    assert v.kind == "INCONCLUSIVE" and "speculative decoding off on off.log" in v.caliber.text
    # The log prints MAL 1 for the side without drafts: it has no content signal, so no band
    # labels it, its MAL reads "1 by definition", and the split and every line use tokens per
    # step (a real vLLM demo read "1.00 (high-entropy text, < 2.4)" and "MAL carries it" beside
    # "the decode change splits by tokens per step").
    for asserted in (v, triage(b, c, assume_same_caliber=True)):
        assert asserted.bands[1] is None
        assert asserted.decomposition is not None
        assert asserted.decomposition.acceptance_metric == "tokens per step"
        text = render_text(asserted)
        assert "high-entropy" not in text and "MAL carries" not in text
        mal_row = next(line for line in text.splitlines() if line.startswith("MAL "))
        assert mal_row.rstrip().endswith("1 by definition (no drafts)"), mal_row
    assert triage(b, c, assume_same_caliber=True).kind == "REGRESSION"


# -- 11. next steps that run -------------------------------------------------------------------
def test_numbers_are_formatted():
    assert fmt_num(1.0) == "1" and fmt_num(0.804844) == "0.80" and fmt_num(None) == "—"


def test_running_difference_is_formatted():
    from test_triage_support import seed_windows

    a = side_from_windows("a", seed_windows(T0, 20, 2.6, 3.0, seed=1))
    ws = [dataclasses.replace(w, running=0.804844 * 2) for w in seed_windows(T0, 20, 2.6, 3.0, seed=2)]
    v = triage(a, side_from_windows("b", ws))
    assert "1 → 1.61" in v.caliber.text and "0.804844" not in v.caliber.text
    rows = {r.check: r for r in v.evidence}
    assert rows["running requests (engine)"].result == "1 → 1.61"


def test_log_step_rate_regression_does_not_advise_an_unused_flag(step_drop):
    v = triage(_side(step_drop[0]), _side(step_drop[1]))
    text = "\n".join(v.next_steps)
    assert "--no-fingerprint" not in text and "Log windows carry no fingerprint" in text


def test_lag_one_math():
    from decodescope.verdict.side_from_windows import _lag1

    xs = [math.exp(math.sin(i / 5)) for i in range(60)]  # smooth: strongly autocorrelated
    rho = _lag1(xs, [True] * 60)
    assert rho is not None and rho > 0.8
