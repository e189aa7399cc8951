"""What every reader of another tool's result file shares: the caliber elements an imported
run is compared on, what a reader gives (`Parsed`: one trial and the workload it ran under),
what one file read whole is (`PeerResult`), and the small number helpers.

A reader module (one per tool, `decodescope.peers.<tool>`) has `TOOL` (its name in every
sentence), `DECODE_FROM` (where its per-request decode rate comes from) and
`parse(src: Source) -> list[Parsed] | None`: None when the file is not its format, else one
`Parsed` per result in the file (a file of appended results gives several).
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from typing import Any

# The caliber elements an imported run is compared on, in this order.
ELEMENTS = ("model", "endpoint", "dataset", "dataset sha256", "input tokens (mean)",
            "input length distribution", "output max_tokens", "output tokens (mean)",
            "output length distribution", "ignore_eos", "temperature", "top_p", "top_k",
            "concurrency", "request rate", "burstiness", "requests per trial")


@dataclass
class Source:
    """One file as the readers see it: its bytes, the JSON document (None if it is not one
    JSON value) and its JSON lines (None unless every non-empty line is one JSON value)."""

    path: str
    raw: bytes
    doc: Any
    rows: list[Any] | None

    @classmethod
    def of(cls, path: str, raw: bytes) -> Source:
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = None
        rows: list[Any] | None = None
        if doc is None:
            rows = []
            for ln in raw.decode("utf-8", "replace").splitlines():
                if not ln.strip():
                    continue
                try:
                    rows.append(json.loads(ln))
                except ValueError:
                    rows = None
                    break
            rows = rows or None
        return cls(path, raw, doc, rows)

    @property
    def text(self) -> str:
        return self.raw.decode("utf-8", "replace")


@dataclass
class Parsed:
    """What a format's reader read from one result in a file."""

    tool: str
    version: str | None
    elements: dict[str, str | None]
    trial: dict[str, Any]
    notes: list[str]
    started_at: float | None = None
    url: str | None = None


@dataclass
class PeerResult:
    tool: str  # a reader's TOOL: "vllm bench serve", "aiperf", ...
    tool_version: str | None
    path: str
    sha256: str
    elements: dict[str, str | None]
    trial: dict[str, Any]  # one trial's numbers as analysis.run_result writes them
    started_at: float | None = None
    url: str | None = None
    notes: list[str] = field(default_factory=list)
    line: int | None = None  # the result's line in a file of appended results (1-based)


def num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(float(v)) else None


def fmt(v: Any) -> str | None:
    """An element's value as the caliber diff prints it (None: unknown)."""
    if v is None:
        return None
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        if math.isinf(v):
            return "inf"
        return f"{v:g}"
    return str(v)


def dist(xs: list[float]) -> str | None:
    if not xs:
        return None
    return span(min(xs), max(xs), statistics.median(xs))


def span(lo: float | None, hi: float | None, median: float | None) -> str | None:
    """Realized lengths as the caliber diff prints them: "fixed 256", "53–69 (median 66.5)"."""
    if lo is None or hi is None:
        return None
    if lo == hi:
        return f"fixed {lo:g}"
    return f"{lo:g}–{hi:g}" + (f" (median {median:g})" if median is not None else "")


def rate_of(v: Any) -> str | None:
    if isinstance(v, str) and v.strip().lower() in ("inf", "infinity"):
        return "inf"
    if isinstance(v, float) and v == math.inf:  # JSON `Infinity` (SGLang writes it)
        return "inf"
    n = num(v)
    return fmt(n) if n is not None else None


def ms_to_rate(ms: Any) -> float | None:
    n = num(ms)
    return 1000.0 / n if n else None


def as_dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}
