"""Load the server queues: its capacity where it tells it, and whether the offered load waited.

A server runs at most so many requests at once (llama.cpp: slots; vLLM: `--max-num-seqs`;
SGLang: `max_running_requests`); more in flight wait in its queue, and their TTFT includes
that wait. Where the capacity comes from (shared/reference/engine-formats.md):

- llama.cpp: `/props` `total_slots` (engine detection keeps the reply; the fingerprint too),
  else `-np` / `--parallel` on the launch command line;
- SGLang: `/get_server_info` `max_running_requests` (top level or per DP rank), else
  `--max-running-requests` on the launch command line;
- vLLM: `--max-num-seqs` on the launch command line (the fingerprint's process section; no
  HTTP endpoint tells it).

Independently of the capacity, the engine's own queue gauge (vLLM
`vllm:num_requests_waiting`, SGLang `sglang:num_queue_reqs`, llama.cpp
`llamacpp:requests_deferred`) read during the run says that requests waited.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from decodescope.records.stored_run import StoredRun

# Launch options that set the capacity, per engine (the value follows, or comes after `=`).
CAPACITY_FLAGS = {"vllm": ("--max-num-seqs", "--max_num_seqs"),
                  "sglang": ("--max-running-requests",), "llamacpp": ("--parallel", "-np")}
QUEUE_GAUGE = {"vllm": "vllm:num_requests_waiting", "sglang": "sglang:num_queue_reqs",
               "llamacpp": "llamacpp:requests_deferred"}
# A window's mean queue length at or above this counts as requests waiting (the gauge is read
# between steps: a request that arrives and starts within one step shows as a fraction).
WAITING_SEEN = 0.5


@dataclass(frozen=True)
class Capacity:
    slots: int  # requests the server runs at once
    source: str  # where that was read, in words


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int) and v > 0:
        return v
    if isinstance(v, str) and v.strip().isascii() and v.strip().isdigit() and int(v) > 0:
        return int(v)  # isascii: str.isdigit accepts "²", which int() refuses
    return None


def _kind(engine: str | None) -> str | None:
    n = (engine or "").lower().replace(".", "").replace("-", "")
    return next((k for k in CAPACITY_FLAGS if k in n), None)


def cmdline_value(argv: list[str], flags: tuple[str, ...]) -> int | None:
    """The integer after one of `flags` (`--flag N` or `--flag=N`), the last one given."""
    found = None
    for i, arg in enumerate(argv):
        for flag in flags:
            if arg == flag and i + 1 < len(argv):
                found = _int(argv[i + 1]) or found
            elif arg.startswith(flag + "="):
                found = _int(arg.split("=", 1)[1]) or found
    return found


def _fp_value(fp: dict[str, Any] | None, section: str, name: str) -> Any:
    item = (((fp or {}).get("sections") or {}).get(section) or {}).get(name) or {}
    return item.get("value") if isinstance(item, dict) and item.get("status") == "collected" \
        else None


def server_capacity(engine: str | None, engine_raw: dict[str, Any] | None,
                    fingerprint: dict[str, Any] | None) -> Capacity | None:
    """The server's capacity where it tells it, else None (never a guessed default)."""
    raw = engine_raw or {}
    props = raw.get("props") if isinstance(raw.get("props"), dict) else \
        _fp_value(fingerprint, "endpoint", "props")
    if isinstance(props, dict) and _int(props.get("total_slots")):
        return Capacity(int(props["total_slots"]), "llama.cpp /props total_slots")
    info = raw.get("server_info") if isinstance(raw.get("server_info"), dict) else \
        _fp_value(fingerprint, "endpoint", "server_info")
    if isinstance(info, dict):
        per_rank = [s.get("max_running_requests") for s in info.get("internal_states") or []
                    if isinstance(s, dict)]
        n = _int(info.get("max_running_requests")) or next(
            (x for x in map(_int, per_rank) if x), None)
        if n:
            return Capacity(n, "SGLang /get_server_info max_running_requests")
    argv = _fp_value(fingerprint, "process", "cmdline")
    kind = _kind(engine) or _kind(_fp_value(fingerprint, "endpoint", "engine"))
    if isinstance(argv, list) and kind:
        flags = CAPACITY_FLAGS[kind]
        n = cmdline_value([str(a) for a in argv], flags)
        if n:
            return Capacity(n, f"{flags[0]} {n} on the launch command line")
    return None


def queueing(run: StoredRun, offered: int | None) -> dict[str, Any] | None:
    """Whether the probe's offered load (`offered` requests in flight at most) queued at the
    server: its capacity, the most requests its queue gauge showed waiting, and one line that
    says so (`text`, None when nothing waited). None without an offered load."""
    if not offered:
        return None
    cap = server_capacity(run.engine, (run.meta.get("engine_info") or {}).get("raw"),
                          run.fingerprint)
    waits = [w.waiting for w in run.windows if w.waiting is not None and "reset" not in w.flags]
    waiting_max = max(waits) if waits else None
    kind = _kind(run.engine)
    gauge = QUEUE_GAUGE.get(kind or "", "the engine's queue gauge")
    over = cap is not None and offered > cap.slots
    seen = waiting_max is not None and waiting_max >= WAITING_SEEN
    text = None
    if over and cap is not None:
        text = (f"{offered} offered, {cap.slots} slots ({cap.source}): {offered - cap.slots} "
                f"requests waited at a time; TTFT includes queueing")
        if seen and waiting_max is not None:
            # a window's value is the gauge averaged over the window, not a count at a time
            text += f" ({gauge} averaged up to {waiting_max:.3g} over a scrape window)"
    elif seen and waiting_max is not None:
        text = (f"{offered} offered; {gauge} averaged up to {waiting_max:.3g} requests "
                "waiting over a scrape window"
                + (f" ({cap.slots} slots, {cap.source})" if cap else " (capacity not told)")
                + ": TTFT includes queueing")
    return {"offered": offered, "slots": cap.slots if cap else None,
            "capacity_source": cap.source if cap else None, "waiting_max": waiting_max,
            "queue_gauge": gauge if waits else None, "queued": bool(text), "text": text}
