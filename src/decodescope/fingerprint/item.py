"""One fingerprint item: a value with its status ("collected", or "unavailable" and why).

Below stack.py so that collectors (nvml.py) and the fingerprint itself share it without a cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

ItemStatus = Literal["collected", "unavailable"]


@dataclass(frozen=True)
class Item:
    value: Any  # JSON-able; None when unavailable
    status: ItemStatus
    why: str | None = None  # reason when unavailable; optional note when collected

    @classmethod
    def ok(cls, value: Any, note: str | None = None) -> Item:
        return cls(value=value, status="collected", why=note)

    @classmethod
    def missing(cls, why: str) -> Item:
        return cls(value=None, status="unavailable", why=why)

    @property
    def collected(self) -> bool:
        return self.status == "collected"

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "status": self.status, "why": self.why}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Item:
        status = d.get("status", "unavailable")
        if status not in ("collected", "unavailable"):
            raise ValueError(f"unknown item status {status!r}")
        return cls(value=d.get("value"), status=status, why=d.get("why"))
