"""Verdicts: like-for-like comparison of two sides (stored runs or engine-log windows) with
statistics, the step rate × MAL decomposition, MAL bands and an evidence chain.

    triage(baseline, current) -> Verdict     verdict/triage.py (pure)
    resolve_side(selector, ...) -> Side      verdict/side_resolve.py (store, log files)
    for_verdict(verdict) -> ExitCode         the exit-code API (README "Exit codes")
"""

from __future__ import annotations

from typing import Any

from decodescope.exitcodes import ExitCode

EXIT_CODES: dict[str, ExitCode] = {
    "NO_CHANGE": ExitCode.OK,
    "IMPROVEMENT": ExitCode.OK,
    "REGRESSION": ExitCode.REGRESSION,
    "CALIBER_MISMATCH": ExitCode.INCONCLUSIVE,
    "INCONCLUSIVE": ExitCode.INCONCLUSIVE,
    "CONTAMINATED": ExitCode.INCONCLUSIVE,
}


def for_verdict(verdict: Any) -> ExitCode:
    """The exit code of a verdict (a Verdict, or its kind as a string)."""
    kind = verdict if isinstance(verdict, str) else verdict.kind
    try:
        return EXIT_CODES[kind]
    except KeyError:
        raise ValueError(f"unknown verdict {kind!r}") from None


__all__ = ["EXIT_CODES", "for_verdict"]
