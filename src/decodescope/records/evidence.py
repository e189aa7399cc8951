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


def render_rows(rows: list[EvidenceRow], *, indent: str = "  ") -> str:
    """Plain-text evidence table: check, result, then indented detail lines."""
    if not rows:
        return ""
    width = max(len(r.check) for r in rows) + 2
    out = [f"{indent}{'check':<{width}}result"]
    for r in rows:
        out.append(f"{indent}{r.check:<{width}}{r.result}")
        if r.detail:
            out.extend(f"{indent}{'':<{width}}  {line}" for line in r.detail.splitlines())
    return "\n".join(out)
