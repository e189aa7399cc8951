"""ISO-8601 siblings of epoch timestamps in exported JSON (pure).

Stored and exported documents keep their epoch floats (report, triage and exporter code read
them); every epoch field gets an `<name>_iso` sibling, an ISO-8601 string with the UTC offset
("2026-09-15T23:30:00.123456+00:00"). Only fields known to hold epoch seconds are converted:
trace times (`t_send_s`, `t_recv_s`, ...) are perf_counter seconds of the probe process, and
`wall_anchor_s` maps them to epoch (wall = t + anchor).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

# Fields that hold epoch seconds (a number, or a [start, end] pair of numbers).
EPOCH_FIELDS = frozenset({
    "created_at", "finished_at", "started_at", "generated_at", "t_start_s", "t_end_s",
    "steady_span_s", "trial_span_s", "t_first_s", "t_last_s", "sent_at", "done_at",
})
EPOCH_MIN = 946684800.0  # 2000-01-01: smaller numbers are not wall-clock stamps


def iso(t: float | None) -> str | None:
    if t is None or not isinstance(t, (int, float)) or t != t or t < EPOCH_MIN:
        return None
    return dt.datetime.fromtimestamp(float(t), tz=dt.timezone.utc).isoformat()


def with_iso(obj: Any) -> Any:
    """A copy of a JSON-able document with `_iso` siblings beside every epoch field."""
    if isinstance(obj, (list, tuple)):
        return [with_iso(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    out: dict[str, Any] = {}
    for k, v in obj.items():
        out[k] = with_iso(v)
        if k in EPOCH_FIELDS and f"{k}_iso" not in obj:
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                stamp = iso(v)
                if stamp is not None:
                    out[f"{k}_iso"] = stamp
            elif isinstance(v, list) and v and all(isinstance(x, (int, float)) for x in v):
                stamps = [iso(x) for x in v]
                if all(s is not None for s in stamps):
                    out[f"{k}_iso"] = stamps
    return out
