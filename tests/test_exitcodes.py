"""Exit codes are an API: the README's table must match decodescope.exitcodes."""

import re
from pathlib import Path

from decodescope.exitcodes import DOCTOR_ERRORS, DOCTOR_OK, DOCTOR_WARNINGS, ExitCode

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_codes() -> dict[int, str]:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^\| (\d+) \| (.+) \|$", section, re.M)}


def test_every_exit_code_is_documented_in_the_readme():
    documented = readme_codes()
    assert set(documented) == {int(c) for c in ExitCode}
    assert "REGRESSION" in documented[ExitCode.REGRESSION]
    assert "CALIBER_MISMATCH" in documented[ExitCode.INCONCLUSIVE]
    assert "unreachable" in documented[ExitCode.UNREACHABLE]
    assert "interrupted" in documented[ExitCode.INTERRUPTED]
    assert "SIGTERM" in documented[ExitCode.TERMINATED] and "interrupted" in documented[ExitCode.TERMINATED]
    assert "internal error" in documented[ExitCode.INTERNAL] and "never 1" in documented[ExitCode.INTERNAL]


def test_internal_error_code_is_distinct_from_every_verdict_code():
    assert ExitCode.INTERNAL == 70  # sysexits EX_SOFTWARE
    assert (ExitCode.INTERRUPTED, ExitCode.TERMINATED) == (130, 143)  # 128 + SIGINT / SIGTERM
    assert len({int(c) for c in ExitCode}) == len(ExitCode)


def test_doctor_codes_follow_pyperf():
    assert (DOCTOR_OK, DOCTOR_WARNINGS, DOCTOR_ERRORS) == (0, 1, 2)
    assert "0 clean, 1 warnings, 2 errors" in README.read_text(encoding="utf-8")
