"""Evidence rows: one check, its result, and whether the two sides agree.

The seed's "evidence chain" table (`check | result`) as a value. Verdicts attach these rows;
the fingerprint diff (`decodescope.fingerprint.diff`) and triage produce them.

    status "same"     both sides were observed and agree
           "changed"  both sides were observed and differ
           "unknown"  at least one side lacks the observation: no conclusion either way
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

EvidenceStatus = Literal["same", "changed", "unknown"]
STATUSES: tuple[EvidenceStatus, ...] = ("same", "changed", "unknown")


@dataclass(frozen=True)
class EvidenceRow:
    check: str  # the question, in the seed's words: "same launch cmdline?"
    result: str  # the short answer a reader sees first: "no: -t 2 → -t 1"
    status: EvidenceStatus
    detail: str | None = None  # longer explanation, line by line, when there is one

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"EvidenceRow.status must be one of {STATUSES}, not {self.status!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EvidenceRow:
        return cls(check=d["check"], result=d["result"], status=d["status"],
                   detail=d.get("detail"))

    @property
    def shown_detail(self) -> str | None:
        """The detail a reader is shown: detail_to_show(result, detail)."""
        return detail_to_show(self.result, self.detail)


def detail_to_show(result: str, detail: str | None) -> str | None:
    """The detail under a result, or None when the result already says every line of it (a
    change list short enough to be named whole in the one-line result: "no: -t 2 → -t 1"
    with the detail "-t 2 → -t 1"). The record keeps the detail (JSON has every line); the
    renderers show it once."""
    if not detail:
        return None
    lines = [line.strip() for line in detail.splitlines() if line.strip()]
    return None if lines and all(line in result for line in lines) else detail


def shown_detail_of(row: dict[str, Any]) -> str | None:
    """detail_to_show of an evidence row as a dict (EvidenceRow.to_dict, a stored report)."""
    detail = row.get("detail")
    return detail_to_show(str(row.get("result", "")), str(detail) if detail else None)


def render_rows(rows: list[EvidenceRow], *, indent: str = "  ") -> str:
    """Plain-text evidence table: check, result, then indented detail lines."""
    if not rows:
        return ""
    width = max(len(r.check) for r in rows) + 2
    out = [f"{indent}{'check':<{width}}result"]
    for r in rows:
        out.append(f"{indent}{r.check:<{width}}{r.result}")
        detail = r.shown_detail
        if detail:
            out.extend(f"{indent}{'':<{width}}  {line}" for line in detail.splitlines())
    return "\n".join(out)
