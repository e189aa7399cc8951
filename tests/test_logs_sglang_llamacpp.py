"""SGLang Decode-batch variants and llama.cpp print_timing blocks (synthetic lines)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from decodescope.telemetry.logs import ParseCounts, analyze_log, iter_windows
from decodescope.telemetry.logs import sglang as S
from decodescope.telemetry.logs.clock import Clock

T = "[2026-04-08 14:05:21 TP0] "


def sg(line: str):
    return S.parse(line, Clock(2026), ParseCounts())


@pytest.mark.parametrize("line", [
    T + "Decode batch. #running-req: 4, #token: 900, token usage: 0.10, accept len: 2.50, "
        "gen throughput (token/s): 200.00, #queue-req: 0, ",
    T + "Decode batch. #running-req: 4, #token: 900, token usage: 0.10, accept len: 2.50, "
        "accept rate: 0.62, cuda graph: True, gen throughput (token/s): 200.00, #queue-req: 0, ",
    T + "Decode batch, #running-req: 4, #token: 900, token usage: 0.10, accept len: 2.50, "
        "accept rate: 0.62, cuda graph: True, gen throughput (token/s): 200.00, #queue-req: 0",
    T + "Decode batch [1234], #running-req: 4, #token: 900, token usage: 0.10, accept len: 2.50, "
        "accept rate: 0.62, cpu graph: False, gen throughput (token/s): 200.00, #queue-req: 0,",
    "[2026-04-08 14:05:21 DP1 TP8] Decode batch, #running-req: 4, #full token: 900, full token "
    "usage: 0.10, #swa token: 100, swa token usage: 0.01, accept len: 2.50, accept rate: 0.62, "
    "npu graph: True, gen throughput (token/s): 200.00, #queue-req: 0",
    "[2026-04-08 14:05:21] Decode batch, #running-req: 4, #token: 900, token usage: 0.10, accept "
    "len: 2.50, pre-allocated usage: 0.00, #prealloc-req: 0, #transfer-req: 0, #retracted-req: 0, "
    "cuda graph: True, gen throughput (token/s): 200.00, largest-len: 4096, #queue-req: 0, ",
])
def test_sglang_decode_variants(line: str):
    r = sg(line)
    assert isinstance(r, S.SDecode)
    assert (r.running, r.gen_tput, r.accept_len, r.waiting) == (4, 200.0, 2.5, 0)
    assert r.t_s == datetime(2026, 4, 8, 14, 5, 21).timestamp()
    assert r.tag in ("TP0", "DP1 TP8", None)


def test_sglang_forward_ct_and_extra_fields_counted():
    counts = ParseCounts()
    r = S.parse(T + "Decode batch [77], #running-req: 2, #token: 9, token usage: 0.01, "
                "mystery: 3, gen throughput (token/s): 50.00, #queue-req: 1", Clock(2026), counts)
    assert isinstance(r, S.SDecode) and r.printed["forward_ct"] == 77
    assert counts.unknown_fields == {"mystery": 1}


def test_sglang_unreadable_line_is_counted(tmp_path: Path):
    p = tmp_path / "s.log"
    p.write_text(T + "Decode batch. #running-req: two, gen throughput (token/s): fast\n"
                 + T + "Decode batch. #running-req: 1, #token: 1, token usage: 0.00, "
                 "gen throughput (token/s): 60.00, #queue-req: 0\n")
    counts = ParseCounts()
    w = list(iter_windows(str(p), counts=counts))
    assert len(w) == 1 and counts.unparsed == {"sglang.decode": 1}


def test_sglang_window_model_and_idle_flag(tmp_path: Path):
    lines = []
    t = datetime(2026, 4, 8, 14, 0, 0).timestamp()
    for i in range(6):
        when = datetime.fromtimestamp(t + i).strftime("%Y-%m-%d %H:%M:%S")
        tput = 1.0 if i == 3 else 160.0  # line 3 follows an idle period: its window is diluted
        lines.append(f"[{when} TP0] Decode batch, #running-req: 2, #token: 1, token usage: 0.0, "
                     f"accept len: 2.00, accept rate: 0.50, cuda graph: True, "
                     f"gen throughput (token/s): {tput:.2f}, #queue-req: 0")
    p = tmp_path / "s.log"
    p.write_text("\n".join(lines) + "\n")
    w = list(iter_windows(str(p)))
    assert w[0].duration_s == pytest.approx(40 * 2 * 2.0 / 160.0)
    assert [("may_include_idle" in x.flags) for x in w] == [False, False, False, True, False, False]
    assert w[0].step_rate == pytest.approx(160.0 / 2 / 2.0)
    s = analyze_log(str(p))
    assert s.decode is not None and s.decode.n == 5 and s.decode.min == 160.0


def test_sglang_decode_log_interval_from_launch_line(tmp_path: Path):
    p = tmp_path / "s.log"
    p.write_text("[2026-04-08 14:00:00] server_args=ServerArgs(model_path='m', "
                 "decode_log_interval=20, tp_size=1)\n" + "".join(
                     T + "Decode batch, #running-req: 1, #token: 1, token usage: 0.0, "
                     "gen throughput (token/s): 100.00, #queue-req: 0\n" for _ in range(2)))
    w = list(iter_windows(str(p)))
    assert w[0].printed["decode_steps"] == 20 and w[0].duration_s == pytest.approx(0.2)


OLD_BLOCK = """\
0.01.000.000 I slot print_timing: id  0 | task 5 | \n\
prompt eval time =      43.03 ms /     9 tokens (    4.78 ms per token,   209.16 tokens per second)
       eval time =     516.95 ms /    32 tokens (   16.15 ms per token,    61.90 tokens per second)
      total time =     559.98 ms /    41 tokens
draft acceptance rate = 0.57576 (   19 accepted /    33 generated)
0.01.000.100 I slot      release: id  0 | task 5 | stop processing: n_tokens = 41, truncated = 0
"""
NEW_BLOCK = """\
0.02.000.000 I slot print_timing: id  0 | task {task} | prompt eval time =     100.00 ms /    10 tokens (   10.00 ms per token,   100.00 tokens per second)
0.02.000.001 I slot print_timing: id  0 | task {task} |        eval time =    1000.00 ms /   {n} tokens (   10.00 ms per token,   100.00 tokens per second)
0.02.000.002 I slot print_timing: id  0 | task {task} |       total time =    1100.00 ms /   110 tokens
0.02.000.003 I slot print_timing: id  0 | task {task} | draft acceptance = 0.50000 (   {a} accepted /   {g} generated), mean acceptance length =  {mal}, acceptance rate per position = (0.600, 0.400)
0.02.000.004 I statistics     draft-simple: #calls(b,g,a) =    1     40     40, #gen drafts =  {gd}, #acc drafts =    30, #gen tokens =  {gt}, #acc tokens =  {at}, #mean acc len = {mal}, #acc rate/pos = (0.600, 0.400), dur(b,g,a) = 0.001, 1.000, 0.100 ms
"""


def test_llamacpp_older_multiline_block(tmp_path: Path):
    p = tmp_path / "l.log"
    p.write_text("srv  update_slots: all slots are idle\n" + OLD_BLOCK
                 + "llama_perf_context_print:        eval time =  100.00 ms /  5 runs\n")
    counts = ParseCounts()
    (w,) = list(iter_windows(str(p), counts=counts))
    assert (w.generation_tokens, w.prompt_tokens, w.accepted_tokens, w.draft_tokens) == (32 - 1, 9, 19, 33)  # eval excludes the 1st token
    assert w.drafts is None and w.mal is None  # older builds print no step count, no MAL
    assert w.decode_rate == pytest.approx((32 - 1) / 0.51695)
    assert counts.unparsed == {}


def test_llamacpp_cumulative_statistics_are_diffed(tmp_path: Path):
    first = NEW_BLOCK.format(task=1, n=100, a=60, g=80, mal="2.50", gd=40, gt=80, at=60)
    # second request: statistics are cumulative over the slot (80+60, 60+45, 40+30)
    second = NEW_BLOCK.format(task=2, n=100, a=45, g=60, mal="2.50", gd=70, gt=140, at=105)
    p = tmp_path / "l.log"
    p.write_text(first + second)
    w = list(iter_windows(str(p)))
    assert [x.drafts for x in w] == [40, 30]
    assert [x.mal for x in w] == [pytest.approx(2.5), pytest.approx(2.5)]
    assert w[0].accepted_per_pos == (24, 16)
    assert [x.printed["task"] for x in w] == [1, 2]
