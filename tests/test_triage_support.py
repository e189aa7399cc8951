"""Builders shared by the triage / verdict / baseline tests (no tests here).

The seed's numbers (shared/seed/seed-en.md, "numbers side by side"): the parity probe two
nights earlier read engine 10 s windows median 180.5 / peak 234 at MAL 4.04–5.07; tonight's
retest 95.5–120.2 at MAL 2.62–3.14; decode ≈ step rate (≈ 39–42 steps/s) × MAL.
"""

from __future__ import annotations

import random
from datetime import datetime
from pathlib import Path
from typing import Any

from decodescope.caliber.resolve import resolve
from decodescope.records.window import EngineWindow
from decodescope.store import runs as sr
from decodescope.store.db import Store

SPEC_K = 6  # the seed's MTP stack drafts 6 tokens per step


def seed_windows(t0: float, n: int, mal_lo: float, mal_hi: float, seed: int,
                 step_lo: float = 39.0, step_hi: float = 42.0, running: float = 1,
                 interval_s: float = 10.0) -> list[EngineWindow]:
    """n engine windows of interval_s with uniform MAL and step rate; D = S × M exactly."""
    r = random.Random(seed)
    out = []
    for i in range(n):
        s, m = r.uniform(step_lo, step_hi), r.uniform(mal_lo, mal_hi)
        drafts = round(s * interval_s * running)
        acc = round(drafts * (m - 1))
        out.append(EngineWindow("log", "vllm", t0 + interval_s * i, t0 + interval_s * (i + 1),
                                generation_tokens=drafts + acc, drafts=drafts,
                                draft_tokens=drafts * SPEC_K, accepted_tokens=acc,
                                running=running, waiting=0))
    return out


def write_vllm_log(path: Path, windows: list[EngineWindow], *, append: bool = False,
                   idle_after: bool = True) -> None:
    """A vLLM V1 log (newest format: Engine line + SpecDecoding line every interval)."""
    lines = []
    for w in windows:
        assert w.t_end_s is not None and w.duration_s is not None
        stamp = datetime.fromtimestamp(w.t_end_s).strftime("%m-%d %H:%M:%S")
        gen = (w.generation_tokens or 0) / w.duration_s
        acc, drafted, drafts = w.accepted_tokens or 0, w.draft_tokens or 0, w.drafts or 1
        mal = 1 + acc / drafts
        per_pos = ", ".join(f"{(mal - 1) / SPEC_K:.3f}" for _ in range(SPEC_K))  # Σ = MAL − 1
        lines.append(f"(APIServer pid=4242) INFO {stamp} [loggers.py:271] Engine 000: Avg prompt "
                     f"throughput: 0.0 tokens/s, Avg generation throughput: {gen:.1f} tokens/s, "
                     f"Running: {w.running:g} reqs, Waiting: 0 reqs, GPU KV cache usage: 1.2%, "
                     f"Prefix cache hit rate: 0.0%")
        lines.append(f"(APIServer pid=4242) INFO {stamp} [metrics.py:96] SpecDecoding metrics: "
                     f"Mean acceptance length: {mal:.2f}, Accepted throughput: "
                     f"{acc / w.duration_s:.2f} tokens/s, Drafted throughput: "
                     f"{drafted / w.duration_s:.2f} tokens/s, Accepted: {acc} tokens, Drafted: "
                     f"{drafted} tokens, Per-position acceptance rate: {per_pos}, Avg Draft "
                     f"acceptance rate: {100 * acc / max(drafted, 1):.1f}%")
    with open(path, "a" if append else "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")


def trial(decode: float | None, mal: float | None = None, step: float | None = None,
          status: str = "ok", **extra: Any) -> dict[str, Any]:
    """A per-trial result as analysis.run_result writes it (engine_* keys when measured)."""
    eng = step * mal if (step is not None and mal is not None) else None
    return {"status": status, "decode_rate": decode, "engine_decode_rate": eng,
            "engine_mal": mal, "engine_step_rate": step, **extra}


def store_run(store: Store, caliber: str, trials: list[dict[str, Any]], *,
              fingerprint: dict[str, Any] | None = None, labels: dict[str, str] | None = None,
              contamination: dict[str, Any] | None = None, length_decay_pct: float | None = None,
              url: str = "http://127.0.0.1:8000", engine: str = "vllm",
              simulated: bool = False, caliber_status: str = "ok") -> int:
    """A completed probe run with the given per-trial results (no request traces)."""
    cal = resolve(caliber)
    rid = sr.create_run(store, url=url, model="m", engine=engine, caliber=cal.to_dict(),
                        caliber_ref=cal.ref, caliber_identity=cal.identity,
                        labels=labels or {}, simulated=simulated, fingerprint=fingerprint)
    ts = []
    for i, t in enumerate(trials):
        t = {"idx": i, **t}
        sr.add_trial(store, rid, i, status=t["status"], started_at=1.0, wall_anchor_s=0.0,
                     result={"requests": [], "findings": []}, requests=[])
        ts.append(t)
    result: dict[str, Any] = {"result_version": 1, "trials": ts, "client": {}, "engine": {},
                              "caliber_status": caliber_status, "findings": []}
    if contamination is not None:
        result["contamination"] = contamination
    if length_decay_pct is not None:
        result["length_decay"] = {"per_1k_pct": length_decay_pct}
    sr.update_run(store, rid, status="complete", result=result)
    return rid


def fingerprint(threads: int, version: str = "b1-0c1e570") -> dict[str, Any]:
    """A stored fingerprint with an engine version and a launch cmdline."""
    from decodescope.fingerprint.stack import Fingerprint, Item

    cmd = ["llama-server", "-m", "gemma.gguf", "--port", "8181", "-t", str(threads)]
    fp = Fingerprint(taken_at="2026-09-15T23:30:00+00:00", url="http://127.0.0.1:8181", sections={
        "endpoint": {"engine": Item.ok("llamacpp"), "engine_version": Item.ok(version)},
        "process": {"cmdline": Item.ok(cmd)},
    })
    return fp.to_dict()


def process_fingerprint(start: float | None, *, pid: int = 4242, port: int = 8181,
                        flags: tuple[str, ...] = ("-t", "2")) -> dict[str, Any]:
    """A stored fingerprint of one llama-server process on host box-1: its launch (`flags`
    after the model and port), pid and process start (`start`, epoch; None: not collected)."""
    from decodescope.fingerprint.stack import Fingerprint, Item

    cmd = ["llama-server", "-m", "gemma.gguf", "--port", str(port), *flags]
    proc = {"cmdline": Item.ok(cmd), "pid": Item.ok(pid)}
    if start is not None:
        proc["create_time"] = Item.ok({"epoch": start, "iso": "x"})
    return Fingerprint(taken_at="2026-12-02T06:00:00+00:00", url=f"http://127.0.0.1:{port}",
                       sections={"host": {"hostname": Item.ok("box-1")},
                                 "endpoint": {"engine": Item.ok("llamacpp"),
                                              "engine_version": Item.ok("b1"),
                                              "models": Item.ok(["gemma"])},
                                 "process": proc}).to_dict()
