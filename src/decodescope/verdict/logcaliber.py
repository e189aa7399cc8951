"""Same caliber? for log windows, whose caliber is unknown: only what the logs show.

Unknown is not same. A log window carries no prompt, sampling or output length, so the caliber
is *established* for log windows only when
- the user asserts it (`triage --assume-same-caliber`: both sides carry `caliber_asserted`), or
- both sides' MAL fall in the same named band of a band table that fits the stack — the
  speculative method and k read from the log (`bands.bands_fit`): the built-in bands are for
  MTP-like drafting with k=6 and say nothing about n-gram k=3, where MAL sits near k + 1 on
  code and near 1 on chat.
The logs show a mismatch when the running-request counts differ (a different concurrency) or
fitting bands name different content. Everything else is `same = None` ("not established",
with "mismatch suspected" when MAL moved a lot): the verdict is then INCONCLUSIVE, never
REGRESSION / IMPROVEMENT (verdict/decide.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from decodescope.verdict import thresholds as th
from decodescope.verdict.bands import Band, bands_fit, content_band, describe
from decodescope.verdict.side import Side, kind_words, windows_words
from decodescope.verdict.types import CaliberComparison, fmt_num

# MAL moving by more than this (relative) between two sides whose caliber is not established is
# reported as "mismatch suspected": MAL follows content (the seed: code 4–5, chat 2.5–3).
SUSPECT_MAL_CHANGE = 0.15
# Draft coverage (drafted steps / steps) of a lookup speculator differing by at least this much
# (absolute) and this factor under the same method and k names different content.
COVERAGE_DIFF_IS_CONTENT = 0.25
COVERAGE_RATIO_IS_CONTENT = 2.0


def _stack(s: Side) -> str:
    if s.spec_method == "off":
        return "speculative decoding off"
    what = s.spec_method or ("drafts every step" if s.every_step_drafts else
                             "not every step drafts" if s.every_step_drafts is False
                             else "method not logged")
    return what + (f", k={s.spec_k}" if s.spec_k else "")


def _suspect(mb: float | None, mc: float | None) -> str:
    if mb and mc and abs(math.log(mc / mb)) >= math.log1p(SUSPECT_MAL_CHANGE):
        return (f"; mismatch suspected: MAL {mb:.2f} → {mc:.2f} moves with content "
                "(code reads higher than chat)")
    return ""


def _coverage_mismatch(b: Side, c: Side) -> str | None:
    """Lookup speculators (n-gram, suffix, prompt lookup) draft only where the output repeats
    its context, so with the same method and k on both sides the share of steps that drafted
    follows the content alone: 92 % on a code rewrite, 3 % on varied prose (vLLM n-gram k=3,
    shared/reference/vllm-cpu.md). A large change of that share is a content change."""
    if b.kind != "log" or c.kind != "log":
        return None
    if b.spec_method != c.spec_method or b.spec_k != c.spec_k or b.spec_k is None:
        return None
    vb, vc = b.draft_coverage, c.draft_coverage
    if vb is None or vc is None or (b.every_step_drafts and c.every_step_drafts):
        return None
    lo, hi = sorted((vb, vc))
    if hi - lo < COVERAGE_DIFF_IS_CONTENT or (lo > 0 and hi / lo < COVERAGE_RATIO_IS_CONTENT):
        return None
    return (f"unknown for {windows_words(b, c)}; the share of steps that drafted moved "
            f"{100 * vb:.0f}% → {100 * vc:.0f}% under the same speculative settings "
            f"({_stack(b)}): a lookup speculator drafts only where the output repeats its "
            "context, so the content differs")


def compare_log_calibers(b: Side, c: Side, bands: Sequence[Band]) -> CaliberComparison:
    """Same caliber? when at least one side is log windows (no caliber identity)."""
    rb, rc = b.median("running"), c.median("running")
    win = windows_words(b, c)
    if rb is not None and rc is not None and abs(rb - rc) >= th.RUNNING_DIFF_IS_CONCURRENCY:
        return CaliberComparison(False, f"unknown for {win}; running requests differ "
                                        f"({fmt_num(rb)} → {fmt_num(rc)}): a different concurrency")
    if b.caliber_asserted and c.caliber_asserted:
        return CaliberComparison(True, "asserted by the user (--assume-same-caliber); the "
                                       f"{win} do not show it")
    mb, mc = b.typical("mal"), c.typical("mal")  # the statistic the side table shows
    logs = [s for s in (b, c) if s.kind == "log"]
    run = next((s for s in (b, c) if s.kind == "run"), None)
    head = ("not established: " + (f"{logs[0].name} is {kind_words(logs[0])} (no caliber), "
                                   f"{run.name} a {kind_words(run)}"
                                   if len(logs) == 1 and run is not None else
                                   f"{win} carry no caliber"))
    off = [s for s in (b, c) if s.spec_method == "off"]
    if len(off) == 1:
        return CaliberComparison(None, f"{head}; speculative decoding off on {off[0].name} "
                                       "(MAL 1 by definition), so MAL cannot show the content")
    if b.kind == "log" and c.kind == "log" and (b.spec_k, b.spec_method) != (c.spec_k, c.spec_method) \
            and None not in (b.spec_k, c.spec_k):
        return CaliberComparison(None, f"{head}; speculative settings differ ({_stack(b)} → "
                                       f"{_stack(c)}): MAL bands cannot compare content"
                                 + _suspect(mb, mc))
    cov = _coverage_mismatch(b, c)
    fits = []
    for s in logs:
        ok, why = bands_fit(bands, s.spec_method, s.spec_k, s.every_step_drafts)
        if not ok:
            if cov is not None:
                return CaliberComparison(False, cov)
            return CaliberComparison(None, f"{head}; MAL bands do not fit {s.name} ({why})"
                                     + _suspect(mb, mc))
        fits.append(why)
    # MAL bands only where every step drafts (bands.content_band)
    bb, bc = content_band(mb, b.drafts_every_step, bands), content_band(mc, c.drafts_every_step,
                                                                        bands)
    scope = f" ({fits[0]})" if fits else ""
    if bb is not None and bc is not None:
        if bb.name != bc.name:
            return CaliberComparison(False, f"unknown for {win}; MAL bands say different "
                                            f"content ({bb.name} → {bc.name}){scope}")
        return CaliberComparison(True, f"same content class by MAL band{scope}: {bb.name} on "
                                       f"both sides ({win}: the caliber itself is unknown)")
    if cov is not None:
        return CaliberComparison(False, cov)
    return CaliberComparison(None, f"{head}; MAL bands{scope} say {describe(mb, bands)} → "
                                   f"{describe(mc, bands)}" + _suspect(mb, mc))
