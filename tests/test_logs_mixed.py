"""A log of two engines or two servers, and stamps going backwards (issue 13 item 8; synthetic
lines). Nothing is dropped silently: both engines are read (auto mode) or the other one's lines
are counted and said (--engine); a jump back in time is counted, located and said."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from decodescope.cli.main import main
from decodescope.telemetry.logs import (
    ParseCounts,
    Selection,
    analyze_log,
    iter_windows,
    parse_time,
    seek,
)
from decodescope.telemetry.logs.synth import access_line, engine_line, spec_line

T0 = datetime(2026, 3, 2, 10, 0, 0).timestamp()


def sglang_line(t: float, tput: float = 160.0) -> str:
    when = datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")
    return (f"[{when} TP0] Decode batch, #running-req: 2, #token: 900, token usage: 0.10, "
            f"accept len: 2.00, accept rate: 0.50, cuda graph: True, gen throughput (token/s): "
            f"{tput:.2f}, #queue-req: 0")


def vllm_lines(i: int, pid: int = 5020, offset: float = 0.0) -> list[str]:
    t = T0 + 10 * (i + 1) + offset
    return [engine_line(t, 150.0 + i % 5, running=2, pid=pid),
            spec_line(t, 300, [200, 150, 90], pid=pid)]


def write(path: Path, lines: list[str]) -> str:
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.fixture()
def logs(tmp_path: Path) -> dict[str, str]:
    v, s, mixed = [], [], []
    for i in range(60):
        vl = vllm_lines(i)
        sl = [sglang_line(T0 + 4 * i + 2)] + ([sglang_line(T0 + 4 * i + 4)] if i % 2 else [])
        v += vl
        s += sl
        mixed += [access_line(40000 + i), *vl, *sl]
    return {"vllm": write(tmp_path / "v.log", v), "sglang": write(tmp_path / "s.log", s),
            "mixed": write(tmp_path / "mixed.log", mixed)}


def test_vllm_and_sglang_interleaved_are_both_read(logs):
    got = list(iter_windows(logs["mixed"], year=2026))
    v = list(iter_windows(logs["vllm"], year=2026))
    s = list(iter_windows(logs["sglang"], year=2026))
    assert [w for w in got if w.engine == "vllm"] == v
    assert [w for w in got if w.engine == "sglang"] == s
    summary = analyze_log(logs["mixed"], year=2026)
    assert summary.windows_total == len(v) + len(s)
    assert {e.engine for e in summary.engines} == {"vllm", "sglang"}
    assert summary.headline().startswith(f"vLLM + SGLang log, {len(v) + len(s)} windows")
    note = next(n for n in summary.notes if n.code == "logs.mixed_engines")
    assert note.severity == "warning" and "--engine vllm" in (note.remedy or "")
    assert f"vLLM: pid 5020 Engine 000 {len(v)} windows; SGLang: TP0" in (note.context or "")


def test_logs_cli_says_two_engines(logs, capsys):
    assert main(["logs", logs["mixed"], "--year", "2026"]) == 0
    out, err = capsys.readouterr()
    assert "2 engines in one log (vLLM and SGLang)" in err
    engines = next(ln for ln in out.splitlines() if ln.startswith("engines: "))
    assert "vLLM Engine 000 (pid 5020) 60" in engines and "SGLang TP0 90" in engines
    assert main(["logs", logs["mixed"], "--year", "2026", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {e["engine"] for e in doc["engines"]} == {"vllm", "sglang"}
    assert "logs.mixed_engines" in [n["code"] for n in doc["notes"]]


def test_with_engine_given_the_other_engine_is_counted_and_said(logs, capsys):
    s = analyze_log(logs["mixed"], engine="vllm", year=2026)
    assert s.windows == analyze_log(logs["vllm"], year=2026).windows
    assert s.lines["other_engine_lines"] == {"sglang": 90}
    note = next(n for n in s.notes if n.code == "logs.other_engine_not_read")
    assert "SGLang 90 lines" in note.cause and "--engine sglang" in (note.remedy or "")
    assert main(["logs", logs["mixed"], "--engine", "sglang", "--year", "2026"]) == 0
    assert "vLLM 60 lines" in capsys.readouterr().err  # its stats lines (the watched keyword)


def test_an_engine_first_seen_mid_block_is_read_whole(tmp_path: Path):
    """llama.cpp's timing block after vLLM lines, in the same read block: the lines after the
    one that revealed it ('total time', 'draft acceptance') are searched for too."""
    block = ("0.01.000.000 I slot print_timing: id  0 | task 5 | \n"
             "prompt eval time =      43.03 ms /     9 tokens (    4.78 ms per token,   209.16 "
             "tokens per second)\n"
             "       eval time =     516.95 ms /    32 tokens (   16.15 ms per token,    61.90 "
             "tokens per second)\n"
             "      total time =     559.98 ms /    41 tokens\n"
             "draft acceptance rate = 0.57576 (   19 accepted /    33 generated)\n"
             "0.01.000.100 I slot      release: id  0 | task 5 | stop processing: n_tokens = "
             "41, truncated = 0\n")
    alone = tmp_path / "l.log"
    alone.write_text(block)
    mixed = tmp_path / "m.log"
    mixed.write_text("\n".join(sum((vllm_lines(i) for i in range(8)), [])) + "\n" + block)
    want = list(iter_windows(str(alone)))
    got = [w for w in iter_windows(str(mixed), year=2026) if w.engine == "llamacpp"]
    assert got == want and want[0].accepted_per_pos is None and want[0].accepted_tokens == 19


def test_two_vllm_servers_interleaved_are_read_per_pid_and_said(tmp_path: Path):
    a = sum((vllm_lines(i, 5020) for i in range(40)), [])
    b = sum((vllm_lines(i, 6060, offset=3.0) for i in range(40)), [])
    both = [x for pair in zip(a[0::2], a[1::2], b[0::2], b[1::2], strict=True) for x in pair]
    ma, mb = write(tmp_path / "a.log", a), write(tmp_path / "b.log", b)
    m = write(tmp_path / "m.log", both)
    got = list(iter_windows(m, year=2026))
    assert [w for w in got if w.printed["pid"] == 5020] == list(iter_windows(ma, year=2026))
    assert [w for w in got if w.printed["pid"] == 6060] == list(iter_windows(mb, year=2026))
    s = analyze_log(m, year=2026)
    note = next(n for n in s.notes if n.code == "logs.servers_mixed")
    assert "2 vLLM servers" in note.cause and "pid 5020: 40 windows" in note.cause


def test_a_restart_is_a_note_not_a_warning(tmp_path: Path):
    lines = sum((vllm_lines(i, 5020) for i in range(20)), []) + \
        sum((vllm_lines(i, 6060, offset=400.0) for i in range(20)), [])
    s = analyze_log(write(tmp_path / "r.log", lines), year=2026)
    codes = {n.code: n.severity for n in s.notes}
    assert codes.get("logs.server_restarted") == "info" and "logs.servers_mixed" not in codes


def test_seek_leaves_a_mixed_log_to_the_sequential_read(logs, monkeypatch):
    monkeypatch.setattr(seek, "SEEK_MIN_BYTES", 1)
    monkeypatch.setattr(seek, "HEAD_BYTES", 2 << 10)
    want = list(iter_windows(logs["mixed"], year=2026))
    assert list(iter_windows(logs["mixed"], year=2026)) == want
    sel = Selection(since=parse_time("10:03"), until=parse_time("10:06"))
    assert seek.seek_windows(logs["mixed"], sel, engine=None, year=2026,
                             counts=ParseCounts()) is None


# ---- timestamps going backwards ------------------------------------------------------------

def backwards_log(tmp_path: Path, jump_s: float = 3600.0) -> tuple[str, int]:
    lines = []
    for i in range(30):
        lines += [access_line(40000 + i), *vllm_lines(i, offset=-jump_s if i >= 20 else 0.0)]
    text = "\n".join(lines) + "\n"
    p = tmp_path / "back.log"
    p.write_text(text)
    return str(p), text.index(vllm_lines(20, offset=-jump_s)[0])


def test_a_jump_back_is_counted_located_and_said(tmp_path: Path, capsys):
    path, offset = backwards_log(tmp_path)
    counts = ParseCounts()
    windows = list(iter_windows(path, year=2026, counts=counts))
    assert len(windows) == 30  # nothing dropped, nothing reordered: line order
    assert [w.t_end_s for w in windows][19:21] == [T0 + 200, T0 + 210 - 3600]
    assert counts.backwards == 1 and counts.backwards_max_s == 3600 - 10
    assert counts.backwards_first is not None and counts.backwards_first[0] == offset
    s = analyze_log(path, year=2026)
    assert s.lines["backwards"]["jumps"] == 1 and s.lines["backwards"]["first"]["offset"] == offset
    note = next(n for n in s.notes if n.code == "logs.time_backwards")
    assert f"byte {offset:,}" in note.cause and "(-3590 s)" in note.cause
    assert main(["logs", path, "--year", "2026"]) == 0
    assert "timestamps go backwards 1 time" in capsys.readouterr().err


def test_small_disorder_is_not_a_jump(tmp_path: Path):
    lines = sum((vllm_lines(i) for i in range(10)), [])
    lines.insert(5, engine_line(T0 + 29, 100.0, running=1, pid=5020, engine=1))  # 1 s late
    counts = ParseCounts()
    list(iter_windows(write(tmp_path / "d.log", lines), year=2026, counts=counts))
    assert counts.backwards == 0
