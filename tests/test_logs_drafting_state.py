"""Absent is unknown (issue 33): a speculative server whose draft statistics are missing for a
window or request (a block cut before its draft line, a paste that lost it, an SGLang line cut
mid-way that kept `accept rate` but lost `accept len`) has no MAL and no step rate there —
never one token per step — while every number the lines do determine is given.

Excerpts: real lines from tests/data/real-logs (sglang_issue_11948.log, llamacpp_pr_24536.log)
and tests/data/llamacpp-embedded (ngram_np2_c4.log), cut or edited as each test says.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from decodescope.telemetry.logs import analyze_log, iter_windows, window_step_rate
from decodescope.telemetry.logs.steps import step_info

DATA = Path(__file__).parent / "data"
SGLANG = (DATA / "real-logs" / "sglang_issue_11948.log").read_text().splitlines()
LLAMA = (DATA / "real-logs" / "llamacpp_pr_24536.log").read_text().splitlines()
NGRAM = (DATA / "llamacpp-embedded" / "ngram_np2_c4.log").read_text().splitlines()
# real lines 2-6 of sglang_issue_11948.log: Decode batch lines with accept len
DECODE = [x for x in SGLANG if "Decode batch" in x][:5]
# SGLang's launch line, synthetic (the real excerpts do not carry one)
CFG = ("[2025-10-22 10:27:40] server_args=ServerArgs(model_path='m', speculative_algorithm={}, "
       "speculative_num_steps=3, decode_log_interval=40, dp_size=1)")


def _write(tmp_path: Path, name: str, lines: list[str]) -> str:
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return str(p)


def _lose_accept_len(line: str) -> str:
    """A paste that lost the `accept len: X, ` field (accept rate kept)."""
    head, _, rest = line.partition("accept len: ")
    return head + rest.split(", ", 1)[1]


def _windows(path: str, engine: str):
    return list(iter_windows(path, engine=engine, year=2025))


def test_sglang_line_that_lost_accept_len_is_unknown_not_one_token_per_step(tmp_path: Path):
    lines = [DECODE[0], DECODE[1], _lose_accept_len(DECODE[2]), DECODE[3], DECODE[4]]
    ws = _windows(_write(tmp_path, "cut.log", lines), "sglang")
    assert len(ws) == 5
    lost = ws[2]
    assert "draft_stats_missing" in lost.flags and "spec_off" not in lost.flags
    assert lost.mal is None and window_step_rate(lost) is None
    assert lost.t_start_s is None  # its span rests on tokens per step: unknown with it
    assert "draft statistics are missing" in step_info(lost).basis
    for w in (ws[1], ws[3], ws[4]):  # determined: MAL = accept len, step = decode / MAL
        assert w.mal == w.printed["mal_reported"] and "draft_stats_missing" not in w.flags
        rate = window_step_rate(w)
        assert rate is not None and w.decode_rate is not None
        assert rate == pytest.approx(w.decode_rate / w.running / w.mal)


def test_sglang_missing_accept_len_before_the_evidence_waits_for_it(tmp_path: Path):
    """The first line lost its whole draft part (accept len and rate); the lines after it
    show drafting: the first is unknown too (evidence later in the log counts)."""
    first = _lose_accept_len(DECODE[0]).replace(" accept rate: 0.54,", "")
    assert "accept" not in first
    ws = _windows(_write(tmp_path, "first.log", [first, *DECODE[1:]]), "sglang")
    assert "draft_stats_missing" in ws[0].flags and window_step_rate(ws[0]) is None
    assert all(window_step_rate(w) is not None for w in ws[1:])


@pytest.mark.parametrize(("algorithm", "want"), [("'EAGLE'", "draft_stats_missing"),
                                                  ("None", "spec_off")])
def test_sglang_launch_config_decides_lines_without_any_draft_field(tmp_path: Path,
                                                                    algorithm: str, want: str):
    no_draft = [_lose_accept_len(x).replace(x.split("accept rate: ")[1].split(", ")[0], "")
                .replace(" accept rate: ,", "") for x in DECODE]
    assert not any("accept" in x for x in no_draft)
    ws = _windows(_write(tmp_path, "cfg.log", [CFG.format(algorithm), *no_draft]), "sglang")
    assert ws and all(want in w.flags for w in ws)
    if want == "spec_off":  # determined: one token per step
        assert all(window_step_rate(w) == pytest.approx(w.decode_rate / w.running)
                   for w in ws if w.decode_rate)
    else:
        assert all(window_step_rate(w) is None and w.mal is None for w in ws)


def test_sglang_without_any_sign_of_drafting_is_off(tmp_path: Path):
    no_draft = [x.split(" accept len")[0] + " cuda graph: True, gen throughput (token/s): "
                + x.split("gen throughput (token/s): ")[1] for x in DECODE]
    ws = _windows(_write(tmp_path, "off.log", no_draft), "sglang")
    assert ws and all("spec_off" in w.flags for w in ws)


def _llama_requests(cut_first: bool) -> list[str]:
    """Two requests: the real block of llamacpp_pr_24536.log as task 0 and again as task 9
    (task id and elapsed stamps edited); task 0 cut before its draft line when asked."""
    block = [x for x in LLAMA if "task 0" in x or "statistics" in x]
    first = [x for x in block if not (cut_first and ("draft acceptance" in x
                                                    or "statistics" in x))]
    second = [x.replace("task 0", "task 9").replace("0.06.", "0.09.") for x in block]
    return first + second


def test_llamacpp_request_cut_before_its_draft_line_is_unknown(tmp_path: Path):
    ws = _windows(_write(tmp_path, "cut.log", _llama_requests(cut_first=True)), "llamacpp")
    assert len(ws) == 2
    cut, whole = ws
    assert "draft_stats_missing" in cut.flags and "spec_off" not in cut.flags
    assert cut.mal is None and window_step_rate(cut) is None
    # determined: 255 tokens after the first, 167 accepted, 87 drafts (statistics line)
    assert whole.drafts == 87 and whole.mal == pytest.approx(1 + 167 / 87)
    assert window_step_rate(whole) == pytest.approx(88 / 2.29672)
    s = analyze_log(_write(tmp_path, "cut2.log", _llama_requests(cut_first=True)), year=2025)
    codes = {n.code for n in s.notes}
    assert "logs.draft_stats_missing" in codes
    assert s.step_rate is not None and s.step_rate.n == 1  # the cut request is not counted


def test_llamacpp_whole_requests_are_read_as_before(tmp_path: Path):
    ws = _windows(_write(tmp_path, "whole.log", _llama_requests(cut_first=False)), "llamacpp")
    assert [w.drafts for w in ws] == [87, 87]
    assert not any("draft_stats_missing" in w.flags or "spec_off" in w.flags for w in ws)


def test_llamacpp_ngram_paste_that_lost_a_draft_line(tmp_path: Path):
    """ngram_np2_c4.log (embedded llama.cpp, n-gram): the first request's draft line lost in
    the paste; the other requests print theirs."""
    i = next(i for i, x in enumerate(NGRAM) if "draft acceptance" in x)
    lines = NGRAM[:i] + NGRAM[i + 1:]
    ws = _windows(_write(tmp_path, "ngram.log", lines), "llamacpp")
    assert "draft_stats_missing" in ws[0].flags and window_step_rate(ws[0]) is None
    assert all("draft_stats_missing" not in w.flags and w.mal is not None for w in ws[1:])


def test_llamacpp_log_without_drafts_is_off():
    ws = _windows(str(DATA / "llamacpp-embedded" / "spec_off_code.log"), "llamacpp")
    assert ws and all("spec_off" in w.flags for w in ws)
    assert all(window_step_rate(w) is not None for w in ws)


def test_follow_mode_holds_no_window_for_later_evidence():
    """--follow prints windows as they come: with nothing said yet, a line without any draft
    field goes out at once (off, as far as the log has said); a whole read waits for the
    evidence after it."""
    from decodescope.telemetry.logs.clock import Clock
    from decodescope.telemetry.logs.lines import LineReader
    from decodescope.telemetry.logs.parse_counts import ParseCounts

    bare = [x.split(" accept len")[0] + " cuda graph: True, gen throughput (token/s): "
            + x.split("gen throughput (token/s): ")[1] for x in DECODE[:2]]
    lines = [*bare, DECODE[2]]
    for live, held in ((True, False), (False, True)):
        lr = LineReader("sglang", Clock(2025), ParseCounts(), live=live)
        out = [w for x in lines[:2] for w in lr.feed(x.encode())]
        assert (not out) is held
        if live:
            assert "spec_off" in out[0].flags
        else:
            out += lr.feed(lines[2].encode()) + lr.flush()
            assert "draft_stats_missing" in out[0].flags
