"""`check`: one probe of an anchor caliber against its baseline band and floor (pure).

    inside the band                 OK           exit 0
    below the floor                 BELOW_FLOOR  exit 1 (the seed: "suspect the stack")
    below the band, above the floor BELOW_BAND   exit 1
    above the band                  ABOVE_BAND   exit 1 (the anchor moved: re-baseline if intended)
    engine saw foreign load         CONTAMINATED exit 3
    no decode rate / other caliber  INCONCLUSIVE exit 3
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Literal

from decodescope.exitcodes import ExitCode
from decodescope.records.evidence import EvidenceRow
from decodescope.verdict import thresholds as th
from decodescope.verdict.bands import DEFAULT_BANDS, Band, content_band, describe
from decodescope.verdict.baseline import Baseline
from decodescope.verdict.side_values import Side

CheckStatus = Literal["OK", "BELOW_FLOOR", "BELOW_BAND", "ABOVE_BAND", "CONTAMINATED",
                      "INCONCLUSIVE"]
CHECK_EXIT: dict[str, ExitCode] = {
    "OK": ExitCode.OK,
    "BELOW_FLOOR": ExitCode.REGRESSION,
    "BELOW_BAND": ExitCode.REGRESSION,
    "ABOVE_BAND": ExitCode.REGRESSION,
    "CONTAMINATED": ExitCode.INCONCLUSIVE,
    "INCONCLUSIVE": ExitCode.INCONCLUSIVE,
}


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

    @property
    def exit_code(self) -> int:
        return int(CHECK_EXIT[self.status])

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "exit_code": self.exit_code, "headline": self.headline,
                "baseline": self.baseline.to_dict(), "run_ids": list(self.side.run_ids),
                "value": self.value, "source": self.source, "values": list(self.values),
                "evidence": [r.to_dict() for r in self.evidence]}


def check_against(baseline: Baseline, side: Side, bands: tuple[Band, ...] = DEFAULT_BANDS
                  ) -> CheckResult:
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
    status, head = _status(baseline, side, value, same_cal)
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
    return CheckResult(status, head, baseline, side, value, source, tuple(vals), tuple(rows))


def _status(b: Baseline, side: Side, value: float | None, same_cal: bool
            ) -> tuple[CheckStatus, str]:
    if side.contamination:
        return "CONTAMINATED", f"CONTAMINATED — {side.contamination}; the anchor is not comparable."
    if not same_cal:
        return "INCONCLUSIVE", (f"INCONCLUSIVE — the run's caliber {side.caliber_ref} is not the "
                                f"baseline's {b.caliber_ref}.")
    if value is None:
        return "INCONCLUSIVE", "INCONCLUSIVE — the probe produced no decode rate."
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
                              f"{b.band[0]:.1f}–{b.band[1]:.1f}: the stack changed; re-baseline if "
                              "intended.")
    where = (f"inside its band {b.band[0]:.1f}–{b.band[1]:.1f}" if b.band
             else f"above its floor {b.floor:.1f}")
    return "OK", f"OK — anchor {b.name} reads {v}, {where}."


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
