"""`check`: one probe of an anchor caliber against its baseline (docs/methodology.md,
"Anchor checks").

A baseline with stored runs is judged, not banded: `judge_anchor` runs the judge every verdict
uses (verdict/judge.py: caliber, contamination, then noise and effect) with the anchor's stored
runs as the baseline side, the probe's run as the current side, and the run-to-run spread of
the anchor's stack (learned from its stored runs, or the prior — said) on both sides:

    judge REGRESSION, value under the floor     BELOW_FLOOR  exit 1 (the seed: "suspect the stack")
    judge REGRESSION, value above the floor     BELOW_BAND   exit 1
    judge IMPROVEMENT                           ABOVE_BAND   exit 0 (reported: re-baseline if intended)
    judge NO_CHANGE                             OK           exit 0
    judge INCONCLUSIVE (noise, too few trials)  INCONCLUSIVE exit 3
    engine saw foreign load                     CONTAMINATED exit 3
    no decode rate / other caliber              INCONCLUSIVE exit 3

A user's floor (`baseline set --floor F`, or the floor under a given `--band`) is absolute: a
value under it is BELOW_FLOOR, exit 1, whatever the noise (the user set a number under which the
stack is suspect). A derived floor alarms only with the judge's REGRESSION. A baseline without
runs (a given band only) has nothing to judge against: its band is absolute as before, except
that a value above it is reported (ABOVE_BAND, exit 0), never an alarm.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Literal

from decodescope.exitcodes import ExitCode
from decodescope.records.evidence import EvidenceRow
from decodescope.verdict import run_spread as rs
from decodescope.verdict import thresholds as th
from decodescope.verdict.bands import DEFAULT_BANDS, Band, content_band, describe
from decodescope.verdict.baseline import Baseline
from decodescope.verdict.run_spread import RunSpread
from decodescope.verdict.side import Side
from decodescope.verdict.stats import Change
from decodescope.verdict.triage import Verdict

CheckStatus = Literal["OK", "BELOW_FLOOR", "BELOW_BAND", "ABOVE_BAND", "CONTAMINATED",
                      "INCONCLUSIVE"]
CHECK_EXIT: dict[str, ExitCode] = {
    "OK": ExitCode.OK,
    "BELOW_FLOOR": ExitCode.REGRESSION,
    "BELOW_BAND": ExitCode.REGRESSION,
    "ABOVE_BAND": ExitCode.OK,  # an improvement is reported, never an alarm
    "CONTAMINATED": ExitCode.INCONCLUSIVE,
    "INCONCLUSIVE": ExitCode.INCONCLUSIVE,
}
ALARMS = ("BELOW_FLOOR", "BELOW_BAND")


@dataclass(frozen=True)
class CheckResult:
    status: CheckStatus
    headline: str
    baseline: Baseline
    side: Side
    value: float | None  # median per-trial decode rate, in the baseline's source
    source: str
    values: tuple[float, ...]
    evidence: tuple[EvidenceRow, ...] = field(default=())
    verdict: Verdict | None = field(default=None, repr=False)  # the judge's (None: no runs)
    spread: RunSpread | None = None  # the run-to-run spread it judged under
    notes: tuple[str, ...] = ()

    @property
    def exit_code(self) -> int:
        return int(CHECK_EXIT[self.status])

    @property
    def change(self) -> Change | None:
        """The judge's decode-rate change (current vs the anchor's runs), None without one."""
        if self.verdict is None:
            return None
        d = self.verdict.changes.get("decode")
        return d if d is not None and d.rel is not None else None

    @property
    def moved(self) -> str | None:
        """'down' / 'up' when the judge found the decode rate moved beyond noise (its
        REGRESSION / IMPROVEMENT), else None."""
        if self.verdict is None:
            return None
        return {"REGRESSION": "down", "IMPROVEMENT": "up"}.get(self.verdict.kind)

    def to_dict(self) -> dict[str, Any]:
        ch = self.change
        return {"status": self.status, "exit_code": self.exit_code, "headline": self.headline,
                "baseline": self.baseline.to_dict(), "run_ids": list(self.side.run_ids),
                "value": self.value, "source": self.source, "values": list(self.values),
                "judge": None if self.verdict is None else {
                    "verdict": self.verdict.kind, "cause": self.verdict.cause,
                    "headline": self.verdict.headline,
                    "decode_change": None if ch is None else ch.to_dict()},
                "run_spread": None if self.spread is None else self.spread.to_dict(),
                "notes": list(self.notes),
                "evidence": [r.to_dict() for r in self.evidence]}


def spread_line(spread: RunSpread, *, stored: bool) -> str:
    """The spread `check` judged under, saying whether it was learned or the prior."""
    how = {"learned": "learned from the anchor stack's stored runs",
           "prior": "the prior: too few stored runs to learn it"}.get(spread.source,
                                                                       spread.source)
    when = "stored with the baseline" if stored else "resolved now: the baseline has none stored"
    return f"Between-run term ({how}; {when}): {spread.text()}."


def anchor_spread(store: Any, baseline: Baseline, base_side: Side) -> tuple[RunSpread, str]:
    """The run-to-run spread `check` judges under: the one stored with the baseline (learned
    from the anchor stack's runs when it was set, or the prior), else — a baseline stored
    before spreads — learned now from the store; and a line saying which."""
    stored = baseline.run_spread()
    if stored is not None:
        return stored, spread_line(stored, stored=True)
    now = rs.for_side(store, base_side)
    return now, spread_line(now, stored=False)


def judge_anchor(store: Any, baseline: Baseline, side: Side) -> tuple[Verdict, RunSpread] | None:
    """The judge's verdict of the probe `side` against the anchor's stored runs, under the
    anchor stack's run-to-run spread on both sides (None: a baseline without runs)."""
    if not baseline.run_ids:
        return None
    from decodescope.verdict.judge import judge
    from decodescope.verdict.side_from_runs import side_from_runs
    from decodescope.verdict.side_resolve import load_run

    runs = [load_run(store, i) for i in baseline.run_ids]
    base_side = side_from_runs(runs, name=f"baseline {baseline.name}")
    spread, _ = anchor_spread(store, baseline, base_side)
    return judge(base_side, side, store=store, spread=spread), spread


def check_against(baseline: Baseline, side: Side, bands: tuple[Band, ...] = DEFAULT_BANDS, *,
                  judged: tuple[Verdict, RunSpread] | None = None) -> CheckResult:
    """Map the probe (and the judge's verdict of it, `judge_anchor`) to a check status. Pure."""
    key = "engine_decode_rate" if baseline.source == "engine" else "decode_rate"
    vals = side.values(key)
    source = baseline.source
    rows: list[EvidenceRow] = []
    if not vals:  # fall back to the other source, and say so
        other = "decode_rate" if key == "engine_decode_rate" else "engine_decode_rate"
        vals = side.values(other)
        source = "client" if other == "decode_rate" else "engine"
        if vals:
            rows.append(EvidenceRow("same decode source as the baseline?",
                                    f"no: baseline {baseline.source}, this run {source}", "changed",
                                    "client streaming timing reads lower than the engine's"))
    value = statistics.median(vals) if vals else None
    same_cal = side.caliber_identity == baseline.caliber_identity
    rows.insert(0, EvidenceRow("same caliber as the baseline?",
                               f"yes ({baseline.caliber_ref}, {baseline.caliber_identity})" if same_cal
                               else f"no: {side.caliber_ref} ({side.caliber_identity}) vs "
                                    f"{baseline.caliber_ref} ({baseline.caliber_identity})",
                               "same" if same_cal else "changed"))
    verdict, spread = judged if judged is not None else (None, None)
    status, head = _status(baseline, side, value, same_cal, verdict)
    notes: list[str] = []
    if verdict is not None:
        d = verdict.changes.get("decode")
        rows.append(EvidenceRow("the judge, against the anchor's runs",
                                f"{verdict.label}: decode rate "
                                f"{d.describe() if d is not None else 'no data'}",
                                "changed" if verdict.kind in ("REGRESSION", "IMPROVEMENT")
                                else "same" if verdict.kind == "NO_CHANGE" else "unknown"))
        if spread is not None:
            notes.append(spread_line(spread, stored=baseline.spread is not None))
        notes.extend(n for n in verdict.notes if not n.startswith("Between-run term"))
    elif baseline.band is not None or baseline.floor is not None:
        notes.append(f"Baseline {baseline.name} has no stored runs: its band and floor are the "
                     "user's and absolute (set it --from-runs for a judged check).")
    if vals:
        outside = [v for v in vals if baseline.band and not baseline.band[0] <= v <= baseline.band[1]]
        rows.append(EvidenceRow(
            f"per-trial decode rate ({source})", ", ".join(f"{v:.1f}" for v in vals),
            "changed" if outside else "same",
            f"{len(outside)} of {len(vals)} outside the band" if outside else None))
    if side.median("mal") is not None:
        mal = side.median("mal")
        partial = content_band(mal, side.drafts_every_step, bands) is None \
            and side.drafts_every_step is False
        rows.append(EvidenceRow("MAL", f"{mal:.2f} over the drafted steps only "
                                f"({100 * (side.coverage or 0.0):.0f}% of steps): no MAL band "
                                "applies; tokens per step carry the content" if partial
                                else describe(mal, bands), "unknown"))
    if side.median("step_rate") is not None:
        rows.append(EvidenceRow("step rate", f"{side.median('step_rate'):.1f} /s", "unknown"))
    rows.append(_decay_row(baseline, side))
    rows.append(EvidenceRow("foreign load", side.contamination or "none seen",
                            "changed" if side.contamination else "same"))
    return CheckResult(status, head, baseline, side, value, source, tuple(vals), tuple(rows),
                       verdict, spread, tuple(notes))


def _status(b: Baseline, side: Side, value: float | None, same_cal: bool,
            verdict: Verdict | None = None) -> tuple[CheckStatus, str]:
    if side.contamination:
        return "CONTAMINATED", f"CONTAMINATED — {side.contamination}; the anchor is not comparable."
    if not same_cal:
        return "INCONCLUSIVE", (f"INCONCLUSIVE — the run's caliber {side.caliber_ref} is not the "
                                f"baseline's {b.caliber_ref}.")
    if value is None:
        return "INCONCLUSIVE", "INCONCLUSIVE — the probe produced no decode rate."
    if verdict is not None:
        return _judged_status(b, value, verdict)
    v = f"{value:.1f} tok/s"
    if b.floor is not None and value < b.floor:
        return "BELOW_FLOOR", (f"BELOW FLOOR — anchor {b.name} reads {v}, under its floor "
                               f"{b.floor:.1f}: suspect the stack.")
    if b.band is not None and value < b.band[0]:
        return "BELOW_BAND", (f"BELOW BAND — anchor {b.name} reads {v}, under its band "
                              f"{b.band[0]:.1f}–{b.band[1]:.1f} (floor "
                              f"{'—' if b.floor is None else f'{b.floor:.1f}'}).")
    if b.band is not None and value > b.band[1]:
        return "ABOVE_BAND", (f"ABOVE BAND — anchor {b.name} reads {v}, over its band "
                              f"{b.band[0]:.1f}–{b.band[1]:.1f}: the anchor moved up; re-baseline "
                              "if intended (not an alarm).")
    where = (f"inside its band {b.band[0]:.1f}–{b.band[1]:.1f}" if b.band
             else f"above its floor {b.floor:.1f}")
    return "OK", f"OK — anchor {b.name} reads {v}, {where}."


def _judged_status(b: Baseline, value: float, v: Verdict) -> tuple[CheckStatus, str]:
    """The check status of the judge's verdict (module docstring)."""
    val = f"{value:.1f} tok/s"
    d = v.changes.get("decode")
    moved = d.describe() if d is not None else "no data"
    under_user_floor = b.floor_given and b.floor is not None and value < b.floor
    if v.kind == "CONTAMINATED":
        return "CONTAMINATED", f"CONTAMINATED — {v.headline}"
    if v.kind in ("CALIBER_MISMATCH", "INCONCLUSIVE") and not under_user_floor:
        return "INCONCLUSIVE", (f"INCONCLUSIVE — anchor {b.name} reads {val}: the judge cannot "
                                f"decide against the anchor's runs ({v.cause or v.kind}; decode "
                                f"rate {moved}).")
    if v.kind == "REGRESSION" or under_user_floor:
        why = (f"a REGRESSION against the anchor's runs: decode rate {moved}"
               if v.kind == "REGRESSION" else
               f"under the user's floor (the judge alone says {v.kind}: decode rate {moved})")
        if b.floor is not None and value < b.floor:
            return "BELOW_FLOOR", (f"BELOW FLOOR — anchor {b.name} reads {val}, under its floor "
                                   f"{b.floor:.1f}, {why}: suspect the stack.")
        return "BELOW_BAND", f"BELOW BAND — anchor {b.name} reads {val}, {why}."
    if v.kind == "IMPROVEMENT":
        return "ABOVE_BAND", (f"ABOVE BAND — anchor {b.name} reads {val}, an improvement "
                              f"against the anchor's runs (decode rate {moved}): the anchor "
                              "moved up; re-baseline if intended (not an alarm).")
    return "OK", (f"OK — anchor {b.name} reads {val}: no change beyond noise against the "
                  f"anchor's runs (decode rate {moved}).")


def _decay_row(b: Baseline, side: Side) -> EvidenceRow:
    check = "length decay (per 1K output tokens)"
    now, then = side.length_decay_pct, b.length_decay_pct
    if now is None or then is None:
        missing = "this run" if now is None else "the baseline runs"
        return EvidenceRow(check, f"unknown: no figure for {missing}", "unknown")
    delta = now - then
    if abs(delta) > th.LENGTH_DECAY_DELTA_PP:
        return EvidenceRow(check, f"changed: {then:+.1f}% → {now:+.1f}%", "changed",
                           "decay with output length is a stack property (the seed: NVFP4 flat, "
                           "AWQ decays): a changed decay points at the stack")
    return EvidenceRow(check, f"same: {then:+.1f}% → {now:+.1f}%", "same")
