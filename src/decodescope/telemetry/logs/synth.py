"""vLLM-format log lines for tests and the log-reader benchmark (synthetic: label it so).

The text follows the 2026 V1 format seen in real logs (shared reference §1.1-1.2): an
`Engine NNN:` stats line, then its `SpecDecoding metrics:` line (V1-d), plus uvicorn noise.
"""

from __future__ import annotations

from datetime import datetime


def stamp(t_s: float) -> str:
    return datetime.fromtimestamp(t_s).strftime("%m-%d %H:%M:%S")


def engine_line(t_s: float, gen_tput: float, *, prompt_tput: float = 0.0, running: int = 1,
                waiting: int = 0, engine: int | None = 0, pid: int | None = 5020,
                kv_pct: float = 12.5, extra: str = "") -> str:
    head = f"(APIServer pid={pid}) " if pid is not None else ""
    eng = f"Engine {engine:03d}: " if engine is not None else ""
    return (f"{head}INFO {stamp(t_s)} [loggers.py:271] {eng}Avg prompt throughput: "
            f"{prompt_tput:.1f} tokens/s, Avg generation throughput: {gen_tput:.1f} tokens/s, "
            f"Running: {running} reqs, Waiting: {waiting} reqs, GPU KV cache usage: {kv_pct:.1f}%, "
            f"Prefix cache hit rate: 0.0%{extra}")


def spec_counts(drafts: int, per_pos_accepted: list[int]) -> tuple[int, int, list[float], float]:
    """(accepted, drafted, per-position rates, MAL) for `drafts` steps of k = len(list)."""
    k = len(per_pos_accepted)
    accepted = sum(per_pos_accepted)
    rates = [a / drafts for a in per_pos_accepted]
    return accepted, drafts * k, rates, 1.0 + accepted / drafts


def spec_line(t_s: float, drafts: int, per_pos_accepted: list[int], *, interval_s: float = 10.0,
              pid: int | None = 5020) -> str:
    accepted, drafted, rates, mal = spec_counts(drafts, per_pos_accepted)
    head = f"(APIServer pid={pid}) " if pid is not None else ""
    per_pos = ", ".join(f"{r:.3f}" for r in rates)
    return (f"{head}INFO {stamp(t_s)} [metrics.py:101] SpecDecoding metrics: Mean acceptance "
            f"length: {mal:.2f}, Accepted throughput: {accepted / interval_s:.2f} tokens/s, "
            f"Drafted throughput: {drafted / interval_s:.2f} tokens/s, Accepted: {accepted} "
            f"tokens, Drafted: {drafted} tokens, Per-position acceptance rate: {per_pos}, "
            f"Avg Draft acceptance rate: {100 * accepted / drafted:.1f}%")


def access_line(port: int, path: str = "/v1/chat/completions", method: str = "POST",
                pid: int | None = 5020) -> str:
    head = f"(APIServer pid={pid}) " if pid is not None else ""
    return f'{head}INFO:     127.0.0.1:{port} - "{method} {path} HTTP/1.1" 200 OK'
