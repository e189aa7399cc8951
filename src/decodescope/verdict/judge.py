"""One way to a verdict: triage with the between-run spread resolved once.

`triage` (pure) takes the between-run spread as a number; which number is a decision of its
own — learned from the store for this stack, the conservative prior when too few runs are
stored, the declared default for log and Prometheus windows, or the user's override
(`--run-spread`). Every command that shows a verdict of stored runs (`triage`, `report`,
`demo`) goes through `judge`, so one pair never reads two verdicts in two outputs, and the
spread it used is said in the verdict's notes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from decodescope.verdict import run_spread as rs
from decodescope.verdict import server_state as ss
from decodescope.verdict import thresholds as th
from decodescope.verdict.bands import DEFAULT_BANDS, Band
from decodescope.verdict.side import Side
from decodescope.verdict.triage import Verdict, triage


def side_spreads(store: Any, base: Side, cur: Side, run_spread_pct: float | None = None,
                 spread: rs.RunSpread | None = None) -> tuple[rs.RunSpread, rs.RunSpread]:
    """Each side's between-run spread: the override, else `spread` for both sides (`check`:
    the anchor's stack), else learned from `store` (a store.db.Store; None: no store at
    hand), else the declared default of a window side."""
    if spread is not None and run_spread_pct is None:
        return spread, spread
    if run_spread_pct is not None:
        o = rs.override(run_spread_pct / 100.0)
        return o, o

    def one(side: Side) -> rs.RunSpread:
        if side.kind != "run" or not side.run_ids:
            return rs.for_log_side()
        if store is None:
            return rs.prior(0, why="no run store at hand to learn it from")
        return rs.for_side(store, side)

    return one(base), one(cur)


def judge(base: Side, cur: Side, *, store: Any = None, run_spread_pct: float | None = None,
          min_effect: float = th.MIN_EFFECT, bands: Sequence[Band] = DEFAULT_BANDS,
          assume_same_caliber: bool = False, spread: rs.RunSpread | None = None) -> Verdict:
    """triage(base, cur) under the spread `side_spreads` resolves, its notes saying which
    spread it was and, for an INCONCLUSIVE, how many runs or A/B pairs would decide it."""
    spread_b, spread_c = side_spreads(store, base, cur, run_spread_pct, spread)
    # one stack's runs on both sides: learned for each side from the same stack (`spread`,
    # one stack's spread lent to both sides by `check`, says nothing of the other side's)
    same = spread is None and rs.one_stack(spread_b, spread_c)
    sd, df = rs.combine_sides(spread_b, spread_c, len(base.run_ids) or 1, len(cur.run_ids) or 1)
    states = ((ss.states_for_side(store, base), ss.states_for_side(store, cur))
              if store is not None else ((), ()))
    verdict = triage(base, cur, min_effect=min_effect, bands=bands,
                     assume_same_caliber=assume_same_caliber, run_spread=sd, run_spread_df=df,
                     server=states)
    verdict = dataclasses.replace(verdict, notes=(
        *verdict.notes, *ss.warming_notes(base.name, states[0]),
        *ss.warming_notes(cur.name, states[1]), *rs.spread_lines(spread_b, spread_c, same),
        *rs.decide_lines(verdict, spread_b, spread_c, same)))
    return _work_not_done(verdict, store, base, cur)


def _work_not_done(verdict: Verdict, store: Any, base: Side, cur: Side) -> Verdict:
    """An imported side whose file did not do the work it declares (its audit's findings of
    severity "error") is never a side of a regular verdict: INCONCLUSIVE, naming them."""
    if store is None:
        return verdict
    from decodescope.store import runs as sr

    lines = []
    for name, side in (("baseline", base), ("current", cur)):
        for rid in side.run_ids:
            imp = (sr.get_run(store, rid, with_traces=False).meta or {}).get("imported") or {}
            lines += [f"{name} run {rid}: {f['text']} ({f['code']})"
                      for f in imp.get("audit") or [] if f.get("severity") == "error"]
    if not lines:
        return verdict
    return dataclasses.replace(
        verdict, kind="INCONCLUSIVE", cause="work not done",
        headline="INCONCLUSIVE: an imported file did not do the work it declares",
        explanation=tuple(lines), next_steps=(
            "Rerun the peer tool against a healthy server and import its file",
            *verdict.next_steps))
