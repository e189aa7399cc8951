"""The report as JSON: `{"schema_version": N, "kind": "decodescope.report", ...}`.

The same data the HTML draws (numbers as numbers, None as null, every plot's points), so
another tool can redraw or check it. Schema history: docs/reports.md.
"""

from __future__ import annotations

import json
import math
from typing import Any

from decodescope.report.document import Report
from decodescope.report.iso import with_iso


def _clean(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None  # NaN / inf are not JSON
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def to_document(report: Report) -> dict[str, Any]:
    """The report's data; every epoch timestamp also as an ISO-8601 `<name>_iso` sibling."""
    doc: dict[str, Any] = _clean(with_iso(report.to_dict()))
    return doc


def render(report: Report) -> str:
    return json.dumps(to_document(report), indent=1, ensure_ascii=False, allow_nan=False) + "\n"
