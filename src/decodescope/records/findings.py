"""Warnings are values: a cause, the context it was seen in, and a remedy.

Stored with the run, printed to stderr by the CLI, exported in JSON.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

Severity = Literal["error", "warning", "info"]


@dataclass(frozen=True)
class Finding:
    code: str  # stable machine name, e.g. "caliber.prompt_short", "contamination"
    cause: str
    remedy: str | None = None
    context: str | None = None
    severity: Severity = "warning"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Finding:
        return cls(code=str(d["code"]), cause=str(d["cause"]), remedy=d.get("remedy"),
                   context=d.get("context"), severity=d.get("severity", "warning"))

    def one_line(self) -> str:
        text = self.cause
        if self.context:
            text += f" ({self.context})"
        if self.remedy:
            text += f" — {self.remedy}"
        return text
