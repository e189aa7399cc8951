"""What an imported file claims, checked against what it records (MLPerf-style checks of the
work done): each a finding. A file whose work was not done — no request succeeded, realized
output lengths more than 10 % off the length asked for, a request count that does not add up —
is never a side of a regular verdict: `triage` reads INCONCLUSIVE and names the finding.

The checks read a trial's `work` record, which a format's parser fills where its file carries
the numbers (peers/guidellm.py; the llm-d report's request totals): declared output length
(when ignore_eos holds it fixed), realized lengths of the successful and of the failed
requests, counts of successful / errored / incomplete requests, the total the file states and
the number of requests asked for.
"""

from __future__ import annotations

import statistics
from typing import Any

# Realized mean output length within this share of the declared one (MLPerf's TEST06-like
# output-length check, and the issue's ±10 %).
LENGTH_TOLERANCE = 0.10
# A request whose output is below this share of the declared length stopped early.
EARLY_STOP = 0.90
NOT_DONE = "error"  # severity of a finding that makes the file's work not done


def _f(code: str, severity: str, text: str, remedy: str) -> dict[str, Any]:
    return {"code": code, "severity": severity, "text": text, "remedy": remedy}


def audit(work: dict[str, Any] | None, where: str = "") -> list[dict[str, Any]]:
    """The findings of one trial's `work` record ([] when it has none or all checks hold)."""
    if not work:
        return []
    at = f"{where}: " if where else ""
    out: list[dict[str, Any]] = []
    ok = int(work.get("successful") or 0)
    err, inc = int(work.get("errored") or 0), int(work.get("incomplete") or 0)
    failed = err + inc
    if failed and not ok:
        out.append(_f("import.no_success", NOT_DONE,
                      f"{at}none of {failed} requests succeeded ({err} errored, {inc} "
                      "incomplete): the file measured no work",
                      "Rerun the tool against a healthy server; read its errors"))
    elif failed:
        out.append(_f("import.failed_requests", "warning",
                      f"{at}{failed} of {ok + failed} requests failed ({err} errored, {inc} "
                      "incomplete); the numbers are of the successful ones only",
                      "Look at the failed requests' errors in the file"))
    declared = work.get("declared_output")
    lengths = [float(x) for x in work.get("output_lengths") or []]
    if declared:
        early = [x for x in lengths if x < EARLY_STOP * declared]
        if early:
            out.append(_f("import.early_stop", "warning",
                          f"{at}{len(early)} of {len(lengths)} successful requests stopped "
                          f"before {EARLY_STOP:.0%} of the {declared:g} output tokens asked "
                          f"for (shortest {min(early):g})",
                          "Check ignore_eos and the server's max length"))
        cut = [float(x) for x in work.get("failed_output_lengths") or []]
        if cut:
            out.append(_f("import.truncated_output", "warning",
                          f"{at}{len(cut)} failed request(s) ended after "
                          f"{min(cut):g}–{max(cut):g} of {declared:g} output tokens",
                          "Look at the failed requests' errors in the file"))
        if lengths:
            mean = statistics.fmean(lengths)
            if abs(mean - declared) > LENGTH_TOLERANCE * declared:
                out.append(_f("import.output_length", NOT_DONE,
                              f"{at}realized output {mean:.1f} tokens per request on average, "
                              f"declared {declared:g} (more than ±{LENGTH_TOLERANCE:.0%} off): "
                              "the file did not do the work it declares",
                              "Rerun with ignore_eos, or compare runs of realized lengths"))
    total, asked = work.get("total"), work.get("asked")
    if total is not None and int(total) != ok + failed:
        out.append(_f("import.request_count", NOT_DONE,
                      f"{at}the file states {int(total)} requests, its groups hold "
                      f"{ok + failed} ({ok} successful, {err} errored, {inc} incomplete)",
                      "The file was edited or written by a partial run: rerun the tool"))
    if asked is not None and ok + failed < int(asked):
        out.append(_f("import.request_count", NOT_DONE,
                      f"{at}{int(asked)} requests were asked for (max_requests), "
                      f"{ok + failed} were made",
                      "The run ended early: rerun it, or import a file of a complete run"))
    return out


def not_done(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f for f in findings if f.get("severity") == NOT_DONE]
