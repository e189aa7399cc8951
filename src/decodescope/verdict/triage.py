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
from decodescope.records.quantity import Quantity
from decodescope.verdict import thresholds as th
from decodescope.verdict.bands import DEFAULT_BANDS, Band, content_band
from decodescope.verdict.comparison_quantities import comparison_quantities
from decodescope.verdict.comparison_quantities import to_dict as quantities_dict
from decodescope.verdict.decide import Decision, decide, spec_state
from decodescope.verdict.evidence_chain import evidence_rows
from decodescope.verdict.rate_change import Decomposition, decompose
from decodescope.verdict.server_state import ServerState
from decodescope.verdict.side import Side
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
    decode_source: str  # "engine" | "client" | "mixed (…)": decided once, in _decode_change
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
    decode_reason: str = ""  # why decode_source decides
    # verdict.comparison_quantities: each side's reported numbers (decode rate, MAL, tokens per step, step
    # rate) as Quantity records; every renderer shows these
    quantities: dict[str, tuple[Quantity, Quantity]] = field(default_factory=dict)

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
            "deciding": {"source": self.decode_source, "reason": self.decode_reason},
            "quantities": quantities_dict(self.quantities),
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
           run_spread: float = th.RUN_TO_RUN_SD, run_spread_df: float | None = None,
           server: tuple[Sequence[ServerState], Sequence[ServerState]] = ((), ())) -> Verdict:
    """`server`: each side's runs' server state (verdict/server_state.py; judge reads it from
    the store): a change that a server's warm-up explains is not a stack verdict.
    `run_spread` (th.RUN_TO_RUN_SD) widens the rate comparisons by the between-run spread
    (per side; `run_spread_df`: its degrees of freedom when learned, verdict/run_spread.py);
    MAL and tokens per step are counts of the engine's own accept decisions, which the
    machine's speed does not move: they keep their within-run intervals."""
    decode_source, decode, decode_reason = _decode_change(baseline, current, min_effect,
                                                          run_spread, run_spread_df)
    changes = {
        "decode": decode,
        "mal": relative_change("MAL", baseline.values("mal"), current.values("mal"),
                               min_effect=min_effect),
        "tokens_per_step": relative_change("tokens per step", baseline.values("tokens_per_step"),
                                           current.values("tokens_per_step"),
                                           min_effect=min_effect),
        "step_rate": relative_change("step rate", baseline.values("step_rate"),
                                     current.values("step_rate"), min_effect=min_effect,
                                     run_sd=run_spread, run_sd_df=run_spread_df),
    }
    dec = decompose(baseline, current, changes)
    band_b = content_band(baseline.typical("mal"), baseline.drafts_every_step, bands)
    band_c = content_band(current.typical("mal"), current.drafts_every_step, bands)
    off = spec_state(baseline, current)
    # The side without drafts has MAL 1 by definition and no content signal: no band there
    # (a log side prints MAL 1, which the bands would read as high-entropy text).
    if off == "off":
        band_c = None
    elif off == "on":
        band_b = None
    if off is None and False in (baseline.drafts_every_step, current.drafts_every_step):
        # The pair's content is read from tokens per step (evidence_chain._content_from_steps,
        # which says the bands do not apply): no side is labelled with a band either.
        band_b = band_c = None
    cal = compare_calibers(baseline, current, bands)
    decision = decide(baseline, current, changes, cal, min_effect=min_effect,
                      assume_same_caliber=assume_same_caliber, server=server)
    kind, cause, needed = decision.kind, decision.cause, decision.trials_needed
    ctx = Context(kind, cause, baseline, current, changes, dec, cal, (band_b, band_c), decode_source,
               min_effect, needed, bands)
    head, expl = headline(ctx)
    return Verdict(
        kind=kind, cause=cause, headline=head, explanation=tuple(expl), baseline=baseline,
        current=current, decode_source=decode_source, changes=changes, decomposition=dec,
        caliber=cal, bands=(band_b, band_c), evidence=tuple(evidence_rows(ctx)),
        next_steps=tuple(next_steps(ctx)), min_effect=min_effect, trials_needed=needed,
        notes=side_notes(baseline.notes, current.notes) + decision.notes, band_table=tuple(bands),
        decode_reason=decode_reason,
        quantities=comparison_quantities(baseline, current, decode_source),
    )


def side_notes(baseline: tuple[str, ...], current: tuple[str, ...]) -> tuple[str, ...]:
    """The two sides' own notes, each saying whose it is: a note both sides have word for
    word is said once ("both sides: ..."); any other is "baseline: ..." or "current: ..."
    (two sides' "1 partial window(s) trimmed", or "100% of steps drafted here" and "11% ...
    here", read as one side's repeated otherwise)."""
    both = [n for n in baseline if n in current]
    out = [f"both sides: {n}" for n in dict.fromkeys(both)]
    out += [f"baseline: {n}" for n in baseline if n not in current]
    out += [f"current: {n}" for n in current if n not in baseline]
    return tuple(out)


# decode source when the engine's interval was too wide and the client's, inside it, decided
CLIENT_NARROWER = "client (engine interval too wide)"


def _decode_change(b: Side, c: Side, min_effect: float, run_sd: float,
                   run_sd_df: float | None = None) -> tuple[str, Change, str]:
    """(source, change, why): engine numbers decide when both sides have them; else the
    client's; else mixed. Decided once here; every output of the verdict names this one."""
    eb, ec = b.values("engine_decode_rate"), c.values("engine_decode_rate")
    cb, cc = b.values("decode_rate"), c.values("decode_rate")
    n = th.MIN_UNITS
    if len(eb) >= n and len(ec) >= n:
        engine = relative_change("decode rate", eb, ec, min_effect=min_effect, run_sd=run_sd,
                                 run_sd_df=run_sd_df)
        why = (f"both sides have engine decode rates ({len(eb)} and {len(ec)} "
               f"{b.unit_name}s): the engine counts tokens where they are made, on its own clock")
        if engine.status != "undecidable" or len(cb) < n or len(cc) < n:
            return "engine", engine, why
        client = relative_change("decode rate", cb, cc, min_effect=min_effect, run_sd=run_sd,
                                 run_sd_df=run_sd_df)
        # Both measure the same decode rate. When the engine's interval is too wide to decide
        # (few usable spans, one coarse one) and holds the client's estimate, the two agree
        # and the client's narrower interval decides; otherwise the engine's stands.
        if (client.status != "undecidable" and client.rel is not None
                and engine.ci_lo is not None and engine.ci_hi is not None
                and engine.ci_lo <= client.rel <= engine.ci_hi):
            return CLIENT_NARROWER, client, (
                "the engine's interval is too wide to decide and holds the client's estimate: "
                "the client's narrower interval decides")
        return "engine", engine, why
    short = [f"{x.name} has {len(v)}" for x, v in ((b, eb), (c, ec)) if len(v) < n]
    if len(cb) >= n and len(cc) >= n:
        return "client", relative_change("decode rate", cb, cc, min_effect=min_effect,
                                         run_sd=run_sd, run_sd_df=run_sd_df), (
            f"engine decode rates on fewer than {n} units ({'; '.join(short)}): withheld, "
            "suspended or not measured, so the client's decide")
    xb, sb = (eb, "engine") if len(eb) >= len(cb) else (cb, "client")
    xc, sc = (ec, "engine") if len(ec) >= len(cc) else (cc, "client")
    source = sb if sb == sc else f"mixed ({sb} baseline, {sc} current)"
    return source, relative_change("decode rate", xb, xc, min_effect=min_effect,
                                   run_sd=run_sd, run_sd_df=run_sd_df), (
        "neither source has enough units on both sides: each side's better-covered source")


def compare_calibers(b: Side, c: Side, bands: Sequence[Band] = DEFAULT_BANDS) -> CaliberComparison:
    if b.imported_from or c.imported_from:  # a peer's result file: element by element
        from decodescope.verdict.imported import compare_imported

        return compare_imported(b, c)
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
