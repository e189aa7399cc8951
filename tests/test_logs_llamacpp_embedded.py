"""`decodescope logs` on a real llama.cpp n-gram server log (issue 21, class 7).

tests/data/llamacpp-embedded/ngram_code_prose.log is the log of the embedded llama-server
(`decodescope engine start --spec ngram`, llama.cpp b1-0c1e570, Gemma 3 270M) while it was
probed with demo-code-rewrite, demo-varied-prose and demo-code-rewrite again (a warm-up and 3
trials each: 12 requests); only the per-token progress lines (`n_gen = …`, `prompt
processing, n_tokens = …`) were cut. This llama.cpp prints `draft acceptance = R (A accepted /
G generated), mean len = M` per request and its `statistics` line only at trace level, so the
drafted steps come from A and M alone. Before: every window showed "-" for MAL and step rate,
and the headline's decode median mixed both calibers without saying so.
"""

from __future__ import annotations

import re
from pathlib import Path

from decodescope.telemetry.logs import ParseCounts, analyze_log
from decodescope.telemetry.logs.clock import Clock
from decodescope.telemetry.logs.llamacpp import LDraft, complete, drafts_from_mal, parse
from decodescope.telemetry.logs.steps import step_info

LOG = Path(__file__).parent / "data" / "llamacpp-embedded" / "ngram_code_prose.log"
_DRAFT = re.compile(r"\(\s*(\d+) accepted /\s*(\d+) generated\), mean len =\s*([\d.]+)")


def _printed() -> list[tuple[int, int, float]]:
    return [(int(m[1]), int(m[2]), float(m[3])) for m in _DRAFT.finditer(LOG.read_text())]


def test_every_request_of_the_real_log_has_mal_and_a_step_rate() -> None:
    s = analyze_log(str(LOG))
    printed = _printed()
    assert s.windows_total == len(printed) > 0
    for w, (acc, gen, mal) in zip(s.windows, printed, strict=True):
        assert "drafts_from_mal" in w.flags
        assert w.accepted_tokens == acc and w.draft_tokens == gen
        # the drafted steps reproduce the printed MAL at its two decimals
        assert w.drafts is not None and round(1 + acc / w.drafts, 2) == mal
        assert w.mal is not None and round(w.mal, 2) == mal
        info = step_info(w)
        assert info.rate is not None and info.basis == "generated − accepted"
        assert w.generation_tokens is not None
        # steps = generated − accepted; every drafted step is one of them
        assert w.generation_tokens - acc >= w.drafts
        assert info.tokens_per_step is not None and info.rate is not None
        assert abs(info.tokens_per_step * info.rate - (w.decode_rate or 0.0)) < 1e-6
    assert s.mal_overall is not None and s.step_rate is not None
    assert s.windows_step_unknown == 0


def test_the_headline_says_it_mixes_request_shapes_and_splits_them() -> None:
    """Code rewrite (most steps drafted) and varied prose (few) in one log: the headline says
    its figures mix two request shapes; each shape's MAL is its own requests' counts."""
    s = analyze_log(str(LOG))
    assert len(s.shapes) == 2 and sum(x.requests for x in s.shapes) == s.windows_total
    assert "2 request shapes" in s.headline() and "per shape below" in s.headline()
    by = {x.drafting: x for x in s.shapes}
    assert set(by) == {"most steps drafted", "few steps drafted"}
    for name, x in by.items():
        ws = [w for w in s.windows if (step_info(w).coverage or 0.0) >= 0.5
              ] if name == "most steps drafted" else [
            w for w in s.windows if (step_info(w).coverage or 0.0) < 0.5]
        assert len(ws) == x.requests
        acc = sum(w.accepted_tokens or 0 for w in ws)
        drafts = sum(w.drafts or 0 for w in ws)
        assert x.mal is not None and abs(x.mal - (1 + acc / drafts)) < 1e-12
    # content shows in tokens per step: code far above prose
    most, few = by["most steps drafted"], by["few steps drafted"]
    assert most.tokens_per_step is not None and few.tokens_per_step is not None
    assert most.tokens_per_step > few.tokens_per_step
    d = s.to_dict()
    assert d["mixes"] == "2 request shapes" and len(d["request_shapes"]) == 2
    # llama.cpp counts are exact: no advice about vLLM's missing step counter
    for n in s.notes:
        assert "vLLM" not in (n.remedy or ""), n


def test_the_cli_prints_mal_and_step_rate_in_every_window(capsys) -> None:
    from decodescope.cli.main import main

    assert main(["logs", str(LOG)]) == 0
    out = capsys.readouterr().out
    rows = [ln for ln in out.splitlines() if ln.startswith("-      slot 0")]
    assert len(rows) == len(_printed())
    for ln in rows:
        cells = ln.split()
        assert cells[3] != "-" and cells[4] != "-", ln  # MAL, step/s
    assert "per shape below" in out.splitlines()[0]
    assert sum(1 for ln in out.splitlines() if ln.startswith("  ") and " × 384 output tokens"
               in ln) == 2


def test_drafts_from_mal_only_where_one_whole_number_fits() -> None:
    for acc, gen, mal in _printed():
        d = drafts_from_mal(acc, mal)
        assert d is not None and round(1 + acc / d, 2) == mal and d <= gen
    assert drafts_from_mal(0, 1.0) is None  # nothing accepted: says nothing of the drafts
    assert drafts_from_mal(10_000, 2.0) is None  # 9,951 … 10,050 drafts all print 2.00
    assert drafts_from_mal(7, 2.75) == 4


def test_a_mean_len_line_cut_inside_its_number_is_not_whole() -> None:
    line = ("0.55.553.900 I slot print_timing: id  0 | task 1 | draft acceptance = 0.70065 "
            "(  323 accepted /   461 generated), mean len =  6.57")
    rec = parse(line, Clock(), ParseCounts())
    assert isinstance(rec, LDraft) and rec.mal == 6.57 and complete(line, rec)
    for cut in (line[:-1], line[:-3], line[: line.index("), mean") + 1]):
        r = parse(cut, Clock(), ParseCounts())
        assert isinstance(r, LDraft) and not complete(cut, r), cut


OFF = LOG.parent / "spec_off_code.log"  # the same server restarted without --spec (4 requests)
NP2 = LOG.parent / "ngram_np2_c4.log"  # -np 2, probed at --concurrency 4 (9 requests)


def test_a_log_without_drafts_says_speculative_decoding_is_off() -> None:
    s = analyze_log(str(OFF))
    assert s.windows_total > 0 and all("spec_off" in w.flags for w in s.windows)
    assert s.mal_overall is None
    assert "speculative decoding off (MAL 1)" in s.headline()
    for w in s.windows:  # one token per step: the step rate is the decode rate
        assert step_info(w).rate == w.decode_rate


def test_requests_that_ran_at_once_are_said_and_each_window_is_one_request(capsys) -> None:
    from decodescope.cli.main import main

    s = analyze_log(str(NP2))
    slots = {w.engine_id for w in s.windows}
    assert slots == {"slot 0", "slot 1"}
    assert s.max_at_once == 2 and "up to 2 at once" in s.headline()
    assert main(["logs", str(NP2)]) == 0
    out = capsys.readouterr().out
    assert "decode tok/s (one request)" in out and "(all requests)" not in out


def test_drafts_from_mal_is_bounded_and_unchanged() -> None:
    """A huge accepted count with a MAL near 1 spans ~10**12 candidate draft counts: answered
    (None: several fit) without enumerating them; elsewhere the answer is the enumeration's."""
    import math
    import time

    def enumerate_all(accepted: int, mal: float) -> int | None:
        if accepted <= 0 or mal <= 1.0:
            return None
        lo, hi = mal - 0.005 - 1.0, mal + 0.005 - 1.0
        if hi <= 0:
            return None
        d_min = max(1, math.ceil(accepted / hi - 1e-9))
        d_max = math.floor(accepted / lo + 1e-9) if lo > 0 else d_min + 2
        fits = [d for d in range(d_min, max(d_min, d_max) + 1)
                if round(1.0 + accepted / d, 2) == round(mal, 2)]
        return fits[0] if len(fits) == 1 else None

    t0 = time.process_time()
    assert drafts_from_mal(10 ** 12, 1.01) is None
    assert time.process_time() - t0 < 1.0  # enumerating would take hours and ~TBs
    found = 0
    for acc in range(0, 1500, 7):
        for d in range(1, 300, 11):
            for mal in {round(1 + acc / d, 2), round(1 + acc / d, 2) + 0.01}:
                want = enumerate_all(acc, mal)
                assert drafts_from_mal(acc, mal) == want, (acc, mal)
                found += want is not None
    assert found > 1000
