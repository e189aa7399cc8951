"""Exit codes: an API. Documented in the README ("Exit codes"); tested in tests/test_exitcodes.py.

Every command returns one of these. Verdict commands map their verdict to a code with
`for_verdict` (defined in decodescope.verdict).
"""

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0  # success; NO_CHANGE / IMPROVEMENT; doctor: no findings above info
    REGRESSION = 1  # triage/check found a regression (or doctor found errors ... see DOCTOR_*)
    USAGE = 2  # bad input: unknown caliber, malformed file, bad option, bad selector
    INCONCLUSIVE = 3  # CALIBER_MISMATCH, INCONCLUSIVE, CONTAMINATED: not like-for-like / not decidable
    UNREACHABLE = 4  # endpoint unreachable, refused, timed out, auth failed, model not served
    PROTOCOL = 5  # the server answered but broke the protocol: non-SSE, HTML, malformed SSE, closed mid-stream
    CALIBER_MISSED = 6  # the probe ran but the realized run missed its caliber (too short, no reasoning...)
    ENGINE = 7  # the embedded engine could not be installed / started / stopped
    INTERNAL = 70  # a bug in decodescope (an unexpected exception); sysexits' EX_SOFTWARE. Never 1:
    # a scheduled `check` must not report a crash as a regression
    INTERRUPTED = 130  # Ctrl-C; completed trials are kept
    TERMINATED = 143  # SIGTERM (128 + 15), handled like Ctrl-C: completed trials are kept


# doctor follows pyperf's `system show`: 0 = clean, 1 = warnings only, 2 = errors.
DOCTOR_OK = 0
DOCTOR_WARNINGS = 1
DOCTOR_ERRORS = 2
