"""Benchmark: reading a log (analyze_log, what `decodescope logs` runs) against `grep -c`.

Generates a synthetic (seeded) vLLM V1 log of at least --size-mb (default 1024 MB), warms the
page cache and times, best of --repeat, each in a fresh process: grep -c over the whole file,
the sequential whole read, the parallel whole read (every core), a 30-minute --since/--until
window found by seeking, and the same window by a whole read. Prints a Markdown table
(docs/logs.md holds a measured one) and deletes the file (unless --keep or --path names an
existing file to reuse).

Profiles (what a busy vLLM 0.11+ server with default logging writes; all synthetic):
  realistic  per 10 s stats interval while serving: one `Engine 000:` line, one
             `SpecDecoding metrics:` line (MTP k=3), a uvicorn access line per request
             (0.5-4 req/s over a day cycle, idle 2 h a night: stats lines suppressed), a
             health probe every 10 s and a Prometheus scrape every 15 s.
  request-logging  realistic, plus vLLM's per-request log lines (`--enable-log-requests`:
             `Received request ... prompt: '...' params: SamplingParams(...)` and `Added
             request`): stats lines are a small share of the bytes.
  dense      stats lines only (Engine + SpecDecoding every interval): the worst case for
             the reader, every line is a candidate.

    python bench/bench_logs.py                      # 1 GB realistic, best of 3
    python bench/bench_logs.py --profile dense --size-mb 256
"""

from __future__ import annotations

import argparse
import math
import os
import random
import resource
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


def _child_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd: list[str], repeat: int) -> tuple[float, float, str]:
    """(best wall seconds, best CPU seconds, stdout). CPU time is the fair figure on a
    shared machine: wall time there includes waiting for a core."""
    best_wall = best_cpu = math.inf
    out = ""
    for _ in range(repeat):
        c0, t0 = _child_cpu_s(), time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        best_wall = min(best_wall, time.perf_counter() - t0)
        best_cpu = min(best_cpu, _child_cpu_s() - c0)
        if proc.returncode not in (0, 1):
            sys.exit(f"{cmd[0]} failed ({proc.returncode}): {proc.stderr[-500:]}")
        out = proc.stdout
    return best_wall, best_cpu, out


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


RUN = """
import sys, time
from decodescope.telemetry.logs import analyze_log
path, mode, since, until = sys.argv[1:5]
if mode == "no-seek":
    from decodescope.telemetry.logs import seek
    seek.SEEK_MIN_BYTES = 1 << 62  # the whole read, as before seeking existed
s = analyze_log(path, since=since or None, until=until or None, year=2026,
                parallel=(mode == "parallel"))
print(s.windows_total)
"""


def table(path: Path, size_mb: float, profile: str, repeat: int) -> None:
    """Seek vs sequential whole read vs parallel whole read vs grep (best of `repeat`)."""
    from decodescope.telemetry.logs import analyze_log

    whole = analyze_log(str(path), year=2026)
    assert whole.t_first_s is not None and whole.t_last_s is not None
    mid = whole.t_first_s + (whole.t_last_s - whole.t_first_s) * 0.6
    since = datetime.fromtimestamp(mid).strftime("%m-%d %H:%M")
    until = datetime.fromtimestamp(mid + 1800).strftime("%m-%d %H:%M")
    py = [sys.executable, "-c", RUN, str(path)]
    rows = [("grep -c (whole file)", ["grep", "-c", "Avg generation throughput", str(path)]),
            ("logs, sequential", [*py, "sequential", "", ""]),
            ("logs, parallel", [*py, "parallel", "", ""]),
            ("logs --since/--until 30 min (seek)", [*py, "sequential", since, until]),
            ("same 30 min, whole read", [*py, "no-seek", since, until])]
    print(f"file: {size_mb:.0f} MB synthetic vLLM V1 log ({profile}), {whole.windows_total:,} "
          f"windows; best of {repeat}; {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}; window {since} .. {until}")
    print(f"| {'read':<34}| {'wall s':>7} | {'cpu s':>6} | {'MB/s':>6} | {'vs sequential':>13} |")
    print(f"|{'-' * 35}|{'-' * 9}|{'-' * 8}|{'-' * 8}|{'-' * 15}|")
    base = None
    for name, cmd in rows:
        wall, cpu, _ = timed(cmd, repeat)
        if name == "logs, sequential":
            base = wall
        rel = f"{base / wall:.1f}x faster" if base and name != "logs, sequential" \
            and not name.startswith("grep") else "-"
        print(f"| {name:<34}| {wall:>7.2f} | {cpu:>6.2f} | {size_mb / wall:>6.0f} | {rel:>13} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--profile", choices=["realistic", "request-logging", "dense"],
                    default="realistic")
    ap.add_argument("--path", help="log file to use (generated if missing; kept)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per tool; the best counts")
    ap.add_argument("--keep", action="store_true", help="keep the generated file")
    ap.add_argument("--stages", action="store_true",
                    help="instead of the grep comparison, time analyze_log's stages in-process")
    args = ap.parse_args()

    tmpdir = None
    if args.path:
        path = Path(args.path)
    else:
        tmpdir = tempfile.mkdtemp(prefix="bench_logs_")
        path = Path(tmpdir) / "vllm-synthetic.log"
    try:
        if not path.exists():
            t0 = time.perf_counter()
            generate(path, args.size_mb, args.profile)
            print(f"generated {path} ({path.stat().st_size / 1e6:.0f} MB, {args.profile}) "
                  f"in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        size_mb = path.stat().st_size / 1e6
        subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)  # warm cache
        if args.stages:
            stages(path)
            return 0
        table(path, size_mb, args.profile, args.repeat)
        return 0
    finally:
        if tmpdir is not None and not args.keep:
            shutil.rmtree(tmpdir, ignore_errors=True)
        elif tmpdir is not None:
            print(f"kept {path}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
