"""Benchmark: the log reader against `grep -c`, on realistic generated logs of each engine.

One run prints, side by side, for each engine (vLLM, SGLang, llama.cpp) and size (default
1 GiB and 4 GiB): `grep -c KEYWORD FILE`, decodescope's full scan (what `decodescope logs FILE
--json` computes) and a 30-minute `--since/--until` window (the seek), each in a fresh
process: wall time, CPU time and peak RSS of that child (rusage of a small wrapper process),
CPU seconds per GiB, and whether the targets are met. Targets (issue 33): full scan <= 30 s
CPU per GiB (vLLM, SGLang) and <= 60 s (llama.cpp), peak RSS <= 100 MB, window < 1 s.
`--src DIR` measures another source tree (the code before a change: `git worktree add
/tmp/before HEAD`, then `--src /tmp/before/src`).

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
    nice python bench/bench_logs.py --sizes 0.25             # a quick run
    nice python bench/bench_logs.py --sizes 1 --engines vllm --src /tmp/before/src
    python bench/bench_logs.py --stages FILE                 # in-process stage timings
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

# The child: what `decodescope logs FILE --json` does (summary JSON to /dev/null). Prints the
# window count and the first and last window times.
RUN = """
import json, sys
from decodescope.telemetry.logs import analyze_log
path, since, until = sys.argv[1:4]
s = analyze_log(path, since=since or None, until=until or None)
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


# Targets (issue 33): full-scan CPU seconds per GiB, peak RSS, window wall time.
SCAN_CPU_PER_GIB = {"vllm": 30.0, "sglang": 30.0, "llamacpp": 60.0}
PEAK_RSS_MB = 100.0
WINDOW_WALL_S = 1.0


def _row(label: str, read: str, wall: float, cpu: float, rss: float, per_gib: str,
         target: str, windows: str) -> None:
    print(f"| {label:<18}| {read:<14}| {wall:>7.2f} | {cpu:>7.2f} | {rss:>7.0f} | {per_gib:>9} |"
          f" {target:<28}| {windows}", flush=True)


def _ok(good: bool) -> str:
    return "ok" if good else "MISSED"


def matrix(engines: list[str], sizes: list[float], workdir: Path, src: str | None,
           keep: bool) -> None:
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    where = src or (f"PYTHONPATH {os.environ['PYTHONPATH']}" if os.environ.get("PYTHONPATH")
                    else "the installed package")
    print(f"decodescope from {where}; {os.cpu_count()} CPUs, load "
          f"average {os.getloadavg()[0]:.1f}; warm page cache; one fresh process per row")
    print(f"| {'log':<18}| {'read':<14}| {'wall s':>7} | {'cpu s':>7} | {'RSS MB':>7} |"
          f" {'cpu s/GiB':>9} | {'target':<28}| windows")
    print(f"|{'-' * 19}|{'-' * 15}|{'-' * 9}|{'-' * 9}|{'-' * 9}|{'-' * 11}|{'-' * 29}|--------")
    for size in sizes:
        for eng in engines:
            mb = max(1, round(size * 1024))
            path = workdir / f"{eng}-{mb}mb.log"
            if not path.exists():
                t0 = time.perf_counter()
                GENERATORS[eng](path, mb)
                print(f"generated {path} ({path.stat().st_size / 1e6:.0f} MB) in "
                      f"{time.perf_counter() - t0:.0f} s", file=sys.stderr)
            subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)
            gib = path.stat().st_size / (1 << 30)
            label = f"{eng} {gib:.2f} GiB"
            py = [sys.executable, "-c", RUN, str(path)]
            wall, cpu, rss, out = measure(["grep", "-c", GREP_KEY[eng], str(path)], env)
            _row(label, "grep -c", wall, cpu, rss, f"{cpu / gib:.2f}", "", f"{out.strip()} lines")
            wall, cpu, rss, out = measure([*py, "", ""], env)
            n, t0s, t1s = out.split()
            limit = SCAN_CPU_PER_GIB[eng]
            _row(label, "full scan", wall, cpu, rss, f"{cpu / gib:.2f}",
                 f"<={limit:.0f} s/GiB {_ok(cpu / gib <= limit)}, RSS {_ok(rss <= PEAK_RSS_MB)}",
                 n)
            if t0s == "None" or t1s == "None":
                print(f"| {label:<18}| {'30-min window':<14}| {'n/a':>7} | {'':>7} | {'':>7} |"
                      f" {'':>9} | {'':<28}| (no clock time)", flush=True)
            else:
                mid = float(t0s) + (float(t1s) - float(t0s)) * 0.6
                since = datetime.fromtimestamp(mid).strftime("%m-%d %H:%M")
                until = datetime.fromtimestamp(mid + 1800).strftime("%m-%d %H:%M")
                wall, cpu, rss, out = measure([*py, since, until], env)
                _row(label, "30-min window", wall, cpu, rss, "",
                     f"<1 s {_ok(wall < WINDOW_WALL_S)}, RSS {_ok(rss <= PEAK_RSS_MB)}",
                     out.split()[0])
            if not keep:
                path.unlink()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,4",
                    help="comma-separated log sizes in GiB (default 1 and 4; 0.25 for a quick run)")
    ap.add_argument("--engines", default="vllm,sglang,llamacpp")
    ap.add_argument("--dir", help="where the logs are generated (reused when present; kept)")
    ap.add_argument("--src", help="a decodescope source tree to measure instead of the "
                    "installed one (PYTHONPATH of the children): the code before a change")
    ap.add_argument("--stages", metavar="FILE",
                    help="instead of the table, time analyze_log's stages in-process on FILE")
    args = ap.parse_args()
    if args.stages:
        stages(Path(args.stages))
        return 0
    engines = [e for e in args.engines.split(",") if e]
    if unknown := [e for e in engines if e not in GENERATORS]:
        ap.error(f"unknown engine(s) {unknown}: use {', '.join(GENERATORS)}")
    try:
        sizes = [float(s) for s in args.sizes.split(",") if s]
    except ValueError:
        ap.error(f"--sizes {args.sizes!r}: give sizes in GiB, e.g. 0.25,1")
    if not sizes or any(s <= 0 for s in sizes):
        ap.error("--sizes: give positive sizes in GiB, e.g. 0.25,1")
    workdir = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench_logs_"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        matrix(engines, sizes, workdir, args.src, keep=args.dir is not None)
    finally:
        if not args.dir:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
