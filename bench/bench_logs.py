"""Benchmark: the log reader against `grep -c`, on realistic generated logs of each engine.

One run prints, side by side, for each engine (vLLM, SGLang, llama.cpp) and size (default
1 GiB and 4 GiB): `grep -c KEYWORD FILE`, decodescope's full scan (what `decodescope logs FILE
--json` computes, sequential) and a 30-minute `--since/--until` window (the seek), each in a
fresh process: wall time, CPU time and peak RSS of that child (os.wait4), and CPU as a
multiple of grep's. Targets (issue 22): full scan <= 8x grep -c, peak RSS <= 200 MB at both
sizes, window < 1 s. `--src DIR` measures another source tree (the code before a change:
`git worktree add /tmp/before HEAD`, then `--src /tmp/before/src`).

Profiles (what busy servers with default logging write; all synthetic, seeded):
  vllm      per 10 s stats interval while serving: one `Engine 000:` line, one
            `SpecDecoding metrics:` line (MTP k=3), a uvicorn access line per request
            (0.5-4 req/s over a day cycle, idle 2 h a night: stats lines suppressed), a
            health probe every 10 s and a Prometheus scrape every 15 s.
  sglang    a `Decode batch,` line every 40 batch steps while serving (EAGLE accept len),
            a `Prefill batch,` and an access line per request, health probes.
  llamacpp  per request the PR #24536 `print_timing` block with draft-mtp statistics, plus
            launch, request, release and idle lines (elapsed-time stamps: no window seek).

    nice python bench/bench_logs.py                          # 1 and 4 GiB, three engines
    nice python bench/bench_logs.py --sizes-mb 1024 --engines vllm --src /tmp/before/src
    nice python bench/bench_logs.py --numpy-too     # + the scan without the C module
    python bench/bench_logs.py --stages FILE                 # in-process stage timings
    python bench/bench_logs.py --floor FILE --engines llamacpp  # the per-line Python floor
    python bench/bench_logs.py --bulk-floor FILE --engines llamacpp  # the bulk read's pieces
    python bench/bench_logs.py --bulk-floor FILE --engines sglang  # the bulk read's floor
"""

from __future__ import annotations

import argparse
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path

from decodescope.telemetry.logs.synth import access_line, engine_line, spec_line

INTERVAL_S = 10.0
K = 3  # MTP draft tokens per step
T_START = datetime(2026, 9, 1, 0, 0, 0).timestamp()


def request_rate(t_s: float) -> float:
    """Requests/s over a day: idle 02:00-04:00, otherwise 0.5-4 req/s."""
    hour = (t_s - T_START) / 3600 % 24
    if 2 <= hour < 4:
        return 0.0
    return 0.5 + 3.5 * (0.5 + 0.5 * math.sin((hour - 8) / 24 * 2 * math.pi))


def poisson(rng: random.Random, lam: float) -> int:
    if lam <= 0:
        return 0
    if lam > 30:
        return max(0, round(rng.gauss(lam, math.sqrt(lam))))
    n, p, limit = 0, 1.0, math.exp(-lam)
    while True:
        p *= rng.random()
        if p < limit:
            return n
        n += 1


WORDS = ["the", "model", "server", "request", "token", "cache", "decode", "prefill", "batch",
         "engine", "draft", "accept", "write", "a", "function", "that", "parses", "log", "and",
         "returns", "median", "throughput", "per", "window", "explain", "why", "numbers",
         "differ", "between", "two", "runs", "what", "to", "measure", "next"]
PARAMS = ("SamplingParams(n=1, presence_penalty=0.0, frequency_penalty=0.0, repetition_penalty=1.0, "
          "temperature=0.7, top_p=0.8, top_k=20, min_p=0.0, seed=None, stop=[], stop_token_ids=[], "
          "bad_words=[], include_stop_str_in_output=False, ignore_eos=False, max_tokens=2048, "
          "min_tokens=0, logprobs=None, prompt_logprobs=None, skip_special_tokens=True, "
          "spaces_between_special_tokens=True, truncate_prompt_tokens=None, guided_decoding=None, "
          "extra_args=None)")


def request_log_lines(rng: random.Random, t: float, prompts: list[str]) -> list[str]:
    rid = f"chatcmpl-{rng.getrandbits(64):016x}"
    stamp = datetime.fromtimestamp(t).strftime("%m-%d %H:%M:%S")
    head = f"(APIServer pid=5020) INFO {stamp} "
    return [f"{head}[logger.py:41] Received request {rid}: prompt: '{rng.choice(prompts)}', "
            f"params: {PARAMS}, prompt_token_ids: None, prompt_embeds shape: None, "
            f"lora_request: None.",
            f"{head}[async_llm.py:270] Added request {rid}."]


def interval_lines(rng: random.Random, t: float, profile: str, idle_before: bool,
                   prompts: list[str]) -> tuple[list[str], bool]:
    """Lines of one 10 s stats interval ending at t; returns (lines, idle)."""
    lines: list[str] = []
    lam = request_rate(t) if profile != "dense" else 2.0
    if profile != "dense":
        for _ in range(poisson(rng, lam * INTERVAL_S)):
            if profile == "request-logging":
                lines += request_log_lines(rng, t - rng.uniform(0, INTERVAL_S), prompts)
            lines.append(access_line(rng.randint(30000, 60000)))
        lines.append(access_line(rng.randint(30000, 60000), "/health", "GET"))
        if int(t) % 30 < 10 or int(t) % 30 >= 25:
            lines.append(access_line(rng.randint(30000, 60000), "/metrics", "GET"))
    if lam == 0:
        if not idle_before:  # vLLM prints the first idle interval, then goes quiet
            lines.append(engine_line(t, 0.0, running=0))
        return lines, True
    running = max(1, min(16, round(lam * 4 + rng.gauss(0, 1))))
    mal_target = rng.uniform(2.4, 3.2)
    drafts = max(1, round(running * rng.uniform(38, 42) * INTERVAL_S))
    p = [min(0.98, (mal_target - 1) / K * f) for f in (1.35, 1.0, 0.65)]
    per_pos = [round(drafts * x) for x in p]
    gen = (drafts + sum(per_pos)) / INTERVAL_S
    lines.append(engine_line(t, gen, prompt_tput=rng.uniform(0, 400), running=running,
                             waiting=rng.randint(0, 2), kv_pct=rng.uniform(5, 60)))
    lines.append(spec_line(t, drafts, per_pos, interval_s=INTERVAL_S))
    return lines, False


def generate(path: Path, size_mb: int, profile: str, seed: int = 1) -> None:
    rng = random.Random(seed)
    prompts = ["<|im_start|>user\\n" + " ".join(rng.choice(WORDS) for _ in range(rng.randint(30, 600)))
               + "<|im_end|>\\n<|im_start|>assistant\\n" for _ in range(64)]
    target = size_mb * (1 << 20)
    written, t, idle = 0, T_START, False
    with open(path, "w", buffering=1 << 20) as f:
        while written < target:
            chunk = []
            for _ in range(1000):
                t += INTERVAL_S
                lines, idle = interval_lines(rng, t, profile, idle, prompts)
                chunk.extend(lines)
            text = "\n".join(chunk) + "\n"
            f.write(text)
            written += len(text)


def stages(path: Path) -> None:
    """CPU seconds of analyze_log's stages, each run on top of the previous one (in-process)."""
    from decodescope.telemetry.logs import vllm
    from decodescope.telemetry.logs.accumulate import LogAccumulator
    from decodescope.telemetry.logs.clock import Clock
    from decodescope.telemetry.logs.parse_counts import ParseCounts
    from decodescope.telemetry.logs.pipeline import LineReader
    from decodescope.telemetry.logs.reader import read_lines

    def search() -> int:
        return sum(1 for _ in read_lines(str(path), lambda: vllm.LEAN_KEYWORDS, ParseCounts()))

    def parse() -> int:
        c, clock = ParseCounts(), Clock(2026)
        return sum(1 for raw in read_lines(str(path), lambda: vllm.LEAN_KEYWORDS, c)
                   if vllm.parse(raw.decode("utf-8", "replace"), clock, c) is not None)

    def windows(acc: LogAccumulator | None = None) -> int:
        c = ParseCounts()
        lr = LineReader("vllm", Clock(2026), c)
        n = 0
        for raw in read_lines(str(path), lr.keywords, c):
            for w in lr.feed(raw):
                n += 1
                if acc is not None:
                    acc.add(w)
        for w in lr.flush():
            n += 1
            if acc is not None:
                acc.add(w)
        if acc is not None:
            acc.finish(str(path), "vllm", c)
        return n

    def summary() -> int:
        return windows(LogAccumulator())

    print(f"{'stage (cumulative)':<28}{'cpu s':>8}  count")
    for name, fn in (("keyword search", search), ("+ parse lines", parse),
                     ("+ windows", windows), ("+ summary", summary)):
        best, n = math.inf, 0
        for _ in range(3):
            c0 = time.process_time()
            n = fn()
            best = min(best, time.process_time() - c0)
        print(f"{name:<28}{best:>8.3f}  {n:,}")


def floor(path: Path, engine: str) -> None:
    """CPU seconds (in-process, best of 3) of the pieces any per-line Python reader pays, alone:
    handing each candidate line to Python (no parsing), one EngineWindow per window, one
    summary add per window; and the whole read with its summary. What is left between the
    pieces' sum and the whole read is parsing, pairing, interval and integrity rules."""
    import dataclasses

    from decodescope.records.window import EngineWindow
    from decodescope.telemetry.logs import iter_windows, llamacpp, sglang, vllm
    from decodescope.telemetry.logs.accumulate import LogAccumulator
    from decodescope.telemetry.logs.parse_counts import ParseCounts
    from decodescope.telemetry.logs.reader import read_lines

    keywords = {"vllm": vllm, "sglang": sglang, "llamacpp": llamacpp}[engine].LEAN_KEYWORDS

    def best(fn: Callable[[], object], n: int = 3) -> float:
        b = math.inf
        for _ in range(n):
            c0 = time.process_time()
            fn()
            b = min(b, time.process_time() - c0)
        return b

    def lines() -> int:
        return sum(1 for _ in read_lines(str(path), lambda: keywords, ParseCounts()))

    windows = list(iter_windows(str(path), engine=engine))
    names = [f.name for f in dataclasses.fields(EngineWindow)]
    rows = [tuple(getattr(w, f) for f in names) for w in windows]

    def summary(ws: Iterable[EngineWindow]) -> None:
        acc = LogAccumulator()
        for w in ws:
            acc.add(w)

    n, n_w = lines(), max(len(windows), 1)
    search = best(lines)
    make = best(lambda: [EngineWindow(*r) for r in rows])
    add = best(lambda: summary(windows))
    whole = best(lambda: summary(iter_windows(str(path), engine=engine)), 2)
    print(f"{path} ({path.stat().st_size / 1e6:.0f} MB), {engine}: {n:,} candidate lines, "
          f"{len(windows):,} windows; CPU s, best of 3")
    print(f"  candidate lines to Python (no parsing) {search:8.3f}")
    print(f"  one EngineWindow per window            {make:8.3f}  ({make / n_w * 1e6:.1f} us each)")
    print(f"  one summary add per window             {add:8.3f}  ({add / n_w * 1e6:.1f} us each)")
    print(f"  sum of the three (the floor)           {search + make + add:8.3f}")
    print(f"  whole read + summary adds              {whole:8.3f}")


def _blocks(path: Path) -> Iterable[bytearray]:
    """The file's whole lines in blocks of the bulk read's size, each after a newline (the
    bytes of a line cut by a block's end come with the next block)."""
    from decodescope.telemetry.logs import bulk_sglang

    rest = b""
    with open(path, "rb", buffering=0) as f:
        while block := f.read(bulk_sglang.BLOCK_BYTES):
            cut = block.rfind(b"\n") + 1
            yield bytearray(b"\n" + rest + block[:cut])
            rest = block[cut:]


def best(fn: Callable[[], object]) -> float:
    """The least CPU seconds of two runs of fn."""
    b = math.inf
    for _ in range(2):
        c0 = time.process_time()
        fn()
        b = min(b, time.process_time() - c0)
    return b


def bulk_floor(path: Path, engine: str) -> None:
    """CPU seconds (in-process, best of 2) of the pieces the bulk read (bulk_vllm.py,
    bulk_sglang.py) pays over the whole file in its 8 MiB blocks, alone: reading the blocks,
    finding the keyword places and matching the line templates (linescan.py), the scans for
    the other engines' watch keywords."""
    import numpy as np

    from decodescope.telemetry.logs import bulk_sglang, bulk_vllm, linescan

    if engine == "llamacpp":
        return _llamacpp_floor(path)
    if engine not in ("vllm", "sglang"):
        sys.exit("--bulk-floor: vllm, sglang or llamacpp")
    kinds = [(bulk_sglang._KEY, bulk_sglang._TEMPLATE)] if engine == "sglang" else \
        [(bulk_vllm._STATS_KEY, bulk_vllm._STATS_T),
         (bulk_vllm._SPEC_KEY, bulk_vllm._spec_template(3))]
    kws = bulk_sglang._WATCH if engine == "sglang" else bulk_vllm._WATCH

    def blocks() -> Iterable[bytearray]:
        return _blocks(path)

    def places(match: bool) -> None:
        scan = None
        for d in blocks():
            scan = scan or linescan.Scan(d)
            buf = np.frombuffer(d, np.uint8)
            for kw, template in kinds:
                at = scan.find(buf, d, kw, len(d))
                if match and len(at):
                    linescan.match(buf, at + len(kw), len(d), template)

    def watch() -> None:
        scan = None
        for d in blocks():
            scan = scan or linescan.Scan(d)
            scan.any_kw(d, kws, len(d))

    read = best(lambda: sum(1 for _ in blocks()))
    find = best(lambda: places(False)) - read
    lines = best(lambda: places(True)) - read - find
    scans = best(watch) - read
    print(f"{path} ({path.stat().st_size / 1e6:.0f} MB), {engine}: CPU s, best of 2")
    print(f"  read the 8 MiB blocks                  {read:8.3f}")
    print(f"  keyword places (minus the read)        {find:8.3f}")
    print(f"  line templates (minus the above)       {lines:8.3f}")
    print(f"  watch-keyword scans (minus the read)   {scans:8.3f}")
    print(f"  sum (the bulk read's floor)            {read + find + lines + scans:8.3f}")


def _llamacpp_floor(path: Path) -> None:
    """The pieces bulk_llamacpp.py pays over the whole file, alone (CPU s, best of 2): the
    blocks; the newline places and the keyword places (one compare per byte the keywords are
    found by, Scan.plan); the same and the line templates (BulkLlamacpp.lines); the whole
    bulk read (order checks, requests summed as arrays, kept windows)."""
    import numpy as np

    from decodescope.telemetry.logs import bulk_llamacpp as bl
    from decodescope.telemetry.logs.accumulate import LogAccumulator
    from decodescope.telemetry.logs.linescan import Scan, compiled
    from decodescope.telemetry.logs.parse_counts import ParseCounts

    def blocks() -> Iterable[bytearray]:
        return _blocks(path)

    def places(templates: bool) -> None:
        scan = by = None
        bulk = bl.BulkLlamacpp(LogAccumulator(), ParseCounts(), 0)
        for d in blocks():
            buf = np.frombuffer(d, np.uint8)
            if scan is None:
                scan = Scan(buf)
                by = scan.plan((*bl.KEYWORDS, bl._SKIP))
            assert by is not None
            nl = scan.find(buf, d, b"\n", len(d))  # as the read: memchr or numpy
            found = scan.find_many(buf, d, bl.KEYWORDS, len(d), by)
            if templates:
                li = np.concatenate([np.searchsorted(nl, q) - 1 for q in found])
                order = np.argsort(li, kind="stable")
                which = np.repeat(np.arange(len(found)), [len(q) for q in found])[order]
                bulk.lines(buf, len(d), nl[li[order]] + 1, which)

    read = best(lambda: sum(1 for _ in blocks()))
    find = best(lambda: places(False)) - read
    lines = best(lambda: places(True)) - read - find
    whole = best(lambda: bl.read(str(path), LogAccumulator(), ParseCounts(), 1000))
    print(f"{path} ({path.stat().st_size / 1e6:.0f} MB), llamacpp: CPU s, best of 2; "
          f"compiled parts: {compiled() is not None}")
    print(f"  read the 8 MiB blocks                    {read:8.3f}")
    print(f"  newline and keyword places               {find:8.3f}")
    print(f"  line templates (stamps, numbers)         {lines:8.3f}")
    print(f"  whole bulk read (all of it, and the sum) {whole:8.3f}")


def sglang_generate(path: Path, size_mb: int, seed: int = 1) -> None:
    """A realistic SGLang server log (synthetic): per request a `Prefill batch.` line and a
    uvicorn access line; while decoding a `Decode batch,` line every 40 batch steps (EAGLE,
    accept len), a health probe every 10 s; idle 02:00-04:00 (SGLang then logs no Decode)."""
    rng = random.Random(seed)
    target = size_mb * (1 << 20)
    written, t = 0, T_START
    with open(path, "w", buffering=1 << 20) as f:
        while written < target:
            chunk: list[str] = []
            for _ in range(1000):
                t += INTERVAL_S
                lam = request_rate(t)
                head = datetime.fromtimestamp(t - INTERVAL_S).strftime("[%Y-%m-%d %H:%M:%S")
                for _ in range(poisson(rng, lam * INTERVAL_S)):
                    chunk.append(f"{head} TP0] Prefill batch, #new-seq: 1, #new-token: "
                                 f"{rng.randint(20, 3000)}, #cached-token: {rng.randint(0, 500)}, "
                                 "token usage: 0.05, #running-req: 3, #queue-req: 0, ")
                    chunk.append(f'[{head[1:]}] INFO:     127.0.0.1:{rng.randint(30000, 60000)} - '
                                 '"POST /v1/chat/completions HTTP/1.1" 200 OK')
                chunk.append(f'[{head[1:]}] INFO:     127.0.0.1:{rng.randint(30000, 60000)} - '
                             '"GET /health HTTP/1.1" 200 OK')
                if lam == 0:
                    continue
                running = max(1, min(16, round(lam * 4 + rng.gauss(0, 1))))
                step_s = 0.025 + 0.002 * running
                dt = 0.0
                while dt + 40 * step_s <= INTERVAL_S:  # a Decode line every 40 batch steps
                    dt += 40 * step_s
                    acc = rng.uniform(2.2, 3.2)
                    stamp = datetime.fromtimestamp(t - INTERVAL_S + dt).strftime(
                        "[%Y-%m-%d %H:%M:%S")
                    chunk.append(
                        f"{stamp} TP0] Decode batch, #running-req: {running}, #token: "
                        f"{rng.randint(2000, 90000)}, token usage: {rng.uniform(0.02, 0.6):.2f}, "
                        f"accept len: {acc:.2f}, accept rate: {acc / 4:.2f}, cuda graph: True, "
                        f"gen throughput (token/s): {running * acc / step_s:.2f}, #queue-req: 0, ")
            text = "\n".join(chunk) + "\n"
            f.write(text)
            written += len(text)


def _elapsed(t_s: float) -> str:
    """llama.cpp's elapsed stamp `M.SS.mmm.uuu` of t_s seconds (rounded to the microsecond
    first: a fraction rounding up to a whole second carries into the seconds)."""
    m, rest = divmod(int(round(t_s * 1e6)), 60_000_000)
    s, us = divmod(rest, 1_000_000)
    return f"{m}.{s:02d}.{us // 1000:03d}.{us % 1000:03d}"


def llamacpp_generate(path: Path, size_mb: int, seed: int = 1) -> None:
    """A realistic llama.cpp server log (synthetic; PR #24536 format, draft-mtp k=3): per
    request the launch and request lines, the `print_timing` block (prompt eval, eval, total,
    draft acceptance with MAL, statistics), release and idle lines; elapsed-time stamps."""
    rng = random.Random(seed)
    target = size_mb * (1 << 20)
    written, t, task = 0, 5.0, 0
    with open(path, "w", buffering=1 << 20) as f:
        while written < target:
            chunk: list[str] = []
            for _ in range(1000):
                task += 1
                slot = task % 4
                prompt_n, n_gen = rng.randint(20, 2000), rng.randint(64, 1024)
                acc_rate = rng.uniform(0.55, 0.8)
                steps = max(1, round(n_gen / (1 + 3 * acc_rate)))
                accepted = n_gen - 1 - steps if n_gen - 1 > steps else 0
                drafts = steps
                generated = 3 * drafts
                eval_ms = (n_gen - 1) / 110.0 * 1e3
                pre = f"I slot print_timing: id  {slot} | task {task} | "
                e = _elapsed(t)
                t += rng.uniform(0.5, 4.0)
                chunk += [
                    f"{e} I slot launch_slot_: id  {slot} | task {task} | processing task",
                    f"{e} I slot update_slots: id  {slot} | task {task} | new prompt, n_ctx_slot = "
                    f"32768, n_keep = 0, task.n_tokens = {prompt_n}",
                    f"{e} I srv  log_server_r: request: POST /v1/chat/completions 127.0.0.1 200",
                    f"{e} {pre}prompt eval time = {prompt_n / 2.0:10.2f} ms / {prompt_n:5d} "
                    f"tokens ( 0.50 ms per token, 2000.00 tokens per second)",
                    f"{e} {pre}       eval time = {eval_ms:10.2f} ms / {n_gen:5d} tokens "
                    f"( {eval_ms / n_gen:.2f} ms per token, {n_gen / eval_ms * 1e3:.2f} tokens "
                    "per second)",
                    f"{e} {pre}      total time = {eval_ms + prompt_n / 2.0:10.2f} ms / "
                    f"{prompt_n + n_gen:5d} tokens",
                    f"{e} {pre}   graphs reused = {steps}",
                    f"{e} {pre}draft acceptance = {accepted / generated:.5f} ({accepted:5d} "
                    f"accepted / {generated:5d} generated), mean acceptance length = "
                    f"{1 + accepted / drafts:.2f}, acceptance rate per position = (0.800, 0.600,"
                    " 0.400)",
                    f"{e} I statistics     draft-mtp: #calls(b,g,a) =    1 {drafts:6d} {drafts:6d}"
                    f", #gen drafts = {drafts:6d}, #acc drafts = {drafts // 2:6d}, #gen tokens = "
                    f"{generated:6d}, #acc tokens = {accepted:6d}, #mean acc len = "
                    f"{1 + accepted / drafts:.2f}, #acc rate/pos = (0.800, 0.600, 0.400), "
                    "dur(b,g,a) = 0.005, 325.555, 0.114 ms",
                    f"{e} I slot      release: id  {slot} | task {task} | stop processing: "
                    f"n_tokens = {prompt_n + n_gen}, truncated = 0",
                    f"{e} I srv  update_slots: all slots are idle",
                ]
            text = "\n".join(chunk) + "\n"
            f.write(text)
            written += len(text)


GENERATORS = {"vllm": lambda p, mb: generate(p, mb, "realistic"),
              "sglang": sglang_generate, "llamacpp": llamacpp_generate}
GREP_KEY = {"vllm": "Avg generation throughput", "sglang": "Decode batch",
            "llamacpp": "eval time ="}

# The child: what `decodescope logs FILE --json` does (summary JSON to /dev/null); sequential
# (parallel=False) so the figure does not depend on the machine's load. Prints the window count.
RUN = """
import json, sys
from decodescope.telemetry.logs import analyze_log
path, since, until = sys.argv[1:4]
s = analyze_log(path, since=since or None, until=until or None, parallel=False)
with open("/dev/null", "w") as f:
    json.dump(s.to_dict(), f, default=str)
print(s.windows_total, s.t_first_s, s.t_last_s)
"""


# Runs the command and reports its rusage: a child's peak RSS starts at its parent's (fork
# copies the high-water mark, exec keeps it), so the child is started from this small
# interpreter (-I -S), not from the benchmark's: the floor is this wrapper's ~10 MB.
WRAP = """
import os, resource, subprocess, sys, time
t0 = time.perf_counter()
rc = subprocess.call(sys.argv[1:])
r = resource.getrusage(resource.RUSAGE_CHILDREN)
sys.stderr.write(f"\\nRUSAGE {rc} {time.perf_counter() - t0} {r.ru_utime + r.ru_stime} {r.ru_maxrss}\\n")
"""


def measure(cmd: list[str], env: dict[str, str]) -> tuple[float, float, float, str]:
    """(wall s, CPU s, peak RSS MB, stdout) of one child process, from
    resource.getrusage(RUSAGE_CHILDREN) in a wrapper process of its own (see WRAP)."""
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", WRAP, *cmd], capture_output=True,
                          env=env, check=False)
    err = proc.stderr.decode(errors="replace")
    tail = err.rstrip().rsplit("\n", 1)[-1].split()
    if not tail or tail[0] != "RUSAGE" or int(tail[1]) not in (0, 1):
        sys.exit(f"{cmd[0]} failed: {err[-800:]}")
    return float(tail[2]), float(tail[3]), int(tail[4]) / 1024, proc.stdout.decode()


def matrix(engines: list[str], sizes: list[int], workdir: Path, src: str | None,
           keep: bool, numpy_too: bool = False) -> None:
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    compiled = subprocess.run(
        [sys.executable, "-c", "from decodescope.telemetry.logs import linescan as l; "
         "print(l._compiled is not None)"], env=env, capture_output=True, text=True,
        check=False).stdout.strip()
    print(f"decodescope from {src or 'the installed package'} (compiled line templates: "
          f"{compiled or 'unknown'}); {os.cpu_count()} CPUs, load "
          f"average {os.getloadavg()[0]:.1f}; warm page cache; one fresh process per row")
    print(f"| {'log':<22}| {'read':<22}| {'wall s':>7} | {'cpu s':>6} | {'peak RSS MB':>11} |"
          f" {'x grep -c (cpu)':>15} | windows")
    print(f"|{'-' * 23}|{'-' * 23}|{'-' * 9}|{'-' * 8}|{'-' * 13}|{'-' * 17}|--------")
    for size in sizes:
        for eng in engines:
            path = workdir / f"{eng}-{size}mb.log"
            if not path.exists():
                t0 = time.perf_counter()
                GENERATORS[eng](path, size)
                print(f"generated {path} ({path.stat().st_size / 1e6:.0f} MB) in "
                      f"{time.perf_counter() - t0:.0f} s", file=sys.stderr)
            subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)
            label = f"{eng} {path.stat().st_size / (1 << 30):.2f} GiB"
            py = [sys.executable, "-c", RUN, str(path)]
            wall, cpu, rss, out = measure(["grep", "-c", GREP_KEY[eng], str(path)], env)
            grep_cpu = max(cpu, 1e-3)
            print(f"| {label:<22}| {'grep -c':<22}| {wall:>7.2f} | {cpu:>6.2f} | {rss:>11.0f} |"
                  f" {'1.0':>15} | {out.strip()} lines", flush=True)
            if numpy_too:  # the same scan with the templates run by numpy (no C module)
                wall, cpu, rss, out = measure([*py, "", ""],
                                              {**env, "DECODESCOPE_PURE_NUMPY": "1"})
                print(f"| {label:<22}| {'full scan, numpy only':<22}| {wall:>7.2f} | "
                      f"{cpu:>6.2f} | {rss:>11.0f} | {cpu / grep_cpu:>15.1f} | "
                      f"{out.split()[0]}", flush=True)
            wall, cpu, rss, out = measure([*py, "", ""], env)
            n, t0s, t1s = out.split()
            print(f"| {label:<22}| {'full scan':<22}| {wall:>7.2f} | {cpu:>6.2f} | {rss:>11.0f} |"
                  f" {cpu / grep_cpu:>15.1f} | {n}", flush=True)
            if t0s == "None" or t1s == "None":
                print(f"| {label:<22}| {'30-min window':<22}| {'n/a':>7} | {'':>6} | {'':>11} |"
                      f" {'':>15} | (no clock time)", flush=True)
            else:
                mid = float(t0s) + (float(t1s) - float(t0s)) * 0.6
                since = datetime.fromtimestamp(mid).strftime("%m-%d %H:%M")
                until = datetime.fromtimestamp(mid + 1800).strftime("%m-%d %H:%M")
                wall, cpu, rss, out = measure([*py, since, until], env)
                print(f"| {label:<22}| {'30-min window (seek)':<22}| {wall:>7.2f} | {cpu:>6.2f} |"
                      f" {rss:>11.0f} | {cpu / grep_cpu:>15.1f} | {out.split()[0]}", flush=True)
            if not keep:
                path.unlink()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes-mb", default="1024,4096",
                    help="comma-separated log sizes in MiB (default 1 GiB and 4 GiB)")
    ap.add_argument("--engines", default="vllm,sglang,llamacpp")
    ap.add_argument("--dir", help="where the logs are generated (reused when present; kept)")
    ap.add_argument("--src", help="a decodescope source tree to measure instead of the "
                    "installed one (PYTHONPATH of the children): the code before a change")
    ap.add_argument("--numpy-too", action="store_true",
                    help="also the full scan with every line template run by numpy "
                         "(DECODESCOPE_PURE_NUMPY=1: the code without its C module)")
    ap.add_argument("--stages", metavar="FILE",
                    help="instead of the table, time analyze_log's stages in-process on FILE")
    ap.add_argument("--bulk-floor", metavar="FILE",
                    help="instead of the table, time (in-process) the pieces the bulk read "
                         "pays on FILE (read, keyword places, line templates, keyword scans), "
                         "a vLLM or SGLang "
                         "log of the first of --engines")
    ap.add_argument("--floor", metavar="FILE",
                    help="instead of the table, time (in-process) the pieces any per-line "
                         "Python reader pays on FILE, a log of the first of --engines")
    args = ap.parse_args()
    if args.stages:
        stages(Path(args.stages))
        return 0
    engines = [e for e in args.engines.split(",") if e]
    if unknown := [e for e in engines if e not in GENERATORS]:
        ap.error(f"unknown engine(s) {unknown}: use {', '.join(GENERATORS)}")
    if args.floor:
        floor(Path(args.floor), engines[0])
        return 0
    if args.bulk_floor:
        bulk_floor(Path(args.bulk_floor), engines[0])
        return 0
    sizes = [int(s) for s in args.sizes_mb.split(",") if s]
    workdir = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench_logs_"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        matrix(engines, sizes, workdir, args.src, keep=args.dir is not None,
               numpy_too=args.numpy_too)
    finally:
        if not args.dir:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
