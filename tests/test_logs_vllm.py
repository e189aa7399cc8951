"""vLLM log lines: every format variant, prefixes, ANSI, DP, pairing, intervals, garbage."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from decodescope.telemetry.logs import ParseCounts, analyze_log, iter_windows
from decodescope.telemetry.logs import vllm as V
from decodescope.telemetry.logs.clock import Clock
from decodescope.telemetry.logs.fields import split_fields
from decodescope.telemetry.logs.parse_counts import Unparsed
from decodescope.telemetry.logs.synth import access_line, engine_line, spec_line

T0 = datetime(2026, 9, 15, 23, 30, 0).timestamp()


def write(tmp_path: Path, lines: list[str], name: str = "engine.log") -> str:
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return str(p)


def parse(line: str):
    return V.parse(line, Clock(2026), ParseCounts())


def seed_log(n: int = 6, interval: float = 10.0, per_pos: tuple[int, ...] = (40, 30, 20),
             drafts: int = 50) -> list[str]:
    lines = []
    for i in range(1, n + 1):
        t = T0 + i * interval
        lines.append(access_line(40000 + i))
        lines.append(engine_line(t, (drafts + sum(per_pos)) / interval, running=1))
        lines.append(spec_line(t, drafts, list(per_pos), interval_s=interval))
    return lines


def test_seed_like_log_windows(tmp_path: Path):
    w = list(iter_windows(write(tmp_path, seed_log()), year=2026))
    assert len(w) == 6
    for i, x in enumerate(w, 1):
        assert x.t_end_s == T0 + 10 * i and x.t_start_s == T0 + 10 * (i - 1)
        assert (x.drafts, x.accepted_tokens, x.draft_tokens) == (50, 90, 150)
        assert x.accepted_per_pos == (40, 30, 20)
        assert x.generation_tokens == 140 and x.mal == pytest.approx(2.8)
        assert x.step_rate == pytest.approx(5.0) and x.engine_id == "Engine 000"
        assert not x.flags


def test_v1_variants_by_field_name():
    a = parse("INFO 04-01 10:00:00 [metrics.py:80] Speculative metrics: Draft acceptance rate: "
              "0.500, Number of accepted tokens: 30, Number of draft tokens: 60, ")
    b = parse("INFO 04-01 10:00:00 [metrics.py:80] SpecDecoding metrics: Draft acceptance rate: "
              "50.0%, Accepted: 30 tokens, Drafted: 60 tokens")
    c = parse("INFO 05-01 10:00:00 [metrics.py:80] SpecDecoding metrics: Draft acceptance rate: "
              "50.0%, Mean acceptance length: 2.50, Accepted: 30 tokens, Drafted: 60 tokens, "
              "Per-position acceptance rate: 0.900, 0.600")
    c2 = parse("INFO 09-02 10:00:00 [metrics.py:80] SpecDecoding metrics: Draft acceptance rate: "
               "50.0%, Mean acceptance length: 2.50, Accepted throughput: 3.00 tokens/s, Drafted "
               "throughput: 6.00 tokens/s, Accepted: 30 tokens, Drafted: 60 tokens, Per-position "
               "acceptance rate: 0.900, 0.600")
    d = parse(spec_line(T0, 20, [18, 12]))
    variants = [r.variant for r in (a, b, c, c2, d)]
    assert variants == ["v1-a", "v1-b", "v1-c", "v1-c'", "v1-d"]
    for r in (a, b, c, c2, d):
        assert isinstance(r, V.VSpec) and (r.accepted, r.drafted) == (30, 40 if r is d else 60)
    assert c.per_pos == (0.9, 0.6) and c.mal_printed == 2.5
    assert b.printed["draft_acceptance_rate_pct"] == 50.0
    assert a.printed["draft_acceptance_rate"] == 0.5


def test_fast_path_equals_field_parser():
    """The one-regex fast path and the field-by-name parser give the same record."""
    stats = engine_line(T0, 1004.4, prompt_tput=3279.0, running=8, waiting=7, kv_pct=82.5)
    spec = spec_line(T0, 3627, [3369, 3047])
    for line, name in ((stats, "_FAST_STATS"), (spec, "_FAST_SPEC")):
        fast = parse(line)
        assert getattr(V, name).search(line) is not None
        slow = parse(line + ", Extra: 1")  # any deviation takes the field parser
        assert fast == slow


def test_v0_stats_and_early_v1_and_newest_optional_fields():
    v0 = parse("INFO 04-08 10:43:07 metrics.py:455] Avg prompt throughput: 33127.2 tokens/s, "
               "Avg generation throughput: 238.0 tokens/s, Running: 4 reqs, Swapped: 0 reqs, "
               "Pending: 2 reqs, GPU KV cache usage: 0.3%, CPU KV cache usage: 0.0%.")
    assert isinstance(v0, V.VStats) and v0.variant == "v0" and v0.waiting == 2
    early = parse("INFO 03-20 10:00:00 [loggers.py:87] Avg prompt throughput: 0.0 tokens/s, Avg "
                  "generation throughput: 50.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU "
                  "KV cache usage: 1.0%, Prefix cache hit rate: 0.0%")
    assert isinstance(early, V.VStats) and early.variant == "v1-early" and early.engine_id is None
    new = parse(engine_line(T0, 100.0, running=3, extra=", Corrupted: 0 reqs, External prefix "
                            "cache hit rate: 12.0%, MM cache hit rate: 50.0%").replace(
        "Waiting: 0 reqs,", "Waiting: 0 reqs, Deferred: 2 reqs, Preemptions: 1,"))
    assert isinstance(new, V.VStats)
    assert new.printed["deferred"] == 2 and new.printed["preemptions"] == 1
    assert new.printed["external_prefix_cache_hit_rate_pct"] == 12.0
    assert new.printed["mm_cache_hit_rate_pct"] == 50.0 and new.printed["corrupted"] == 0


def test_prefixes_ansi_and_docker_stamps():
    base = engine_line(T0, 100.0)
    msg = base[base.index("INFO"):]
    for line in (base, msg, "\x1b[32m" + base.replace("INFO", "INFO\x1b[0m"),
                 "2026-09-15T23:30:00.123456789Z " + base):
        text = line.replace("\x1b[32m", "").replace("\x1b[0m", "")
        rec = parse(text)
        assert isinstance(rec, V.VStats) and rec.t_s == T0 and rec.gen_tput == 100.0


def test_ansi_coloured_file(tmp_path: Path):
    lines = [f"\x1b[32m{ln}\x1b[0m" for ln in seed_log(3)]
    w = list(iter_windows(write(tmp_path, lines), year=2026))
    assert [x.mal for x in w] == [pytest.approx(2.8)] * 3


def test_dp_engines_pair_with_their_own_spec_line(tmp_path: Path):
    lines = []
    for i in range(1, 5):
        t = T0 + 10 * i
        lines += [engine_line(t, 200.0, engine=0, running=2), spec_line(t, 100, [60, 40]),
                  engine_line(t, 50.0, engine=1, running=1)]  # engine 1 drafted nothing
    w = list(iter_windows(write(tmp_path, lines), year=2026))
    e0 = [x for x in w if x.engine_id == "Engine 000"]
    e1 = [x for x in w if x.engine_id == "Engine 001"]
    assert len(e0) == len(e1) == 4
    assert all(x.drafts == 100 and x.mal == pytest.approx(2.0) for x in e0)
    assert all(x.drafts is None for x in e1)
    s = analyze_log(write(tmp_path, lines), year=2026)
    assert {(e.engine_id, e.windows) for e in s.engines} == {("Engine 000", 4), ("Engine 001", 4)}


def test_aggregated_prefix(tmp_path: Path):
    lines = [engine_line(T0 + 10 * i, 300.0).replace("Engine 000:", "4 Engines Aggregated:")
             for i in range(1, 4)]
    w = list(iter_windows(write(tmp_path, lines), year=2026))
    assert [x.engine_id for x in w] == ["4 Engines Aggregated"] * 3
    assert w[0].generation_tokens == 3000


def test_interval_inferred_from_spacing_5s(tmp_path: Path):
    w = list(iter_windows(write(tmp_path, seed_log(5, interval=5.0)), year=2026))
    assert all(x.duration_s == 5.0 for x in w) and w[0].generation_tokens == 140
    assert not any("interval_default" in x.flags for x in w)


def test_idle_gaps_and_idle_windows(tmp_path: Path):
    lines = seed_log(3)
    lines.append(engine_line(T0 + 40, 0.0, running=0))  # first idle interval is printed
    # 20:00 of silence (idle lines are suppressed), then activity again
    for i in range(5):
        t = T0 + 160 + 10 * i
        lines += [engine_line(t, 14.0), spec_line(t, 50, [40, 30, 20])]
    s = analyze_log(write(tmp_path, lines), year=2026)
    assert s.windows_total == 9 and s.windows_idle == 1
    assert s.idle_gap_count == 1 and s.idle_gaps[0].seconds == 110.0
    assert s.decode is not None and s.decode.n == 8 and s.decode.min == 14.0
    assert s.mal_overall == pytest.approx(2.8)


def test_unknown_fields_and_fork_suffixes_are_ignored_and_counted(tmp_path: Path):
    lines = [engine_line(T0 + 10, 14.0, extra=", Frobnication: 7 widgets"),
             spec_line(T0 + 10, 50, [40, 30, 20]) + ", Rejected: 3 tokens, top-1 hits 9",
             engine_line(T0 + 20, 14.0), spec_line(T0 + 20, 50, [40, 30, 20])]
    counts = ParseCounts()
    w = list(iter_windows(write(tmp_path, lines), year=2026, counts=counts))
    assert [x.accepted_per_pos for x in w] == [(40, 30, 20)] * 2
    assert counts.unknown_fields == {"Frobnication": 1, "Rejected": 1}
    assert sum(counts.unparsed.values()) == 0


def test_garbage_lines_are_counted_never_fatal(tmp_path: Path):
    lines = ["", "\x00\xff binary junk", "INFO 13-45 99:99:99 Avg prompt throughput: lots",
             "Speculative metrics: nothing here", "SpecDecoding metrics: Accepted: x tokens",
             "(APIServer pid=1) INFO 09-15 23:30:10 [loggers.py:271] Engine 000: Avg prompt "
             "throughput: 1.0 tokens/s, Avg generation throughput: nan tokens/s",
             *seed_log(2)]
    p = tmp_path / "g.log"
    p.write_bytes("\n".join(lines).encode("utf-8", "surrogateescape") + b"\n\xfe\xfd")
    counts = ParseCounts()
    w = list(iter_windows(str(p), year=2026, counts=counts))
    assert len(w) == 2
    assert counts.unparsed == {"vllm.stats": 2, "vllm.spec": 2}
    assert counts.bytes_read == p.stat().st_size


def test_year_rollover_and_mtime(tmp_path: Path):
    lines = [engine_line(datetime(2025, 12, 31, 23, 59, 50).timestamp(), 10.0),
             engine_line(datetime(2026, 1, 1, 0, 0, 0).timestamp(), 10.0),
             engine_line(datetime(2026, 1, 1, 0, 0, 10).timestamp(), 10.0)]
    path = write(tmp_path, lines)
    w = list(iter_windows(path, year=2025))
    assert [datetime.fromtimestamp(x.t_end_s or 0).year for x in w] == [2025, 2026, 2026]
    import os
    os.utime(path, (datetime(2026, 1, 1, 0, 1).timestamp(),) * 2)
    w2 = list(iter_windows(path))  # year from mtime: the last line is in 2026
    assert [x.t_end_s for x in w2] == [x.t_end_s for x in w]


def test_k_from_launch_config_for_v1_b(tmp_path: Path):
    lines = ["INFO 04-02 10:00:00 [core.py:58] Initializing a V1 LLM engine with config: "
             "speculative_config=SpeculativeConfig(method='eagle', num_spec_tokens=3)"]
    for i in range(1, 4):
        stamp = f"04-02 10:00:{10 * i:02d}"
        lines += [f"INFO {stamp} [loggers.py:87] Engine 000: Avg prompt throughput: 0.0 tokens/s,"
                  " Avg generation throughput: 20.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, "
                  "GPU KV cache usage: 1.0%, Prefix cache hit rate: 0.0%",
                  f"INFO {stamp} [metrics.py:80] SpecDecoding metrics: Draft acceptance rate: "
                  "66.7%, Accepted: 100 tokens, Drafted: 150 tokens"]
    w = list(iter_windows(write(tmp_path, lines), year=2026))
    assert [x.drafts for x in w] == [50] * 3 and w[0].mal == pytest.approx(3.0)
    assert "k_from_config" in w[0].flags
    # without the config line, MAL is unknown (None), not guessed
    w2 = list(iter_windows(write(tmp_path, lines[1:], "b.log"), year=2026))
    assert all(x.mal is None and x.accepted_tokens == 100 for x in w2)


def test_short_drafts_take_drafts_from_printed_mal():
    """n-gram drafts shorter than k: Drafted/k undercounts drafts; printed MAL disagrees."""
    line = ("INFO 09-15 23:30:10 [metrics.py:101] SpecDecoding metrics: Mean acceptance length: "
            "1.50, Accepted throughput: 5.00 tokens/s, Drafted throughput: 20.00 tokens/s, "
            "Accepted: 50 tokens, Drafted: 200 tokens, Per-position acceptance rate: 0.300, "
            "0.150, 0.050, 0.000, Avg Draft acceptance rate: 25.0%")
    from decodescope.telemetry.logs.vllm_windows import VllmAssembler
    asm = VllmAssembler(ParseCounts())
    rec = parse(line)
    assert isinstance(rec, V.VSpec)
    (w,) = asm.feed(rec) + asm.flush()
    assert w.drafts == 100 and "drafts_from_printed_mal" in w.flags
    assert w.mal == pytest.approx(1.5)


def test_split_fields_continuations():
    f = split_fields("Accepted: 5 tokens, Per-position acceptance rate: 0.5, 0.25, Avg: 1%")
    assert f.nums("Per-position acceptance rate") == (0.5, 0.25)
    assert f.num("Avg") == 1.0 and f.int_("Accepted") == 5


def test_unparsed_marker():
    assert parse("INFO 01-01 00:00:00 SpecDecoding metrics: Accepted: many") == Unparsed("vllm.spec")


def test_v0_early_tokens_tokens_wording():
    r = parse("INFO 07-25 10:00:00 metrics.py:396] Speculative metrics: Draft acceptance rate: "
              "0.500, System efficiency: 0.400, Number of speculative tokens: 4, Number of "
              "accepted tokens: 20, Number of draft tokens tokens: 40, Number of emitted tokens "
              "tokens: 20.")
    assert isinstance(r, V.VSpec) and r.variant == "v0-early"
    assert (r.k, r.accepted, r.drafted, r.emitted) == (4, 20, 40, 20)
    assert r.printed["system_efficiency"] == pytest.approx(20 / ((40 / 4) * 5))


def test_spec_line_pairs_with_the_stats_line_of_its_own_pid(tmp_path: Path):
    lines = []
    for i in range(1, 4):
        t = T0 + 10 * i
        lines += [engine_line(t, 14.0, pid=11), engine_line(t, 99.0, pid=22, engine=3),
                  spec_line(t, 50, [40, 30, 20], pid=11)]
    w = list(iter_windows(write(tmp_path, lines), year=2026))
    by_pid = {(x.printed["pid"], x.engine_id): x for x in w}
    assert by_pid[(11.0, "Engine 000")].drafts == 50
    assert by_pid[(22.0, "Engine 003")].drafts is None


def test_idle_diluted_printed_throughputs_are_not_used(tmp_path: Path):
    """vllm-ascend#12521: after draft-less intervals the printed spec throughputs span 30 s.
    The window uses the counts over the engine interval; MAL and step rate are unaffected."""
    t = T0 + 10
    diluted = spec_line(t, 50, [40, 30, 20], interval_s=30.0)
    w = list(iter_windows(write(tmp_path, [engine_line(t, 14.0), diluted,
                                           engine_line(t + 10, 14.0), spec_line(t + 10, 50, [40, 30, 20])]),
                          year=2026))
    assert w[0].printed["accepted_throughput"] == pytest.approx(90 / 30, abs=0.01)
    assert (w[0].mal, w[0].step_rate) == (w[1].mal, w[1].step_rate)
    assert w[0].step_rate == pytest.approx(5.0)
