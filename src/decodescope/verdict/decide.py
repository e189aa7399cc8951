"""The decision: which verdict, with which named cause (docs/methodology.md, "Verdicts").

Order:

1. INCONCLUSIVE   a side has fewer than 2 units with a decode rate (unless both sides are runs
   whose declared calibers differ: that CALIBER_MISMATCH needs no statistic), or a run missed
   its caliber
2. CONTAMINATED   either side's engine saw foreign load
3. CALIBER_MISMATCH  caliber identities differ (or log-window evidence says so);
   INCONCLUSIVE when the caliber cannot be established (log windows) and nobody asserted it
   (the caliber-missed, contamination and caliber rules are `premises`, shared with `ab`,
   which applies them per arm and per pair before its paired statistics)
4. same caliber — the headline is about the decode rate itself:
   0. (server state) a decode change between two runs of one stack (the fingerprint apart
      from the process's start and pid) whose slower side ran on a server warming up after
      its start (a fresh-server run, or inside a warm-up the stored runs of that server show:
      verdict/server_state.py) while the faster side's server was warm (or the same server
      later) → INCONCLUSIVE (server warm-up): a change of the server's state, not the stack's
   a. decode rate moved beyond noise and by at least the minimum effect → REGRESSION /
      IMPROVEMENT. The cause is the component that carries it: stalls (pauses inside the
      outputs, kept out of the rates), speculative decoding switched off / on, acceptance
      (MAL or tokens per step) or step rate — the component with the largest share of the
      log change, and only when it moved in the decode rate's direction and survives Holm's
      correction over the two components; else "decode rate" (split unknown or within noise).
   b. stalls appeared while the decode rate between them did not move (a narrow interval)
      → REGRESSION (stalls) when the time lost to them is beyond the minimum effect, they
      recur (in ≥ STALL_MIN_UNITS units and most units of that side) and the per-unit shares
      differ beyond noise — even when the rate between stalls is too noisy to decide: a user
      sees the pauses, and they are not a step-rate regression. A pause in fewer units is a
      note (rerun), not a verdict.
   c. the interval is too wide to rule out a ±10 % change → INCONCLUSIVE ("≥ N trials per side")
   d. otherwise NO_CHANGE; a component that moved while the decode rate did not is a note.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from decodescope.verdict import thresholds as th
from decodescope.verdict.rate_change import carrier
from decodescope.verdict.server_state import ServerState, sides_explained
from decodescope.verdict.side import Side, spec_state, windows_words
from decodescope.verdict.stats import Change, difference_interval, pct
from decodescope.verdict.types import CaliberComparison, VerdictKind, acceptance


@dataclass(frozen=True)
class Decision:
    kind: VerdictKind
    cause: str | None
    trials_needed: int | None = None
    notes: tuple[str, ...] = ()


def _attributed(d: Change, parts: list[tuple[str, Change]]) -> str | None:
    """The component that carries the decode change (`rate_change.carrier`: the largest share
    of the log change, significant after Holm, beyond the minimum effect, in the decode
    rate's direction) — the same rule the decomposition's `carried_by` uses."""
    return carrier(d, parts)


def _by_identity(acc: Change, s: Change) -> str | None:
    """decode rate = step rate × tokens per step: when one factor is unmeasured on a side and
    the other is measured not to have moved (a narrow interval around 0), the unmeasured one
    carries the change."""
    still = ("not_significant", "below_min_effect")
    if s.status == "no_data" and acc.status in still:
        return "step rate"
    if acc.status == "no_data" and s.status in still:
        return "acceptance"
    return None


def stall_share(s: Side) -> float | None:
    """Share of the steady-state time lost to stalls on a side (None: not measured)."""
    st = getattr(s, "stalls", None)
    if not st:
        return None
    v = st.get("time_share")
    return float(v) if v is not None else None


def stalls_recur(s: Side) -> tuple[int, int] | None:
    """(units with a stall, units measured) on a side; None when units carry no stall share
    (log windows, runs stored before per-trial stalls)."""
    shares = s.values("stall_time_share")
    if not shares:
        return None
    return sum(1 for v in shares if v > 0), len(shares)


def _stalls_decide(b: Side, c: Side, gain: float, d: Change) -> tuple[str, str]:
    """What stalls that grew (or shrank) by `gain` of the steady state do to the verdict, and
    the line that says why: "decided" when they recur on the side that has more of them
    (≥ STALL_MIN_UNITS units, and most units) and the per-unit shares differ beyond noise —
    the decode rate between stalls need not be decided then; "noise" when they recur but the
    shares do not differ beyond noise; "one-off" when they do not recur (a note); "undecided"
    when units carry no shares (log windows, older runs) and the decode rate is undecidable;
    sides without shares decide only with a decided decode rate."""
    worse = c if gain > 0 else b
    seen = stalls_recur(worse)
    between = (f"between stalls the decode rate did not move ({d.describe()})"
               if d.status != "undecidable" else
               f"between stalls the decode rate could not be decided ({d.describe()})")
    if seen is None:
        return ("decided", between) if d.status != "undecidable" else ("undecided", "")
    hit, n = seen
    if hit < th.STALL_MIN_UNITS or 2 * hit <= n:
        return "one-off", (f"stalls in {hit} of {n} {worse.unit_name}s of {worse.name}: a pause "
                           "that did not recur (a busy host can cause one) is not judged; "
                           "rerun to see whether it comes back")
    diff = difference_interval(b.values("stall_time_share"), c.values("stall_time_share"))
    if diff is not None and diff[1] <= 0.0 <= diff[2]:
        return "noise", (f"stalls in {hit} of {n} {worse.unit_name}s of {worse.name}, "
                         f"{100 * diff[0]:+.1f} points of the steady state (95% CI "
                         f"{100 * diff[1]:+.1f} … {100 * diff[2]:+.1f}): not beyond noise")
    return "decided", between


class Premised(Protocol):
    """What the rules before the statistics read of a side: a triage Side, or an A/B arm."""

    @property
    def caliber_missed(self) -> str | None: ...

    @property
    def contamination(self) -> str | None: ...


def premises(b: Premised, c: Premised, cal: CaliberComparison, *,
             assume_same_caliber: bool = False) -> Decision | None:
    """The rules that come before any statistic, in order, for every command that states a
    verdict (triage's `decide`, `ab` per arm and per pair): the first one that blocks, or None
    when the statistics may speak.

    1. INCONCLUSIVE (caliber missed): a side did not get the caliber it asked for;
    2. CONTAMINATED: a side's engine saw foreign load;
    3. CALIBER_MISMATCH: the calibers differ;
    4. INCONCLUSIVE (caliber unknown): the caliber could not be established and nobody
       asserted it."""
    missed = [x for x in (b.caliber_missed, c.caliber_missed) if x]
    if missed:
        return Decision("INCONCLUSIVE", "caliber missed", None, tuple(missed))
    if b.contamination or c.contamination:
        return Decision("CONTAMINATED", "foreign load")
    if cal.same is False:
        return Decision("CALIBER_MISMATCH", "caliber")
    if cal.same is None and not assume_same_caliber:
        words = (windows_words(b, c) if isinstance(b, Side) and isinstance(c, Side)
                 else "the two arms")
        return Decision("INCONCLUSIVE", "caliber unknown", None, (
            f"the two sides' caliber could not be established ({words}): a "
            "verdict on the stack needs both measured under one caliber",))
    return None


def change_cause(d: Change, ch: dict[str, Change], b: Side, c: Side) -> str | None:
    """What carries a decided decode change d (the speculative-decoding switch aside): the
    component `rate_change.carrier` names among acceptance and step rate, else the one the
    identity leaves (`_by_identity`); None: the decode rate itself (split unknown or within
    noise). One rule for triage and for `ab` (whose d is its paired statistic)."""
    acc, s = acceptance(ch, b, c), ch["step_rate"]
    parts = [(n, x) for n, x in (("acceptance", acc), ("step rate", s)) if x.status != "no_data"]
    return _attributed(d, parts) or _by_identity(acc, s)


def warmup_explains(b: Side, c: Side, d: Change,
                    server: tuple[Sequence[ServerState], Sequence[ServerState]]) -> str | None:
    """Why a decided decode change `d` is the server's warm-up, not the stack's (None when it
    is not): both sides on one stack, the slower side's server warming up after its start,
    the faster side's warm (or the same server later)."""
    from decodescope.verdict.stack import stack_key

    kb, kc = stack_key(b.fingerprint), stack_key(c.fingerprint)
    if kb is None or kb != kc or d.rel is None:
        return None
    (slow, slow_st), (_, fast_st) = (((c, server[1]), (b, server[0])) if d.rel < 0
                                      else ((b, server[0]), (c, server[1])))
    if not sides_explained(slow_st, fast_st):
        return None
    return (f"{slow.name}, the slower side, ran on a server warming up after its start, the "
            "other on the same stack warm: the change is the server's state, not the stack's")


def decide(b: Side, c: Side, ch: dict[str, Change], cal: CaliberComparison, *,
           min_effect: float = th.MIN_EFFECT, assume_same_caliber: bool = False,
           server: tuple[Sequence[ServerState], Sequence[ServerState]] = ((), ())) -> Decision:
    d, s = ch["decode"], ch["step_rate"]
    acc = acceptance(ch, b, c)
    missed = [x for x in (getattr(b, "caliber_missed", None), getattr(c, "caliber_missed", None))
              if x]
    if d.status == "no_data":
        if (cal.same is False and b.kind == c.kind == "run" and not missed
                and not (b.contamination or c.contamination)):
            # declared calibers (probes, imported files) that differ need no statistic: the
            # numbers are not like-for-like however many units either side has (one imported
            # file). Log windows' calibers are read from their MAL: that needs the units.
            return Decision("CALIBER_MISMATCH", "caliber")
        return Decision("INCONCLUSIVE", f"too few {b.unit_name}s/{c.unit_name}s",
                        th.RECOMMENDED_TRIALS)
    blocked = premises(b, c, cal, assume_same_caliber=assume_same_caliber)
    if blocked is not None:
        return blocked
    notes: list[str] = []
    spec = spec_state(b, c)
    sb, sc = stall_share(b), stall_share(c)
    stall_gain = (sc or 0.0) - (sb or 0.0)
    if d.changed:
        kind: VerdictKind = "REGRESSION" if (d.rel or 0.0) < 0 else "IMPROVEMENT"
        if spec is not None and ((spec == "off") == (kind == "REGRESSION")):
            return Decision(kind, f"speculative decoding {spec}")
        warm = warmup_explains(b, c, d, server)
        if warm is not None:
            return Decision("INCONCLUSIVE", "server warm-up", None, (warm,))
        cause = change_cause(d, ch, b, c)
        if abs(stall_gain) >= min_effect:
            notes.append(f"stalls also changed: {100 * (sb or 0.0):.0f}% → "
                         f"{100 * (sc or 0.0):.0f}% of the steady state was lost to pauses "
                         "(left out of the decode rate)")
        return Decision(kind, cause or "decode rate", None, tuple(notes))
    if abs(stall_gain) >= min_effect:
        outcome, why = _stalls_decide(b, c, stall_gain, d)
        if outcome == "decided":
            kind = "REGRESSION" if stall_gain > 0 else "IMPROVEMENT"
            return Decision(kind, "stalls", None, (why,))
        if outcome == "noise":
            return Decision("INCONCLUSIVE", "stalls within noise", None, (why,))
        if outcome == "one-off":
            notes.append(why)
    if d.status == "undecidable":
        wide = [x for x in (d, acc, s) if x.status == "undecidable"]
        needed = [x.trials_needed for x in wide]
        if abs(stall_gain) >= min_effect and not notes:  # a one-off pause is noted already
            notes.append(f"stalls changed too: {100 * (sb or 0.0):.0f}% → "
                         f"{100 * (sc or 0.0):.0f}% of the steady state was lost to pauses")
        return Decision("INCONCLUSIVE", "noise",
                        None if None in needed else max(n or 0 for n in needed), tuple(notes))
    for name, x in (("MAL" if acc is ch["mal"] else "tokens per step", acc), ("step rate", s)):
        if x.changed:
            notes.append(f"{name} moved {pct(x.rel or 0.0)} beyond noise while the decode rate "
                         "did not: a component moved, decode did not")
    return Decision("NO_CHANGE", None, None, tuple(notes))
