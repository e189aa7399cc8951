"""Writing a rendered report to a file."""

from __future__ import annotations

import os
from pathlib import Path

from decodescope.errors import UsageError


def write_file(path: str, text: str) -> None:
    """Write through a temporary file so a failed write never leaves half a report."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UsageError(f"cannot write the report: {exc.strerror or exc}", where=path,
                         remedy="Check the directory exists and is writable") from None
