"""Synthetic stored runs for the report tests (no server): the seed's pair in miniature.

`code_run` streams at ~87 tok/s with engine MAL ≈ 7 (n-gram speculation on a code rewrite),
`prose_run` at ~60 tok/s with MAL ≈ 2.3; the step rate is the same. Model text and labels carry
HTML/script on purpose: the report must show them as text.
"""

from __future__ import annotations

import random

from decodescope.analysis.run_result import analyze_run
from decodescope.caliber.resolve import resolve
from decodescope.records.stored_run import StoredRun, StoredTrial
from decodescope.records.trace import Chunk, RequestTrace
from decodescope.records.window import EngineWindow

EVIL = "<script>alert(1)</script>"
WALL0 = 1_790_000_000.0  # epoch of the first run's first request
ANCHOR = WALL0 - 1000.0  # perf_counter 1000.0 == WALL0


def request(t_send: float, rate: float, tokens: int, rng: random.Random,
            text: str = "tok ") -> RequestTrace:
    t = t_send + 0.15  # TTFT
    chunks = [Chunk(t, content=text, tokens=1)]
    for _ in range(tokens - 1):
        t += rng.uniform(0.8, 1.2) / rate
        chunks.append(Chunk(t, content=text, tokens=1))
    return RequestTrace(t_send_s=t_send, t_headers_s=t_send + 0.01, chunks=tuple(chunks),
                        status_code=200, prompt_tokens=400, completion_tokens=tokens,
                        reasoning_tokens=None, finish_reason="length", t_done_s=t + 0.001)


def window(t0: float, t1: float, tokens: int, mal: float, k: int, per_pos: list[float],
           engine: str = "llamacpp") -> EngineWindow:
    drafts = round(tokens / mal)
    accepted = tokens - drafts
    share = [p / sum(per_pos) for p in per_pos]
    pos = [round(accepted * s) for s in share]
    pos[0] += accepted - sum(pos)
    return EngineWindow("prometheus", engine, t0, t1, generation_tokens=tokens,
                        drafts=drafts, draft_tokens=drafts * k, accepted_tokens=accepted,
                        accepted_per_pos=tuple(pos), running=1.0)


def make_run(run_id: int, caliber: str, *, rate: float, mal: float, per_pos: list[float],
             trials: int = 3, tokens: int = 384, t_start: float = 1000.0, seed: int = 1,
             simulated: bool = False, text: str = "tok ", model: str = "gemma-3-270m",
             labels: dict[str, str] | None = None, windows: bool = True) -> StoredRun:
    rng = random.Random(seed)
    cal = resolve(caliber)
    run = StoredRun(
        id=run_id, created_at=ANCHOR + t_start, finished_at=ANCHOR + t_start + 60, kind="probe",
        status="complete", url="http://127.0.0.1:8080", model=model, engine="llamacpp",
        simulated=simulated, caliber_ref=cal.ref, caliber_identity=cal.identity,
        caliber=cal.to_dict(), labels=labels or {}, warnings=[], fingerprint=None, result=None,
        meta={"concurrency": 1})
    t = t_start
    for idx in range(trials):
        req = request(t, rate * rng.uniform(0.97, 1.03), tokens, rng, text)
        run.trials.append(StoredTrial(idx, "ok", ANCHOR + t, ANCHOR, None, [req]))
        if windows:
            first, last = req.chunks[0].t_recv_s, req.chunks[-1].t_recv_s
            run.windows.append(window(ANCHOR + first, ANCHOR + last, tokens - 1, mal, 8, per_pos))
        t = req.chunks[-1].t_recv_s + 0.5
    run.result = analyze_run(run)
    return run


CODE_POS = [0.97, 0.93, 0.9, 0.86, 0.8, 0.74, 0.68, 0.62]  # long accepted runs
PROSE_POS = [0.6, 0.3, 0.15, 0.08, 0.04, 0.02, 0.01, 0.0]


def code_run(run_id: int = 11, **kw: object) -> StoredRun:
    return make_run(run_id, "demo-code-rewrite", **{"rate": 87.0, "mal": 7.0,
                                                    "per_pos": CODE_POS, **kw})  # type: ignore[arg-type]


def prose_run(run_id: int = 12, **kw: object) -> StoredRun:
    return make_run(run_id, "demo-varied-prose", **{"rate": 60.0, "mal": 2.3, "per_pos": PROSE_POS,
                                                    "t_start": 1100.0, "seed": 2, **kw})  # type: ignore[arg-type]


def evil_pair() -> tuple[StoredRun, StoredRun]:
    """A pair whose model text, model name and labels carry markup and a script."""
    a = code_run(labels={"note": EVIL, "tag": "before"}, text=EVIL + " ")
    b = prose_run(model=f"gemma{EVIL}", labels={"tag": "<b>after</b>"}, text=EVIL)
    return a, b
