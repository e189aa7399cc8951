"""The evidence chain of a verdict, in the seed's style: one check, its result."""

from __future__ import annotations

from typing import Any

from decodescope.records.evidence import EvidenceRow
from decodescope.verdict import thresholds as th
from decodescope.verdict.bands import describe
from decodescope.verdict.decide import spec_state
from decodescope.verdict.side import Side, coverage_differs, speculates, windows_words
from decodescope.verdict.stats import Change
from decodescope.verdict.types import Context, changed_word, fmt_num


def _status(x: Change) -> str:
    if x.status in ("no_data", "undecidable"):
        return "unknown"
    return "changed" if x.changed else "same"


def evidence_rows(ctx: Context) -> list[EvidenceRow]:
    b, c = ctx.baseline, ctx.current
    d, m, s = ctx.changes["decode"], ctx.changes["mal"], ctx.changes["step_rate"]
    cal = ctx.caliber
    cal_status = "same" if cal.same else ("changed" if cal.same is False else "unknown")
    diff_rows = [r for r in cal.rows if not r.same and r.element != "caliber"]
    rows = [EvidenceRow("same caliber?", cal.text, cal_status,  # type: ignore[arg-type]
                        "\n".join(f"{r.element}: {r.baseline} → {r.current}" for r in diff_rows)
                        or None)]
    mb, mc = b.typical("mal"), c.typical("mal")
    off = spec_state(b, c)  # one side without speculative decoding: MAL 1 by definition there
    no_drafts = speculates(b) is False and speculates(c) is False
    if off is not None:
        rows.append(_content_spec_off(ctx, off))
    elif no_drafts:  # content moves the decode rate only through drafts
        rows.append(EvidenceRow("what content do tokens per step imply?", "nothing: no "
                                "speculative decoding on either side (one token per step "
                                "whatever the content)", "same"))
    elif b.drafts_every_step is False or c.drafts_every_step is False:
        rows.append(_content_from_steps(ctx))
    elif mb is not None or mc is not None:
        same_band = (ctx.bands[0] is not None and ctx.bands[1] is not None
                     and ctx.bands[0].name == ctx.bands[1].name)
        band_status = "same" if same_band else (
            "changed" if ctx.bands[0] and ctx.bands[1] else "unknown")
        rows.append(EvidenceRow(
            "what content does MAL imply?",
            f"{describe(mb, ctx.band_table)} → {describe(mc, ctx.band_table)}",
            band_status,  # type: ignore[arg-type]
            "\n".join(f"{x.name} ({x.range_text}): {x.meaning}"
                      for x in dict.fromkeys(bb for bb in ctx.bands if bb)) or None))
    rows.append(EvidenceRow(f"decode rate changed? ({ctx.decode_source})", changed_word(d),
                            _status(d)))  # type: ignore[arg-type]
    if off is not None:  # known: the side without drafts has MAL 1 by definition
        rows.append(EvidenceRow(
            "MAL changed?", f"yes: {_mal_or_one(b, off == 'on')} → {_mal_or_one(c, off == 'off')}"
            f" (speculative decoding {off} on the current side)", "changed"))
    elif no_drafts:  # MAL exists only with drafts
        rows.append(EvidenceRow("MAL changed?", "not applicable: no speculative decoding on "
                                "either side (one token per step)", "same"))
    else:
        rows.append(EvidenceRow("MAL changed?", changed_word(m), _status(m)))  # type: ignore[arg-type]
    tps = ctx.changes.get("tokens_per_step")
    if tps is not None and (coverage_differs(b, c) or off is not None):
        rows.append(EvidenceRow(
            "tokens per step changed?", changed_word(tps), _status(tps),  # type: ignore[arg-type]
            f"{_g2(b.typical('tokens_per_step'))} → {_g2(c.typical('tokens_per_step'))}: "
            + ("every step of the side without drafts emits one token"
               if off is not None else
               "steps without a draft (n-gram found no match) emit one token outside MAL")
            + "; decode rate = step rate × tokens per step"))
    rows.append(EvidenceRow("step rate changed?", changed_word(s), _status(s)))  # type: ignore[arg-type]
    dec = ctx.decomposition
    if dec is not None:
        rows.append(EvidenceRow(
            "what carries the delta?", dec.describe(),
            "same" if dec.split_known else "unknown",
            dec.equation() + f"  [{dec.basis}]"))
    if ctx.decode_source.startswith("mixed"):
        rows.append(EvidenceRow(
            "same decode source?", f"no: {ctx.decode_source}", "changed",
            "client streaming timing reads lower than the engine's own samples (seed: client "
            "94.1 vs engine 100+); only engine samples decide"))
    rows.append(_foreign(b, c))
    rb, rc = b.median("running"), c.median("running")
    if rb is not None or rc is not None:
        same_running = rb is not None and rc is not None and abs(rb - rc) < th.RUNNING_DIFF_IS_CONCURRENCY
        rows.append(EvidenceRow(
            "running requests (engine)", f"{_g(rb)} → {_g(rc)}",
            "same" if same_running else ("unknown" if rb is None or rc is None else "changed")))
    if b.simulated or c.simulated:
        rows.append(EvidenceRow("simulated numbers?", "yes: "
                                + ", ".join(x.name for x in (b, c) if x.simulated)
                                + " came from the simulator", "unknown"))
    if b.engine and c.engine and b.engine != c.engine:
        rows.append(EvidenceRow("same engine?", f"no: {b.engine} → {c.engine}", "changed"))
    if b.length_decay_pct is not None and c.length_decay_pct is not None:
        delta = c.length_decay_pct - b.length_decay_pct
        rows.append(EvidenceRow(
            "length decay (per 1K output tokens)",
            f"{b.length_decay_pct:+.1f}% → {c.length_decay_pct:+.1f}%",
            "changed" if abs(delta) > th.LENGTH_DECAY_DELTA_PP else "same"))
    rows.extend(fingerprint_rows(b, c))
    return rows


def _content_from_steps(ctx: Context) -> EvidenceRow:
    """The content signal of a drafter that drafts only where it finds a match (n-gram,
    suffix, llama.cpp lookup): tokens per step and the drafted share. MAL there counts the
    drafted steps only, so the MAL bands (made for MAL where every step drafts) do not apply."""
    b, c = ctx.baseline, ctx.current
    tps = ctx.changes.get("tokens_per_step")
    cov = f"{_share(b.coverage)} → {_share(c.coverage)} of steps drafted"
    result = (f"tokens per step {_g2(b.typical('tokens_per_step'))} → "
              f"{_g2(c.typical('tokens_per_step'))}, {cov}")
    if tps is None or tps.status in ("no_data", "undecidable"):
        status = "unknown"
    else:
        status = "changed" if tps.changed else "same"
    return EvidenceRow(
        "what content do tokens per step imply?", result, status,  # type: ignore[arg-type]
        f"not every step drafts: MAL ({_g2(b.typical('mal'))} → {_g2(c.typical('mal'))}) "
        "counts only the drafted steps, so the MAL bands (made for MAL where every step "
        "drafts) do not apply; text that repeats itself gives more matches, so more drafted "
        "steps and more tokens per step")


def _mal_or_one(side: Side, without_drafts: bool) -> str:
    return "1 by definition (no drafts)" if without_drafts else _g2(side.typical("mal"))


def _content_spec_off(ctx: Context, off: str) -> EvidenceRow:
    """One side drafts, the other does not (speculative decoding off): MAL is 1 by definition
    on the side without drafts and says nothing of content there, so the content signal is
    read on the drafting side only; the split reads tokens per step (rate_change)."""
    b, c = ctx.baseline, ctx.current
    on_side = b if off == "off" else c
    band = describe(on_side.typical("mal"), ctx.band_table)
    none = "1 by definition (no drafts: no content signal)"
    result = f"{band} → {none}" if off == "off" else f"{none} → {band}"
    return EvidenceRow(
        "what content does MAL imply?", result, "unknown",
        f"speculative decoding {off} on the current side: content shows in MAL only where the "
        "server drafts; the decode change splits by tokens per step "
        f"({_g2(b.typical('tokens_per_step'))} → {_g2(c.typical('tokens_per_step'))})")


def _share(v: float | None) -> str:
    return "—" if v is None else f"{100 * min(max(v, 0.0), 1.0):.0f}%"


def _foreign(b: Side, c: Side) -> EvidenceRow:
    flagged = [x.contamination for x in (b, c) if x.contamination]
    if flagged:
        return EvidenceRow("foreign load", "; ".join(str(f) for f in flagged), "changed")
    if b.kind == "log" and c.kind == "log":
        return EvidenceRow("foreign load", f"not applicable to {windows_words(b, c)} (no probe); "
                           "see running requests", "unknown")
    return EvidenceRow("foreign load", "none seen", "same")


def _g2(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}"


def _g(v: float | None) -> str:
    return fmt_num(v)


def fingerprint_rows(b: Side, c: Side) -> list[EvidenceRow]:
    """The fingerprint diff when both sides carry one; a single 'unknown' row otherwise."""
    if b.fingerprint and c.fingerprint:
        try:
            return diff_fingerprint_dicts(b.fingerprint, c.fingerprint)
        except Exception as exc:  # a fingerprint of another version must not break a verdict
            return [EvidenceRow("stack fingerprint", "unknown: cannot compare", "unknown",
                                f"{type(exc).__name__}: {exc}")]
    if b.kind == "run" or c.kind == "run":
        missing = [x.name for x in (b, c) if not x.fingerprint]
        return [EvidenceRow("stack fingerprint", f"unknown: none stored for {', '.join(missing)}",
                            "unknown",
                            f"{windows_words(b, c)} carry no fingerprint; probes store one "
                            "unless --no-fingerprint" if any(x.kind == "log" for x in (b, c))
                            else None)]
    return []


def diff_fingerprint_dicts(a: dict[str, Any], b: dict[str, Any]) -> list[EvidenceRow]:
    from decodescope.fingerprint.diff import diff_fingerprints
    from decodescope.fingerprint.stack import Fingerprint

    return list(diff_fingerprints(Fingerprint.from_dict(a), Fingerprint.from_dict(b)))
