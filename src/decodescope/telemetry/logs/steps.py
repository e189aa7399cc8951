"""Decode steps of a log window: a step rate only where the counts give one.

A verification step emits its accepted draft tokens plus one, drafted or not, so
steps = generated − accepted. Every step drafts under MTP / EAGLE / a draft model, and then
drafts (an exact count) are the steps. N-gram and suffix speculators draft only where they find
a match: drafts < steps, and drafts per second is *not* a step rate (a vLLM n-gram server on
chat text drafted 0.8/s while it ran ~25 steps/s). vLLM's log lines carry no step counter and
their generated tokens are rebuilt from the printed throughput × interval (inexact), so:

- generated − accepted below the drafts (beyond rounding, or for Prometheus windows beyond one
  step of every running request at each end: counters a scrape can read between their
  increments): the counts contradict each other; the step rate is withheld (`basis` says
  why), never replaced by the draft rate;
- generated − accepted ≈ drafts: every step drafts; steps = drafts (exact);
- generated − accepted clearly above the drafts: not every step drafts; steps = generated −
  accepted, an estimate (`estimated` True) when the generated count was rebuilt;
- drafts only (no generated count): unknown unless the stack drafts every step;
- no drafts (0 drafts, or speculative decoding off): one token per step; engines that print MAL
  only (SGLang): decode / MAL; else unknown — also where drafting is on and the window's draft
  statistics are missing (flag `draft_stats_missing`, drafting.py), never one token per step;
- 0 running at the line's time (requests that started and ended inside the window): the rate
  per running request is unknown — withheld with that reason, never computed as if 1 ran.
"""

from __future__ import annotations

from typing import NamedTuple

from decodescope.records.window import EngineWindow

FULL_COVERAGE = 0.97  # drafts ≥ 97 % of steps: every step drafts (rounding of rebuilt tokens)
REBUILT_TOLERANCE = 0.02  # rebuilt generated tokens: ±2 % (throughput printed per interval)
REBUILT_TOLERANCE_TOKENS = 2.0  # ... and ±2 tokens (0.1 tok/s printed × 10 s, twice)


class StepInfo(NamedTuple):  # a tuple: made for every window of a log, ~3x sooner
    rate: float | None  # verification steps / s / running request; None: unknown
    basis: str  # how it was obtained, or why it is unknown
    coverage: float | None = None  # drafted steps / steps (1.0: every step drafts)
    drafts_rate: float | None = None  # drafts / s / running request (never a step rate)
    tokens_per_step: float | None = None  # generated / steps
    estimated: bool = False  # steps from generated tokens rebuilt from a printed throughput
    withheld: bool = False  # the counts contradict each other (steps < drafts)
    zero_running: bool = False  # 0 running at the line's time: no per-request rate


DRAFT_STATS_MISSING = ("unknown: speculative decoding is on (other lines of the log say so) and "
                       "this window's draft statistics are missing: never one token per step")
ZERO_RUNNING = ("unknown: 0 running at the line's time (its requests started and ended inside "
                "the window): no rate per running request")


def _rebuilt(w: EngineWindow) -> bool:
    """Generated tokens rebuilt from a printed throughput × interval (vLLM log lines)."""
    return w.source == "log" and w.engine not in ("llamacpp",) and w.t_start_s is not None


def _seconds(w: EngineWindow) -> float | None:
    d = w.duration_s
    if d is None:
        d = w.printed.get("decode_s")  # llama.cpp: the request's own eval time
    return d if d else None


def _scrape_skew_tokens(acc: int, drafts: int, running: float) -> float:
    """How far generated − accepted may fall below the drafts in a Prometheus window by the
    scrape alone: an engine increments its generation and speculative counters one after the
    other, so a scrape can land between them, at each end of the window — at most one step's
    tokens (1 + accepted per draft) of every running request per end."""
    return max(0.5, 2.0 * (1.0 + acc / drafts) * max(running, 1.0))


def step_info(w: EngineWindow, *, every_step_drafts: bool | None = None) -> StepInfo:
    """The step rate of one window and how it was obtained. `every_step_drafts`: what the
    stack is known to do (True: MTP / EAGLE; False: n-gram / suffix; None: unknown)."""
    d = _seconds(w)
    if w.running is not None and w.running <= 0:
        return StepInfo(None, ZERO_RUNNING, zero_running=True)
    running = w.running or 1.0  # not printed (None): the engine serves one request
    gen, acc, drafts = w.generation_tokens, w.accepted_tokens, w.drafts
    per_req = d * running if d else None
    drate = drafts / per_req if (drafts is not None and per_req) else None
    if drafts and acc is not None:
        if gen is None or per_req is None:
            if every_step_drafts and drate is not None:
                return StepInfo(drate, "drafts (every step drafts)", 1.0, drate,
                                1.0 + acc / drafts)
            return StepInfo(None, "unknown: drafts only, no generated-token count", None, drate)
        steps = gen - acc
        rebuilt = _rebuilt(w)
        if rebuilt:
            tol = max(REBUILT_TOLERANCE_TOKENS, REBUILT_TOLERANCE * gen)
        elif w.source == "prometheus":
            tol = _scrape_skew_tokens(acc, drafts, running)
        else:
            tol = 0.5
        if steps < drafts - tol:
            return StepInfo(None, f"withheld: generated − accepted ({steps}) is below the "
                                  f"drafts ({drafts})", None, drate, withheld=True)
        if not rebuilt:  # exact counts (llama.cpp): generated − accepted are the steps
            steps = max(steps, drafts)
            return StepInfo(steps / per_req, "generated − accepted", drafts / steps, drate,
                            gen / steps)
        if steps <= drafts + tol or drafts / steps >= FULL_COVERAGE:
            return StepInfo(drate, "drafts (every step drafts)", 1.0, drate, gen / drafts)
        return StepInfo(steps / per_req, "generated − accepted", drafts / steps, drate,
                        gen / steps, estimated=rebuilt)
    per_req_rate = w.decode_rate_per_request if w.running else w.decode_rate
    if per_req_rate is None and gen is not None and per_req:
        per_req_rate = gen / per_req
    if drafts == 0 or "spec_off" in w.flags:
        if per_req_rate is None:
            return StepInfo(None, "unknown: no decode rate")
        return StepInfo(per_req_rate, "decode (no drafts: one token per step)", 0.0, 0.0, 1.0)
    mal = w.mal
    if mal and per_req_rate is not None:
        return StepInfo(per_req_rate / mal, "decode / MAL (no counts printed)", None, None, mal)
    if "draft_stats_missing" in w.flags:
        return StepInfo(None, DRAFT_STATS_MISSING)
    return StepInfo(None, "unknown: no speculative counts")
