"""Input integrity of the log reader (issue 22): a line cut mid-number is never read as a
number, 0 running is never read as 1, the stats interval is measured over the whole read,
NaN lines and doubled llama.cpp logs are de-duplicated, over-long lines and gzip bombs are
skipped in bounded memory. Built on the real logs (tests/data/real-logs) and generated ones."""

from __future__ import annotations

import gzip
import math
import tracemalloc
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from decodescope.telemetry.logs import ParseCounts, analyze_log, iter_windows
from decodescope.telemetry.logs import reader as reader_mod
from decodescope.telemetry.logs.steps import step_info
from decodescope.telemetry.logs.synth import engine_line, spec_line

DATA = Path(__file__).parent / "data" / "real-logs"
REAL = sorted(DATA.glob("*.log"))
T0 = datetime(2026, 9, 15, 12, 0, 0).timestamp()


def _key(w: Any) -> tuple[Any, ...]:
    """Every number a window carries."""
    def f(x: float | None) -> Any:
        return None if x is None else ("nan" if isinstance(x, float) and math.isnan(x) else x)
    return (w.engine, w.engine_id, f(w.t_start_s), f(w.t_end_s), w.generation_tokens,
            w.prompt_tokens, w.drafts, w.draft_tokens, w.accepted_tokens, w.accepted_per_pos,
            f(w.running), f(w.waiting), f(w.decode_rate), f(w.mal))


def _windows(path: Path, counts: ParseCounts | None = None) -> list[tuple[Any, ...]]:
    return [_key(w) for w in iter_windows(str(path), year=2026, counts=counts)]


def _sglang_trailing(tmp: Path) -> Path:
    """SGLang lines that end with `#queue-req: N, ` (the format where a whole last line can be
    told from a cut one)."""
    lines = [f"[2026-09-15 12:00:{s:02d} TP0] Decode batch, #running-req: 3, #token: {900 + s}, "
             f"token usage: 0.01, accept len: 2.{s % 10}5, accept rate: 0.5{s % 10}, cuda graph: "
             f"True, gen throughput (token/s): 1{s}6.4{s % 10}, #queue-req: 1{s % 3}, "
             for s in range(0, 50, 2)]
    p = tmp / "sglang_trailing.log"
    p.write_text("\n".join(lines) + "\n")
    return p


@pytest.mark.parametrize("name", [p.name for p in REAL] + ["sglang_trailing"])
def test_a_cut_last_line_never_gives_a_number(tmp_path: Path, name: str):
    """Cut the log at EVERY byte of its last line: the windows are those of the log without
    that line, or (the line whole, only its newline missing) those of the whole log — never a
    window with a number from a cut line; a cut stats line is counted."""
    src = _sglang_trailing(tmp_path) if name == "sglang_trailing" else DATA / name
    lines = src.read_bytes().rstrip(b"\n").split(b"\n")
    p = tmp_path / "cut.log"
    # the file as it was when its last line that carries numbers was being written
    for i in range(len(lines) - 1, -1, -1):
        head, last = b"".join(x + b"\n" for x in lines[:i]), lines[i]
        p.write_bytes(head)
        without = _windows(p)
        p.write_bytes(head + last + b"\n")
        whole = _windows(p)
        if whole != without:
            break
    assert whole != without  # a line carries numbers
    cut_counted = 0
    for n in range(len(last) + 1):
        p.write_bytes(head + last[:n])
        counts = ParseCounts()
        got = _windows(p, counts)
        complete = not last[n:].strip(b" ,\r")  # only its trailing separator missing
        assert got == without or (complete and got == whole), (n, last[:n])
        cut_counted += counts.cut_lines
        if not complete and got != without:
            pytest.fail(f"cut at byte {n} gave numbers")
    assert cut_counted > 0


def test_cut_line_is_said(tmp_path: Path):
    p = tmp_path / "v.log"
    p.write_text(engine_line(T0, 826.0, running=9) + "\n" + spec_line(T0, 300, [200, 150, 100])
                 + "\n" + engine_line(T0 + 10, 3399.1, running=106)[:-40])
    s = analyze_log(str(p), year=2026)
    assert s.lines["cut_lines"] == 1
    assert any(n.code == "logs.cut_line" for n in s.notes)
    assert s.decode is not None and s.decode.max == pytest.approx(826.0, abs=0.1)


def test_follow_never_reads_the_growing_tail(tmp_path: Path):
    p = tmp_path / "live.log"
    whole = engine_line(T0 + 10, 3399.1, running=106)
    cut = whole[:whole.index("Running: ") + len("Running: 10")]
    p.write_text(engine_line(T0, 826.0, running=9) + "\n" + cut)
    counts = ParseCounts()
    ws = list(iter_windows(str(p), year=2026, follow=True, stop=lambda: True, poll_s=0.0,
                           counts=counts, sleep=lambda _: None))
    assert [w.running for w in ws] == [9]
    assert counts.cut_lines == 1


def test_zero_running_is_not_one(tmp_path: Path):
    """`Running: 0 reqs` with tokens (requests that started and ended in the window): running
    stays 0 and the per-request step rate is withheld with its reason."""
    lines = []
    for i in range(12):
        t = T0 + 10 * i
        run = 0 if i % 3 == 0 else 2
        lines += [engine_line(t, 120.0, running=run), spec_line(t, 400, [300, 200, 100])]
    p = tmp_path / "zero.log"
    p.write_text("\n".join(lines) + "\n")
    ws = list(iter_windows(str(p), year=2026))
    zero = [w for w in ws if w.running == 0]
    assert len(zero) == 4
    for w in zero:
        info = step_info(w)
        assert info.rate is None and info.zero_running and "0 running" in info.basis
    for w in ws:
        if w.running:
            assert step_info(w).rate is not None
    s = analyze_log(str(p), year=2026)
    assert s.windows_zero_running == 4
    assert s.running is not None and s.running.min == 0
    assert s.step_rate is not None and s.step_rate.n == 8
    assert any(n.code == "logs.zero_running" for n in s.notes)


def _spaced(times: list[float], tput: float = 100.0) -> str:
    return "".join(engine_line(t, tput, running=2) + "\n" for t in times)


def test_interval_not_guessed_from_the_first_lines(tmp_path: Path):
    """First four lines 30 s apart (idle intervals hidden between them), then 10 s: read at
    10 s where the lines are 10 s apart; windows never overlap; the interval is said."""
    times = [T0 + 30 * i for i in range(4)] + [T0 + 90 + 10 * i for i in range(1, 30)]
    p = tmp_path / "iv.log"
    p.write_text(_spaced(times))
    ws = list(iter_windows(str(p), year=2026))
    assert len(ws) == len(times)
    for a, b in zip(ws, ws[1:], strict=False):
        assert b.t_start_s is not None and a.t_end_s is not None and b.t_start_s >= a.t_end_s
    for w in ws[4:]:
        assert w.duration_s == pytest.approx(10.0)
        assert w.generation_tokens == round(100.0 * 10)
    s = analyze_log(str(p), year=2026)
    assert s.idle_gap_count >= 3  # the hidden idle intervals between the first lines
    assert any(n.code == "logs.interval" and "10 s" in n.cause for n in s.notes)


def test_interval_change_is_said(tmp_path: Path):
    """30 s for long enough to be decided, then 10 s (a restart with another interval, same
    pid and engine): windows after the change read 10 s and the change is said."""
    times = [T0 + 30 * i for i in range(12)] + [T0 + 330 + 10 * i for i in range(1, 20)]
    p = tmp_path / "ch.log"
    p.write_text(_spaced(times))
    ws = list(iter_windows(str(p), year=2026))
    assert all(w.duration_s == pytest.approx(30.0) for w in ws[:12])
    assert all(w.duration_s == pytest.approx(10.0) for w in ws[12:])
    assert sum("interval_changed" in w.flags for w in ws) == 1
    s = analyze_log(str(p), year=2026)
    assert any(n.code == "logs.interval_changed" for n in s.notes)


NAN_SPEC = ("(APIServer pid=5020) INFO {stamp} [metrics.py:101] SpecDecoding metrics: Mean "
            "acceptance length: 1.00, Accepted throughput: 0.00 tokens/s, Drafted throughput: "
            "0.00 tokens/s, Accepted: 0 tokens, Drafted: 0 tokens, Per-position acceptance rate: "
            "nan, nan, nan, Avg Draft acceptance rate: nan%")


def test_nan_lines_are_recognised_as_duplicates(tmp_path: Path):
    once, twice = [], []
    for i in range(10):
        t = T0 + 10 * i
        stamp = datetime.fromtimestamp(t).strftime("%m-%d %H:%M:%S")
        pair = [engine_line(t, 50.0, running=1), NAN_SPEC.format(stamp=stamp)]
        once += pair
        twice += [x for x in pair for _ in range(2)]
    a, b = tmp_path / "once.log", tmp_path / "twice.log"
    a.write_text("\n".join(once) + "\n")
    b.write_text("\n".join(twice) + "\n")
    counts = ParseCounts()
    assert _windows(b, counts) == _windows(a)
    assert counts.duplicates == 20


def test_doubled_llamacpp_log_keeps_requests_and_mal(tmp_path: Path):
    src = (DATA / "llamacpp_pr_24536.log").read_text().splitlines()
    p = tmp_path / "twice.log"
    p.write_text("".join(line + "\n" + line + "\n" for line in src))
    counts = ParseCounts()
    assert _windows(p, counts) == _windows(DATA / "llamacpp_pr_24536.log")
    assert counts.duplicates == 6  # prompt eval, eval, total, draft, statistics, release
    s = analyze_log(str(p))
    assert s.windows_total == 1 and s.mal_overall == pytest.approx(1 + 167 / 87)
    assert s.lines["duplicates"] == 6


def test_llamacpp_block_pasted_twice_is_read_once_and_the_copy_memory_stays_bounded(
        tmp_path: Path):
    """A request's lines copied after themselves (not line by line: a paste of the block) are
    copies by their elapsed stamps; the records remembered for that stay DUP_RECENT."""
    from decodescope.telemetry.logs.clock import Clock
    from decodescope.telemetry.logs.lines import DUP_RECENT, LineReader
    from decodescope.telemetry.logs.reader import read_lines

    src = (DATA / "llamacpp_pr_24536.log").read_text()
    p = tmp_path / "pasted.log"
    p.write_text(src + src)
    counts = ParseCounts()
    assert _windows(p, counts) == _windows(DATA / "llamacpp_pr_24536.log")
    assert counts.duplicates == 6
    many = tmp_path / "many.log"
    many.write_text("".join("\n".join(_llama_block(t, 40, 20, 30, 10, stats_last=False,
                                                   mal_line=True)) + "\n"
                            for t in range(1, 40)))
    c = ParseCounts()
    lr = LineReader("llamacpp", Clock(2026), c)
    n = sum(len(lr.feed(raw)) for raw in read_lines(str(many), lr.keywords, c))
    n += len(lr.flush())
    assert n == 39 and c.duplicates == 0
    assert len(lr._recent) == DUP_RECENT


def test_llamacpp_copies_at_the_newest_stamp_and_at_an_older_one_are_both_read_once(
        tmp_path: Path):
    """The elapsed stamp counts up: a block pasted right after itself (its lines at the newest
    stamp) and one pasted after a later request (an older stamp) are both copies; a server
    restarted in the same log (its stamps from 0 again) gives new requests, never copies."""
    from decodescope.telemetry.logs.clock import Clock
    from decodescope.telemetry.logs.lines import DUP_RECENT, LineReader
    from decodescope.telemetry.logs.reader import read_lines

    def block(task: int) -> str:
        return "\n".join(_llama_block(task, 40, 20, 30, 10, stats_last=False,
                                      mal_line=True)) + "\n"

    once = tmp_path / "once.log"
    once.write_text(block(1) + block(2))
    pasted = tmp_path / "pasted.log"
    pasted.write_text(block(1) + block(1) + block(2) + block(1))
    c1, c2 = ParseCounts(), ParseCounts()
    assert _windows(pasted, c2) == _windows(once, c1)
    per_block = c1.lines_parsed // 2
    assert c2.duplicates == 2 * per_block and c2.lines_parsed == c1.lines_parsed
    restarted = tmp_path / "restarted.log"
    restarted.write_text(block(1) + block(2) + block(1).replace("task 1 ", "task 9 ")
                         .replace("0.11.000.001 ", "0.05.000.001 "))
    c3 = ParseCounts()
    assert len(_windows(restarted, c3)) == 3 and c3.duplicates == 0
    # many records at one stamp: what is remembered of them stays bounded
    one_stamp = tmp_path / "one_stamp.log"
    one_stamp.write_text("".join(
        "\n".join(ln.replace(f"0.{10 + t:02d}.000.{t:03d} ", "0.50.000.000 ")
                  for ln in _llama_block(t, 40, 20, 30, 10 + t, stats_last=False,
                                         mal_line=True)) + "\n" for t in range(1, 41)))
    c = ParseCounts()
    lr = LineReader("llamacpp", Clock(2026), c)
    n = sum(len(lr.feed(raw)) for raw in read_lines(str(one_stamp), lr.keywords, c))
    assert n + len(lr.flush()) == 40 and c.duplicates == 0
    assert len(lr._at_newest) <= DUP_RECENT


def _llama_block(task: int, n: int, acc: int, gen: int, drafts: int, *, stats_last: bool,
                 mal_line: bool) -> list[str]:
    e = f"0.{10 + task:02d}.000.{task:03d} I "
    pre = f"{e}slot print_timing: id  0 | task {task} | "
    draft = (f"{pre}draft acceptance = {acc / gen:.5f} ({acc:5d} accepted / {gen:5d} generated)"
             + (f", mean acceptance length = {1 + acc / drafts:.2f}, acceptance rate per "
                "position = (0.900, 0.800)" if mal_line else ""))
    stats = (f"{e}statistics     draft-mtp: #calls(b,g,a) =    1 {drafts:6d} {drafts:6d}, "
             f"#gen drafts = {drafts:6d}, #acc drafts = {drafts - 2:6d}, #gen tokens = "
             f"{gen:6d}, #acc tokens = {acc:6d}, #mean acc len = {1 + acc / drafts:.2f}, "
             "dur(b,g,a) = 0.005, 12.000, 0.100 ms")
    release = f"{e}slot      release: id  0 | task {task} | stop processing: n_tokens = 99"
    lines = [f"{pre}prompt eval time =      30.00 ms /    20 tokens (    1.50 ms per token,   "
             "666.67 tokens per second)",
             f"{pre}       eval time =     500.00 ms /  {n:5d} tokens (    8.77 ms per token, "
             f"  {n / 0.5:.2f} tokens per second)",
             f"{pre}      total time =     530.00 ms /  {n + 20:5d} tokens", draft]
    return lines + ([release, stats] if stats_last else [stats, release])


@pytest.mark.parametrize("stats_last", [False, True])
@pytest.mark.parametrize("mal_line", [False, True])
def test_llamacpp_steps_exclude_the_first_token(tmp_path: Path, stats_last: bool,
                                                mal_line: bool):
    """57 tokens printed: 56 generated in the eval time = 20 steps + 36 accepted; 18 drafts
    (the draft-mtp statistics line, matching the draft line's counts) -> 90 % drafted, MAL
    1 + 36/18 reported, step rate 20 steps / 0.5 s."""
    p = tmp_path / "l.log"
    p.write_text("\n".join(_llama_block(1, 57, 36, 40, 18, stats_last=stats_last,
                                        mal_line=mal_line)) + "\n")
    (w,) = list(iter_windows(str(p)))
    assert w.generation_tokens == 56 and w.drafts == 18 and w.accepted_tokens == 36
    info = step_info(w)
    assert info.coverage == pytest.approx(18 / 20)
    assert info.rate == pytest.approx(20 / 0.5)
    s = analyze_log(str(p))
    assert s.mal_overall == pytest.approx(1 + 36 / 18)
    assert s.draft_coverage == pytest.approx(0.9)
    assert "MAL 3.00" in s.headline()


def test_over_long_line_is_skipped_in_bounded_memory(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(reader_mod, "MAX_LINE_BYTES", 256 << 10)
    good = "".join(engine_line(T0 + 10 * i, 100.0, running=2) + "\n" for i in range(10))
    p = tmp_path / "long.log"
    with open(p, "w") as f:
        f.write(good)
        f.write("Avg prompt throughput: " + "9" * (24 << 20))  # 24 MB, no newline
        f.write("\n" + good.replace("12:0", "13:0"))
    counts = ParseCounts()
    tracemalloc.start()
    ws = list(iter_windows(str(p), year=2026, counts=counts))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(ws) == 20 and counts.long_lines == 1
    assert peak < 8 << 20  # the 24 MB line was never held


def test_gzip_bomb_without_newline_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(reader_mod, "MAX_LINE_BYTES", 256 << 10)
    p = tmp_path / "bomb.log.gz"
    good = "".join(engine_line(T0 + 10 * i, 100.0, running=2) + "\n" for i in range(10))
    with gzip.open(p, "wb") as f:
        f.write(good.encode())
        zeros = b"\0" * (1 << 20)
        for _ in range(64):  # 64 MiB without a newline, a small file
            f.write(zeros)
    assert p.stat().st_size < 1 << 20
    counts = ParseCounts()
    tracemalloc.start()
    ws = list(iter_windows(str(p), year=2026, counts=counts))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(ws) == 10 and counts.long_lines == 1
    assert peak < 16 << 20
    s = analyze_log(str(p), year=2026)
    assert any(n.code == "logs.long_lines" for n in s.notes)


def test_sglang_steps_per_line_assumed_is_said(tmp_path: Path):
    s = analyze_log(str(DATA / "sglang_issue_3909.log"))
    assert any(n.code == "logs.sglang_interval_assumed" and "40 decode steps" in n.cause
               for n in s.notes)
    p = tmp_path / "with_launch.log"
    p.write_text("[2025-02-27 04:46:00] server_args=ServerArgs(decode_log_interval=20)\n"
                 + (DATA / "sglang_issue_3909.log").read_text())
    s = analyze_log(str(p))
    assert not any(n.code == "logs.sglang_interval_assumed" for n in s.notes)
    assert s.spec["decode_log_interval"] == 20


def test_probe_log_tail_never_reads_the_growing_tail(tmp_path: Path):
    """`probe --log FILE` follows with the same follower: lines written during the probe are
    read from the size the log had, the unfinished last line is not read for numbers."""
    import threading

    from decodescope.run.observers import default_follow

    p = tmp_path / "engine.log"
    p.write_text(engine_line(T0 - 10, 55.0, running=1) + "\n")  # before the probe
    offset = p.stat().st_size
    whole = engine_line(T0 + 10, 3399.1, running=106)
    with open(p, "a") as f:
        f.write(engine_line(T0, 826.0, running=9) + "\n" + whole[:whole.index("Running: ") + 11])
    stop = threading.Event()
    stop.set()  # read what is there, then end
    ws = list(default_follow("vllm", 0.0)(str(p), offset, stop))
    assert [w.running for w in ws] == [9]
