"""The bulk read of a whole log (bulk_sglang.py + columns.py) gives what the per-line read
gives: the whole summary, bit for bit (its repr and its JSON), on the real logs and on synthetic
logs with every fault class; on the faults it gives the log back to the per-line read.

Every comparison runs the bulk read with small blocks (block boundaries everywhere) and few
kept windows, so the carried state (held first line, recent durations, duplicates window,
bins, figures past their exact size) is exercised on small logs.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from decodescope.records.window import EngineWindow
from decodescope.telemetry.logs import (
    accumulate,
    bulk_llamacpp,
    bulk_sglang,
    bulk_vllm,
    figures,
    linescan,
)
from decodescope.telemetry.logs.accumulate import LogAccumulator, analyze_log
from decodescope.telemetry.logs.bins import Binner
from decodescope.telemetry.logs.columns import WindowColumns, add_columns
from decodescope.telemetry.logs.figures import Figure
from decodescope.telemetry.logs.parse_counts import ParseCounts

DATA = Path(__file__).parent / "data"
REAL = sorted((DATA / "real-logs").glob("*.log"))
_BULK = accumulate._bulk_summary


@pytest.fixture(autouse=True, params=["compiled", "numpy"])
def _templates(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test twice: the bulk read with its compiled parts (_linescan.c: templates,
    places, Welford's sums) and with numpy alone (a build without a C compiler)."""
    from decodescope.telemetry.logs import linescan

    monkeypatch.setattr(linescan, "_PURE", request.param == "numpy")
    return str(request.param)


def _line(t: float, *, run: int = 3, acc: str | None = "2.84", gen: str = "201.78",
          tag: str = "TP0", sep: str = ",", tail: str = ", ") -> str:
    stamp = f"2026-09-01 {int(t) // 3600:02d}:{int(t) // 60 % 60:02d}:{int(t) % 60:02d}"
    spec = f"accept len: {acc}, accept rate: 0.61, " if acc is not None else ""
    return (f"[{stamp} {tag}] Decode batch{sep} #running-req: {run}, #token: 7115, token "
            f"usage: 0.15, {spec}cuda graph: True, gen throughput (token/s): {gen}, "
            f"#queue-req: 0{tail}")


def _log(n: int = 400, seed: int = 1, spec: bool = True) -> list[str]:
    """An ordinary SGLang log: prefill and access lines between Decode lines, an idle hour,
    lines in the same second, zero-running and idle lines, spec on and off."""
    rng = random.Random(seed)
    out, t = [], 3600.0
    for i in range(n):
        t += rng.choice((0, 1, 1, 2, 3)) + (1800 if i == n // 2 else 0)
        out.append(f"[2026-09-01 01:00:00 TP0] Prefill batch, #new-seq: 1, #new-token: {i}")
        out.append('[2026-09-01 01:00:00] INFO:     127.0.0.1:5738 - "POST /v1/x HTTP/1.1" 200')
        run = rng.choice((0, 1, 2, 3, 8)) if i % 17 else 0
        gen = "0.00" if i % 29 == 5 else f"{rng.uniform(50, 400):.2f}"
        acc = f"{rng.uniform(1.5, 3.5):.2f}" if spec and i % 11 else (None if not spec
                                                                          else "0.00")
        out.append(_line(t, run=run, acc=acc, gen=gen))
    return out


def _write(tmp: Path, name: str, lines: list[str], end: str = "\n") -> str:
    p = tmp / name
    p.write_text("\n".join(lines) + end)
    return str(p)


def _both(path: str, monkeypatch: pytest.MonkeyPatch, max_windows: int = 7) -> bool:
    """Assert the bulk and the per-line summaries agree; True when the bulk read was used."""
    monkeypatch.setattr(bulk_sglang, "BLOCK_BYTES", 3000)
    monkeypatch.setattr(accumulate, "BULK_MIN_BYTES", 0)
    used: list[bool] = []
    real = _BULK

    def spy(*a: Any) -> Any:
        out = real(*a)
        used.append(out is not None)
        return out

    monkeypatch.setattr(accumulate, "_bulk_summary", spy)
    bulk = analyze_log(path, max_windows=max_windows)
    monkeypatch.setattr(accumulate, "_bulk_summary", lambda *a: None)
    plain = analyze_log(path, max_windows=max_windows)
    assert repr(bulk) == repr(plain)  # == but NaN equal to NaN (`nan` accept len)
    assert json.dumps(bulk.to_dict(), default=str) == json.dumps(plain.to_dict(), default=str)
    return bool(used and used[0])


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_real_logs(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    used = _both(str(path), monkeypatch)
    assert used == path.name.startswith(("sglang", "llamacpp")), \
        "the real SGLang and llama.cpp logs take the bulk read"


@pytest.mark.parametrize("spec", [True, False])
def test_ordinary_logs_take_the_bulk_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          spec: bool) -> None:
    assert _both(_write(tmp_path, "s.log", _log(spec=spec)), monkeypatch)


def test_many_windows_past_the_exact_figures(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(figures, "EXACT_MAX", 50)
    assert _both(_write(tmp_path, "s.log", _log(n=700)), monkeypatch)


def test_one_line_and_two_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _both(_write(tmp_path, "one.log", [_line(10.0)]), monkeypatch)
    assert _both(_write(tmp_path, "two.log", [_line(10.0), _line(400.0, run=1)]), monkeypatch)


_LLAMA = ("0.05.000.000 I slot print_timing: id  1 | task 1 |        eval time =    5863.64 ms "
          "/   646 tokens ( 9.08 ms per token, 110.17 tokens per second)")


def _faults() -> dict[str, list[str]]:
    base = _log(n=120)
    dup = base[:60] + [base[59]] + base[60:]
    nan_dup = base[:60] + [_line(99999, acc="nan")] * 2 + base[60:]
    back = base[:60] + [_line(10.0)] + base[60:]
    other = base[:60] + ["(APIServer pid=1) INFO 09-01 05:00:00 [loggers.py:1] Engine 000: Avg "
                         "prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 "
                         "tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: "
                         "1.0%, Prefix cache hit rate: 0.0%"] + base[60:]
    config = ["server_args=ServerArgs(decode_log_interval=20, tp_size=1)"] + base
    ansi = base[:60] + ["\x1b[32m" + base[62] + "\x1b[0m"] + base[60:]
    crlf = [x + "\r" for x in base]
    tags = base[:60] + [_line(99999, tag="DP1 TP0")] + base[60:]
    forward = base[:60] + [_line(99999).replace("Decode batch,", "Decode batch [12],")] + \
        base[60:]
    unknown = base[:60] + [_line(99999).replace("#queue-req: 0", "#queue-req: 0, #new: 3")] + \
        base[60:]
    return {"llama.cpp line": base[:60] + [_LLAMA] + base[60:],
            "launch line later": base[:60] + ["server_args=ServerArgs(decode_log_interval=20)"]
            + base[60:],
            "duplicate line": dup, "nan duplicates": nan_dup, "stamp backwards": back,
            "another engine": other, "launch config": config, "ansi colour": ansi,
            "crlf endings": crlf, "two tags": tags, "forward count": forward,
            "unknown field": unknown}


@pytest.mark.parametrize("fault", sorted(_faults()))
def test_faults_go_to_the_per_line_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        fault: str) -> None:
    assert not _both(_write(tmp_path, "f.log", _faults()[fault]), monkeypatch)


def test_cut_last_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = _log(n=80)
    cut = _write(tmp_path, "cut.log", lines[:-1] + [lines[-1][:80]], end="")
    assert not _both(cut, monkeypatch)
    whole_no_newline = _write(tmp_path, "nonl.log", lines, end="")
    assert not _both(whole_no_newline, monkeypatch)
    other_tail = _write(tmp_path, "tail.log", lines + ["[2026-09-01] INFO: no keyword"], end="")
    assert _both(other_tail, monkeypatch)


def test_long_line_and_gzip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = _log(n=60)
    long = _write(tmp_path, "long.log", lines[:30] + ["x" * (5 << 20)] + lines[30:])
    assert not _both(long, monkeypatch)
    gz = tmp_path / "s.log.gz"
    gz.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    assert not _both(str(gz), monkeypatch)


def test_small_logs_skip_numpy_by_default(tmp_path: Path) -> None:
    path = _write(tmp_path, "s.log", _log(n=30))
    assert Path(path).stat().st_size < accumulate.BULK_MIN_BYTES
    assert analyze_log(path).windows_total == 30


# The columnar pieces against their one-at-a-time originals, on random windows.

def _windows(rng: random.Random, n: int) -> list[EngineWindow]:
    out, t = [], 1000.0
    for i in range(n):
        t += rng.choice((1.0, 2.5, 40.0))
        d = rng.choice((None, 0.0, 3.0, rng.uniform(0.5, 60)))
        idle = rng.random() < 0.1
        run = rng.choice((None, 0.0, 1.0, 4.0))
        flags = tuple(f for f, on in (("spec_off", rng.random() < 0.2),
                                      ("may_include_idle", rng.random() < 0.1),
                                      ("idle", idle)) if on)
        printed = {"generation_throughput": 0.0 if idle else rng.uniform(1, 500),
                   "decode_steps": 40.0}
        if "spec_off" not in flags:
            printed["mal_reported"] = rng.choice((0.0, rng.uniform(1, 4)))
        out.append(EngineWindow(source="log", engine="sglang",
                                t_start_s=None if d is None else t - d, t_end_s=t,
                                running=run, engine_id="TP0", printed=printed, flags=flags))
        del i
    return out


def _columns(ws: list[EngineWindow]) -> WindowColumns:
    from decodescope.telemetry.logs.steps import step_info

    def col(f: Any) -> Any:
        return np.array([np.nan if (v := f(w)) is None else float(v) for w in ws])

    infos = [step_info(w) for w in ws]
    ok = ["idle" not in w.flags and "may_include_idle" not in w.flags for w in ws]
    mal = col(lambda w: w.mal)
    steps = [accumulate._estimated_steps(w, w.mal) if w.mal is not None else None for w in ws]
    est = np.array([bool(s) for s in steps])
    return WindowColumns(
        engine="sglang", engine_id="TP0", pid=None, t_start=col(lambda w: w.t_start_s),
        t_end=col(lambda w: w.t_end_s), running=col(lambda w: w.running),
        rate=np.array([w.decode_rate if o else np.nan for w, o in zip(ws, ok, strict=True)]),
        mal=mal, acc=np.array([s * (w.mal - 1.0) if s else 0.0 for w, s in zip(ws, steps,
                                                                              strict=True)]),
        drafts=np.array([s if s else 0.0 for s in steps]), estimated=est,
        step=np.array([i.rate if o and i.rate is not None else np.nan
                       for i, o in zip(infos, ok, strict=True)]),
        drafts_rate=np.array([i.drafts_rate if o and i.drafts_rate is not None else np.nan
                              for i, o in zip(infos, ok, strict=True)]),
        idle=np.array(["idle" in w.flags for w in ws]),
        zero_running=sum(1 for i, o, w in zip(infos, ok, ws, strict=True)
                         if o and i.zero_running),
        flags={f: np.array([f in w.flags for w in ws])
               for f in ("spec_off", "may_include_idle", "idle")})


@pytest.mark.parametrize("seed", range(4))
def test_add_columns_is_add_one_by_one(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(figures, "EXACT_MAX", 64)
    rng = random.Random(seed)
    ws = _windows(rng, 500)
    one = LogAccumulator(max_windows=1)
    for w in ws:
        one.add(w)
    many = LogAccumulator(max_windows=1)
    for lo in range(0, len(ws), 97):
        add_columns(many, _columns(ws[lo:lo + 97]))
    many._kept.append(ws[-1])
    counts = ParseCounts()
    assert one.finish("x", "sglang", counts) == many.finish("x", "sglang", counts)


def test_figure_extend_and_binner_add_many(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(figures, "EXACT_MAX", 1000)  # Welford's sums: C and Python (_templates)
    rng = random.Random(7)
    xs = [rng.choice((0.0, -0.0, -1.5, 1.0, figures.GAMMA ** 7, float("nan"),
                      rng.lognormvariate(0, 3), rng.lognormvariate(0, 3))) for _ in range(3000)]
    a, b = Figure(), Figure()
    for x in xs:
        a.append(x)
    for lo in range(0, len(xs), 400):
        figures.extend(b, np.array(xs[lo:lo + 400]))
    assert a.summary() == b.summary()
    assert (a.n, a._mean, a._m2, a.min, a.max, a._pos, a._neg, a._zero) == \
        (b.n, b._mean, b._m2, b.min, b.max, b._pos, b._neg, b._zero)
    assert repr((a._mean, a._m2, a.min, a.max)) == repr((b._mean, b._m2, b.min, b.max))
    one, many = Binner(), Binner()
    rows = [(rng.choice((None, float(i))), float(i) + 1, rng.choice((None, rng.random())),
             rng.random(), rng.random(), rng.choice((None, rng.random())),
             rng.choice((None, 2.0)), ("idle",) if i % 9 == 0 else ()) for i in range(5000)]
    for r in rows:
        one.add(r[0], r[1], "TP0", *r[2:])

    def arr(k: int) -> Any:
        return np.array([np.nan if r[k] is None else r[k] for r in rows])

    idle = np.array([bool(r[7]) for r in rows])
    for lo in range(0, len(rows), 333):
        s = slice(lo, lo + 333)
        many.add_many(arr(0)[s], arr(1)[s], "TP0", arr(2)[s], arr(3)[s], arr(4)[s], arr(5)[s],
                      arr(6)[s], {"idle": idle[s]})
    assert one.bins() == many.bins()


# vLLM (bulk_vllm.py)

def _vstats(t: int, *, gen: str = "441.2", run: int = 4, pid: int = 5020) -> str:
    stamp = f"09-01 {t // 3600:02d}:{t // 60 % 60:02d}:{t % 60:02d}"
    return (f"(APIServer pid={pid}) INFO {stamp} [loggers.py:271] Engine 000: Avg prompt "
            f"throughput: 327.4 tokens/s, Avg generation throughput: {gen} tokens/s, Running: "
            f"{run} reqs, Waiting: 2 reqs, GPU KV cache usage: 19.0%, Prefix cache hit rate: "
            f"0.0%")


def _vspec(t: int, *, acc: int = 2859, dr: int = 4659, mal: str = "2.84",
           pp: str = "0.829, 0.614, 0.399", pid: int = 5020) -> str:
    stamp = f"09-01 {t // 3600:02d}:{t // 60 % 60:02d}:{t % 60:02d}"
    return (f"(APIServer pid={pid}) INFO {stamp} [metrics.py:101] SpecDecoding metrics: Mean "
            f"acceptance length: {mal}, Accepted throughput: 285.90 tokens/s, Drafted "
            f"throughput: 465.90 tokens/s, Accepted: {acc} tokens, Drafted: {dr} tokens, "
            f"Per-position acceptance rate: {pp}, Avg Draft acceptance rate: 61.4%")


def _vlog(n: int = 300, seed: int = 2) -> list[str]:
    """An ordinary vLLM V1 log: access lines, stats + SpecDecoding every 10 s, idle lines
    (0 tokens, 0 running, no spec line), an idle night, counts that contradict (withheld),
    drafts shorter than k (MAL check), 0 drafts, partial coverage."""
    rng = random.Random(seed)
    out, t = [], 36000
    for i in range(n):
        t += 10 if i % 50 else 3610
        out.append('(APIServer pid=5020) INFO:     127.0.0.1:38364 - "POST /v1/x HTTP/1.1" 200')
        if i % 23 == 7:
            out.append(_vstats(t, gen="0.0", run=0))
            continue
        gen = rng.uniform(50, 900)
        out.append(_vstats(t, gen=f"{gen:.1f}", run=rng.choice((0, 1, 4, 16))))
        dr = rng.choice((0, 3, int(gen * 10 * 0.5), int(gen * 10 * 0.7), int(gen * 30)))
        acc = int(dr * rng.uniform(0.2, 0.8))
        d = round(dr / 3)
        mal = f"{1.0 + acc / d:.2f}" if d and i % 13 else f"{rng.uniform(1, 4):.2f}"
        out.append(_vspec(t, acc=acc, dr=dr, mal=mal))
    return out


def _vboth(path: str, monkeypatch: pytest.MonkeyPatch) -> bool:
    monkeypatch.setattr(bulk_vllm, "BLOCK_BYTES", 2500)
    return _both(path, monkeypatch)


def test_vllm_ordinary_log_takes_the_bulk_read(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    assert _vboth(_write(tmp_path, "v.log", _vlog()), monkeypatch)


def test_vllm_past_the_exact_figures_and_short_logs(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(figures, "EXACT_MAX", 40)
    assert _vboth(_write(tmp_path, "v.log", _vlog(n=500)), monkeypatch)
    assert _vboth(_write(tmp_path, "short.log", _vlog(n=5)), monkeypatch)
    assert _vboth(_write(tmp_path, "last.log", _vlog(n=40)[:-1]), monkeypatch)  # no spec


def _vfaults() -> dict[str, list[str]]:
    base = _vlog(n=120)
    i = next(j for j in range(60, len(base)) if "SpecDecoding" in base[j + 1])  # a stats line
    stats, spec = base[i], base[i + 1]
    t = 36000 + 10 * 60
    return {
        "duplicate stats line": base[:i + 1] + [stats] + base[i + 1:],
        "duplicate spec line": base[:i + 2] + [spec] + base[i + 2:],
        "stamp backwards": base[:i] + [_vstats(100)] + base[i:],
        "interval change": base[:i] + [_vstats(t + 3), _vspec(t + 3)] + base[i:],
        "spec line alone": base[:i] + [_vspec(t + 5)] + base[i:],
        "two pids": base[:i] + [_vstats(t + 5, pid=7)] + base[i:],
        "launch config": ["(APIServer pid=5020) INFO 09-01 09:00:00 [utils.py:1] non-default "
                          "args: {'model': 'x', 'speculative_config': {'num_speculative_tokens'"
                          ": 3, 'method': 'mtp'}}"] + base,
        "another k": base[:i + 1] + [spec.replace("0.399", "0.399, 0.2")] + base[i + 2:],
        "sglang line": base[:i] + [_line(99999)] + base[i:],
        "llama.cpp line": base[:i] + [_LLAMA] + base[i:],
        "ansi": base[:i] + ["\x1b[32m" + stats] + base[i + 1:],
        "early v1": [x.replace("Engine 000: ", "") for x in base],
        "nan": base[:i + 1] + [spec.replace("length: ", "length: nan, X: ")] + base[i + 2:],
        "crlf": [x + "\r" for x in base],
    }


@pytest.mark.parametrize("fault", sorted(_vfaults()))
def test_vllm_faults_go_to_the_per_line_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             fault: str) -> None:
    assert not _vboth(_write(tmp_path, "f.log", _vfaults()[fault]), monkeypatch)


def test_vllm_year_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """December -> January in year-less stamps (Clock: the next year), and a December
    straggler after the first January line (the year before), all in the kept windows."""
    base = _vlog(n=120)
    i = next(j for j in range(60, len(base)) if "SpecDecoding" in base[j + 1])
    lines = [x.replace("09-01", "12-31") for x in base[:i]] + \
        [x.replace("09-01", "01-01") for x in base[i:]]
    assert _vboth(_write(tmp_path, "y.log", lines), monkeypatch)
    assert _both(_write(tmp_path, "y2.log", lines), monkeypatch, max_windows=1000)
    k = next(j for j in range(i + 10, len(lines)) if "SpecDecoding" in lines[j + 1])
    straggle = lines[:k] + [lines[k].replace("01-01 ", "12-31 "), lines[k + 1].replace(
        "01-01 ", "12-31 ")] + lines[k + 2:]
    _vboth(_write(tmp_path, "y3.log", straggle), monkeypatch)


def test_vllm_cut_last_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = _vlog(n=60)
    assert not _vboth(_write(tmp_path, "cut.log", lines[:-1] + [lines[-1][:90]], end=""),
                      monkeypatch)


@pytest.mark.parametrize("dense", [1, 64, 10 ** 6])
def test_every_keyword_search_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   dense: int) -> None:
    """The bulk read's keyword places and watch keywords by each of linescan's paths (the
    byte places in numpy, bytes.find, memchr of a rare byte): same summaries, same faults."""
    monkeypatch.setattr(linescan, "DENSE", dense)
    assert _both(_write(tmp_path, "s.log", _log()), monkeypatch)
    assert _vboth(_write(tmp_path, "v.log", _vlog()), monkeypatch)
    for name in ("another engine", "llama.cpp line", "launch line later"):
        assert not _both(_write(tmp_path, "f.log", _faults()[name]), monkeypatch)
    for name in ("sglang line", "llama.cpp line", "spec line alone"):
        assert not _vboth(_write(tmp_path, "f.log", _vfaults()[name]), monkeypatch)


def test_sparse_kept_blocks_hold_only_their_lines(tmp_path: Path) -> None:
    """A kept block of few windows keeps its lines' bytes, not the whole block (a sparse log
    would otherwise keep up to max_windows blocks of 8 MiB)."""
    from decodescope.telemetry.logs.clock import Clock

    path = _write(tmp_path, "s.log", _log(n=200))
    counts = ParseCounts()
    sg = bulk_sglang.BulkSglang(LogAccumulator(), counts, 50)
    bulk_sglang.read_blocks(path, sg, counts, 3000)
    sg.finish()
    assert sg.kept and all(len(b.data) <= 300 * len(b.starts) for b in sg.kept)
    vpath = _write(tmp_path, "v.log", _vlog(n=200))
    counts = ParseCounts()
    vb = bulk_vllm.BulkVllm(LogAccumulator(), counts, 50, Clock(2026))
    bulk_sglang.read_blocks(vpath, vb, counts, 2500)
    vb.finish()
    assert vb.kept and all(len(r["data"]) <= 600 * len(r["t"]) for r in vb.kept)


def _lreq(t: float, task: int, rng: random.Random, *, spec: str = "stats",
          mal_key: str = "mean acceptance length",
          total: list[int] | None = None) -> list[str]:
    """One llama.cpp request as `print_timing` prints it (PR #24536 / b1-0c1e570 shapes)."""
    slot = task % 3
    m, rest = divmod(int(round(t * 1e6)), 60_000_000)
    s, us = divmod(rest, 1_000_000)
    e = f"{m}.{s:02d}.{us // 1000:03d}.{us % 1000:03d}"
    pre = f"{e} I slot print_timing: id  {slot} | task {task} | "
    pn, n = rng.randint(1, 2000), rng.randint(1, 700)
    ev = rng.uniform(0.0, 9000.0) if task % 13 else 0.0
    drafts = max(1, n // 3)
    acc = max(0, min(n - 1 - drafts, rng.randint(0, 2 * drafts)))
    if task % 17 == 5:  # generated − accepted below the drafts: the step rate withheld
        acc = max(0, n - drafts)
    gen = 3 * drafts
    st = (drafts, gen, acc)
    if total is not None:  # cumulative statistics over the slot's life
        total[:] = [a + b for a, b in zip(total, st, strict=True)]
        st = (total[0], total[1], total[2])
    out = [f"{e} I slot launch_slot_: id  {slot} | task {task} | processing task",
           f"{pre}prompt eval time = {pn / 2.0:10.2f} ms / {pn:5d} tokens ( 0.50 ms per token, "
           "2000.00 tokens per second)",
           f"{pre}       eval time = {ev:10.2f} ms / {n:5d} tokens ( 1.00 ms per token, "
           "110.00 tokens per second)",
           f"{pre}      total time = {ev + pn / 2.0:10.2f} ms / {pn + n:5d} tokens",
           f"{pre}   graphs reused = {drafts}"]
    mal = f"{1 + acc / drafts:.2f}"
    if spec != "off":
        pos = ", acceptance rate per position = (0.800, 0.600, 0.400)" \
            if mal_key != "mean len" else ""
        out.append(f"{pre}draft acceptance = {acc / gen:.5f} ({acc:5d} accepted / {gen:5d} "
                   f"generated), {mal_key} = {mal:>5}{pos}")
    if spec == "stats":
        impl = "draft-mtp" if total is None else "ngram-cache"
        out.append(f"{e} I statistics     {impl}: #calls(b,g,a) =    1 {drafts:6d} "
                   f"{drafts:6d}, #gen drafts = {st[0]:6d}, #acc drafts = {drafts // 2:6d}, "
                   f"#gen tokens = {st[1]:6d}, #acc tokens = {st[2]:6d}, #mean acc len = {mal}, "
                   "#acc rate/pos = (0.800, 0.600, 0.400), dur(b,g,a) = 0.005, 325.555, 0.114 ms")
    out += [f"{e} I slot      release: id  {slot} | task {task} | stop processing: "
            f"n_tokens = {pn + n}, truncated = 0",
            f"{e} I srv  update_slots: all slots are idle"]
    return out


def _llog(n: int = 300, seed: int = 3) -> list[str]:
    """An ordinary llama.cpp log: requests with the statistics line, without it (drafts from
    the printed MAL), spec off, `mean len` lines; overlapping requests; the perf lines at
    exit (skipped by the per-line read)."""
    rng = random.Random(seed)
    out = ["0.00.008.039 I srv  llama_server: initializing ..."]
    t = 5.0
    total = [0, 0, 0]
    for task in range(1, n + 1):
        spec = ("stats", "stats", "mal", "off", "stats")[task % 5 if task > 40 else 0]
        out += _lreq(t, task, rng, spec=spec,
                     mal_key="mean len" if task % 7 == 3 else "mean acceptance length",
                     total=total if task % 5 == 4 and task > 40 else None)
        t += rng.choice((0.001, 0.5, 3.0, 40.0))
    out += ["llama_perf_context_print: prompt eval time =   12.00 ms /  5 tokens",
            "llama_perf_context_print:        eval time =   99.00 ms / 20 runs"]
    return out


def _lboth(path: str, monkeypatch: pytest.MonkeyPatch, max_windows: int = 7) -> bool:
    monkeypatch.setattr(bulk_llamacpp, "BLOCK_BYTES", 2800)
    return _both(path, monkeypatch, max_windows)


def test_llamacpp_ordinary_log_takes_the_bulk_read(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    assert _lboth(_write(tmp_path, "l.log", _llog()), monkeypatch)
    assert _lboth(_write(tmp_path, "l2.log", _llog(seed=5)), monkeypatch, max_windows=1000)
    monkeypatch.setattr(figures, "EXACT_MAX", 60)
    assert _lboth(_write(tmp_path, "l3.log", _llog(n=400, seed=7)), monkeypatch)
    assert _lboth(_write(tmp_path, "one.log", _lreq(9.0, 1, random.Random(1))), monkeypatch)
    # the bulk read stops at each line's last number the record takes (as the per-line
    # parser does): CRLF endings and a tail after it read the same
    crlf = [x + "\r" for x in _llog(n=60)]
    assert _lboth(_write(tmp_path, "crlf.log", crlf), monkeypatch)


def _lfaults() -> dict[str, list[str]]:
    base = _llog(n=60)
    i = base.index(next(x for x in base if "task 30 " in x))
    return {
        "every line twice": [x for x in base for _ in (0, 1)],
        "one request twice": base[:i] + base[i:i + 9] + base[i:],
        "two requests of one stamp": base[:i] + [x.replace("task 30 ", "task 99 ")
                                                 for x in base[i:i + 9]] + base[i:],
        "stamp backwards": base[:i] + [base[3]] + base[i:],
        "another engine": base[:i] + [_line(99999)] + base[i:],
        "ansi colour": base[:i] + ["\x1b[32m" + base[i + 2] + "\x1b[0m"] + base[i:],
        "keyword in another shape": base[:i] + ["0.10.000.000 I srv  x: eval time = 1 ms"]
        + base[i:],
        "older draft line": base[:i] + [base[i + 5].replace("draft acceptance =",
                                                           "draft acceptance rate =")]
        + base[i:],
        "no stamp": base[:i] + [base[i + 2][13:]] + base[i:],
    }


@pytest.mark.parametrize("fault", sorted(_lfaults()))
def test_llamacpp_faults_go_to_the_per_line_read(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 fault: str) -> None:
    assert not _lboth(_write(tmp_path, "f.log", _lfaults()[fault]), monkeypatch)


def test_llamacpp_cut_last_line_long_line(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    lines = _llog(n=30)[:-2]
    ev = max(i for i, x in enumerate(lines) if "  eval time" in x)
    cut = _write(tmp_path, "cut.log", lines[:ev] + [lines[ev][:100]], end="")
    assert not _lboth(cut, monkeypatch)
    assert not _lboth(_write(tmp_path, "nonl.log", lines[:-1], end=""), monkeypatch)
    assert _lboth(_write(tmp_path, "tail.log", lines + ["0.99.000.000 I srv idle"], end=""),
                  monkeypatch)
    long = _write(tmp_path, "long.log", lines[:30] + ["x" * (5 << 20)] + lines[30:])
    assert not _lboth(long, monkeypatch)


@pytest.mark.parametrize("path", sorted((DATA / "llamacpp-embedded").glob("*.log")),
                         ids=lambda p: p.name)
def test_llamacpp_embedded_logs(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _lboth(str(path), monkeypatch)


_S = "0.05.000.000 I "
_P = _S + "slot print_timing: id 1 | task 1 | "
_T3 = [_P + "prompt eval time = 1.00 ms / 2 tokens", _P + "eval time = 10.00 ms / 9 tokens",
       _P + "total time = 11.00 ms / 11 tokens"]
_R = _S + "slot release: id 1 | task 1 | stop processing"
_D = _P + "draft acceptance = 0.5 (4 accepted / 8 generated), mean len = 2.00"
_ST = (_S + "statistics draft-mtp: #calls(b,g,a) = 1 2 2, #gen drafts = 4, #acc drafts = 2, "
       "#gen tokens = 8, #acc tokens = 4")
_PERF = ("llama_perf_context_print: eval time = 9.00 ms / 2 runs, SpecDecoding metrics: Mean "
         "acceptance length: 2.50, Accepted: 3 tokens, Drafted: 4 tokens")


@pytest.mark.parametrize("case", [
    "ansi in a number", "digit of another script", "digit of another script, statistics",
    "keyword split by ansi", "release keyword split by ansi", "ansi in the per-position list",
    "ansi in the statistics MAL", "15-digit minutes", "10-digit minutes, odd level"])
@pytest.mark.parametrize("max_windows", [1, 7])
def test_llamacpp_found_by_review(case: str, max_windows: int, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Logs an adversarial review found where the bulk read was used and read otherwise than
    the per-line read (ANSI codes, which the per-line read strips first; digits of other
    scripts, which its `\\d` takes; minutes past 2**53 / 60): now the same summary."""
    lines = {
        "ansi in a number": _T3 + [_D.replace("2.00", "1.5\x1b[0m7"), _R],
        "digit of another script": _T3 + [_D.replace("2.00", "1.5\u0666"), _R],
        "digit of another script, statistics": _T3 + [_D, _ST + "\u0662", _R],
        "keyword split by ansi": [_T3[0], _T3[1] + " llama_\x1b[0mperf", _T3[2], _R],
        "release keyword split by ansi": [_T3[0], _T3[1], _T3[2] + " stop \x1b[0mprocessing",
                                          _D, _R],
        "ansi in the per-position list":
            _T3 + [_D + ", acceptance rate per position = (0.5\x1b[0m0)", _R],
        "ansi in the statistics MAL": _T3 + [_D, _ST + ", #mean acc len = \x1b[1m2.00", _R],
        "15-digit minutes": [x.replace("0.05.000.000", "700000000000003.01.000.000")
                             for x in _T3 + [_R]],
        "10-digit minutes, odd level": [x.replace("0.05.000.000 I", "1234567890.05.000.000 X")
                                        for x in _T3 + [_R]],
    }[case]
    _lboth(_write(tmp_path, "r.log", lines), monkeypatch, max_windows=max_windows)


@pytest.mark.parametrize("block", [100, 200, 300, 2800])
def test_llamacpp_perf_line_with_another_engines_keyword(block: int, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A skipped `llama_perf` line holding a vLLM keyword, in a block after the first record:
    the per-line read gives it to the vLLM parser; the bulk read leaves such a log to it."""
    path = _write(tmp_path, "p.log", _T3 + [_R, _PERF])
    monkeypatch.setattr(bulk_llamacpp, "BLOCK_BYTES", block)
    _both(path, monkeypatch, max_windows=1)


def test_llamacpp_counts_past_int64_sums(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Token counts of 15 digits in one block sum past int64 (the per-line read sums Python
    ints): the bulk read leaves the log to the per-line read, the summaries agree."""
    lines = []
    for i in range(9300):
        st = f"0.05.{(1000 + i) // 1000:03d}.{(1000 + i) % 1000:03d}"
        p = f"{st} I slot print_timing: id 1 | task {i} | "
        lines += [p + "prompt eval time = 1.00 ms / 1 tokens",
                  p + "eval time = 1.00 ms / 999999999999999 tokens",
                  p + "total time = 2.00 ms / 2 tokens",
                  f"{st} I slot release: id 1 | task {i} | stop processing"]
    path = _write(tmp_path, "big.log", lines)  # 3 MB: one 8 MiB block
    assert not _both(path, monkeypatch, max_windows=1)


def test_llamacpp_implementation_names_of_one_length() -> None:
    """The statistics lines' implementation names: one name on every line is compared a
    word at a time; names of one length that differ (in any byte) are told apart."""
    names = [b"draft-mtp", b"draft-mtq", b"ngram-mod", b"draft-mtp", b"xdraft-mtp012345678"]
    text = b"".join(b"\n" + nm + b": #calls" for nm in names) + b"\n" + b" " * 64
    at = np.array([text.index(b"\n" + nm) + 1 for nm in names[:3]] + [
        text.rindex(b"\n" + names[3]) + 1, text.index(b"\n" + names[4]) + 1])
    bulk = bulk_llamacpp.BulkLlamacpp(LogAccumulator(), ParseCounts(), 0)
    buf = np.frombuffer(text, np.uint8)
    ids = bulk._impl_ids(buf, at[:4], np.array([9, 9, 9, 9]))
    assert [bulk.names[int(i)] for i in ids] == ["draft-mtp", "draft-mtq", "ngram-mod",
                                                  "draft-mtp"]
    ids = bulk._impl_ids(buf, at[[0, 3]], np.array([9, 9]))  # one name: the word compare
    assert [bulk.names[int(i)] for i in ids] == ["draft-mtp", "draft-mtp"]
    ids = bulk._impl_ids(buf, at[[4, 4]], np.array([19, 19]))  # past 8 and 16 bytes
    assert [bulk.names[int(i)] for i in ids] == ["xdraft-mtp012345678"] * 2
