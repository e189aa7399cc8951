"""Triage: two sides → one verdict with its named cause, decomposition, evidence and next step.

The decision order is in `decide.py` (docs/methodology.md, "Verdicts"): the headline is
about the decode rate; MAL and step rate only attribute a change the decode rate shows.

Pure: no I/O; `side_resolve.py` builds the Side values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from decodescope.caliber.spec import element_table
from decodescope.records.evidence import EvidenceRow
from decodescope.verdict import thresholds as th
from decodescope.verdict.bands import DEFAULT_BANDS, Band, classify
from decodescope.verdict.decide import Decision, decide
from decodescope.verdict.evidence_chain import evidence_rows
from decodescope.verdict.rate_change import Decomposition, decompose
from decodescope.verdict.side_values import Side
from decodescope.verdict.stats import Change, pct, relative_change
from decodescope.verdict.types import (
    CaliberComparison,
    CaliberRow,
    Context,
    VerdictKind,
    changed_word,
)
from decodescope.verdict.wording import headline, next_steps


@dataclass(frozen=True)
class Verdict:
    kind: VerdictKind
    cause: str | None  # "step rate" | "acceptance" | "decode rate" | "caliber" | "foreign load" | ...
    headline: str  # the answer, one line
    explanation: tuple[str, ...]  # two or three lines under the headline
    baseline: Side
    current: Side
    decode_source: str  # "engine" | "client" | "mixed (…)"
    changes: dict[str, Change]  # decode, mal, tokens_per_step, step_rate
    decomposition: Decomposition | None
    caliber: CaliberComparison
    bands: tuple[Band | None, Band | None]
    evidence: tuple[EvidenceRow, ...]
    next_steps: tuple[str, ...]
    min_effect: float
    trials_needed: int | None = None
    notes: tuple[str, ...] = field(default=())
    band_table: tuple[Band, ...] = DEFAULT_BANDS

    @property
    def label(self) -> str:
        return f"{self.kind} ({self.cause})" if self.kind in ("REGRESSION", "IMPROVEMENT") and self.cause else self.kind

    @property
    def exit_code(self) -> int:
        from decodescope.verdict import for_verdict

        return int(for_verdict(self))

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.kind, "cause": self.cause, "label": self.label,
            "exit_code": self.exit_code, "headline": self.headline,
            "explanation": list(self.explanation),
            "baseline": self.baseline.to_dict(), "current": self.current.to_dict(),
            "decode_source": self.decode_source,
            "changes": {k: v.to_dict() for k, v in self.changes.items()},
            "decomposition": self.decomposition.to_dict() if self.decomposition else None,
            "caliber": {"same": self.caliber.same, "text": self.caliber.text,
                        "rows": [{"element": r.element, "baseline": r.baseline,
                                  "current": r.current, "same": r.same} for r in self.caliber.rows]},
            "bands": [b.to_dict() if b else None for b in self.bands],
            "evidence": [r.to_dict() for r in self.evidence],
            "next_steps": list(self.next_steps), "min_effect": self.min_effect,
            "trials_needed": self.trials_needed, "notes": list(self.notes),
        }


def triage(baseline: Side, current: Side, *, min_effect: float = th.MIN_EFFECT,
           bands: Sequence[Band] = DEFAULT_BANDS, assume_same_caliber: bool = False,
           run_spread: float = th.RUN_TO_RUN_SD) -> Verdict:
    """`run_spread` (th.RUN_TO_RUN_SD) widens the rate comparisons by the between-run spread;
    MAL and tokens per step are counts of the engine's own accept decisions, which the
    machine's speed does not move: they keep their within-run intervals."""
    decode_source, decode = _decode_change(baseline, current, min_effect, run_spread)
    changes = {
        "decode": decode,
        "mal": relative_change("MAL", baseline.values("mal"), current.values("mal"),
                               min_effect=min_effect),
        "tokens_per_step": relative_change("tokens per step", baseline.values("tokens_per_step"),
                                           current.values("tokens_per_step"),
                                           min_effect=min_effect),
        "step_rate": relative_change("step rate", baseline.values("step_rate"),
                                     current.values("step_rate"), min_effect=min_effect,
                                     run_sd=run_spread),
    }
    dec = decompose(baseline, current, changes)
    band_b = classify(baseline.median("mal"), bands)
    band_c = classify(current.median("mal"), bands)
    cal = compare_calibers(baseline, current, bands)
    decision = _decide(baseline, current, changes, cal, min_effect=min_effect,
                       assume_same_caliber=assume_same_caliber)
    kind, cause, needed = decision.kind, decision.cause, decision.trials_needed
    ctx = Context(kind, cause, baseline, current, changes, dec, cal, (band_b, band_c), decode_source,
               min_effect, needed, bands)
    head, expl = headline(ctx)
    return Verdict(
        kind=kind, cause=cause, headline=head, explanation=tuple(expl), baseline=baseline,
        current=current, decode_source=decode_source, changes=changes, decomposition=dec,
        caliber=cal, bands=(band_b, band_c), evidence=tuple(evidence_rows(ctx)),
        next_steps=tuple(next_steps(ctx)), min_effect=min_effect, trials_needed=needed,
        notes=baseline.notes + current.notes + decision.notes, band_table=tuple(bands),
    )


# decode source when the engine's interval was too wide and the client's, inside it, decided
CLIENT_NARROWER = "client (engine interval too wide)"


def _decode_change(b: Side, c: Side, min_effect: float, run_sd: float) -> tuple[str, Change]:
    """Engine numbers decide when both sides have them; else the client's; else mixed."""
    eb, ec = b.values("engine_decode_rate"), c.values("engine_decode_rate")
    cb, cc = b.values("decode_rate"), c.values("decode_rate")
    n = th.MIN_UNITS
    if len(eb) >= n and len(ec) >= n:
        engine = relative_change("decode rate", eb, ec, min_effect=min_effect, run_sd=run_sd)
        if engine.status != "undecidable" or len(cb) < n or len(cc) < n:
            return "engine", engine
        client = relative_change("decode rate", cb, cc, min_effect=min_effect, run_sd=run_sd)
        # Both measure the same decode rate. When the engine's interval is too wide to decide
        # (few usable spans, one coarse one) and holds the client's estimate, the two agree
        # and the client's narrower interval decides; otherwise the engine's stands.
        if (client.status != "undecidable" and client.rel is not None
                and engine.ci_lo is not None and engine.ci_hi is not None
                and engine.ci_lo <= client.rel <= engine.ci_hi):
            return CLIENT_NARROWER, client
        return "engine", engine
    if len(cb) >= n and len(cc) >= n:
        return "client", relative_change("decode rate", cb, cc, min_effect=min_effect,
                                         run_sd=run_sd)
    xb, sb = (eb, "engine") if len(eb) >= len(cb) else (cb, "client")
    xc, sc = (ec, "engine") if len(ec) >= len(cc) else (cc, "client")
    source = sb if sb == sc else f"mixed ({sb} baseline, {sc} current)"
    return source, relative_change("decode rate", xb, xc, min_effect=min_effect,
                                   run_sd=run_sd)


def compare_calibers(b: Side, c: Side, bands: Sequence[Band] = DEFAULT_BANDS) -> CaliberComparison:
    if b.caliber_identity and c.caliber_identity:
        rows: tuple[CaliberRow, ...] = ()
        if b.caliber is not None and c.caliber is not None:
            tb, tc = element_table(b.caliber), element_table(c.caliber)
            rows = (CaliberRow("caliber", b.caliber.ref, c.caliber.ref),
                    *(CaliberRow(e, vb, vc) for (e, vb), (_, vc) in zip(tb, tc, strict=True)))
        else:
            rows = (CaliberRow("caliber", str(b.caliber_ref), str(c.caliber_ref)),)
        if b.caliber_identity == c.caliber_identity:
            return CaliberComparison(True, f"yes ({b.caliber_ref}, identity {b.caliber_identity})", rows)
        diff = [r for r in rows if not r.same and r.element != "caliber"]
        what = ", ".join(f"{r.element} {r.baseline} → {r.current}" for r in diff[:3])
        more = f" (+{len(diff) - 3} more)" if len(diff) > 3 else ""
        text = (f"no: {b.caliber_ref} ({b.caliber_identity}) vs {c.caliber_ref} "
                f"({c.caliber_identity})" + (f"; {what}{more}" if what else ""))
        return CaliberComparison(False, text, rows)
    # At least one side is a log window: its caliber is unknown, and unknown is not same
    # (verdict/logcaliber.py): None unless asserted or shown by bands that fit the stack.
    from decodescope.verdict.logcaliber import compare_log_calibers

    return compare_log_calibers(b, c, bands)


def _decide(b: Side, c: Side, ch: dict[str, Change], cal: CaliberComparison, *,
            min_effect: float = th.MIN_EFFECT, assume_same_caliber: bool = False) -> Decision:
    return decide(b, c, ch, cal, min_effect=min_effect, assume_same_caliber=assume_same_caliber)


__all__ = ["CaliberComparison", "CaliberRow", "Verdict", "VerdictKind", "changed_word",
           "compare_calibers", "pct", "triage"]
