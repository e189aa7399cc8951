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

from decodescope import edge
from decodescope.errors import ProtocolError

# The caliber elements an imported run is compared on, in this order.
ELEMENTS = ("model", "endpoint", "dataset", "dataset sha256", "input tokens (mean)",
            "input length distribution", "output max_tokens", "output tokens (mean)",
            "output length distribution", "ignore_eos", "temperature", "top_p", "top_k",
            "concurrency", "request rate", "burstiness", "requests per trial")
# Realized means: what the requests came to, not what was asked; they vary from run to run of
# one command, so compared within a tolerance.
REALIZED_MEANS = ("input tokens (mean)", "output tokens (mean)")
# Files of one workload (one `import`): realized means within this of each other. Lengths of
# one command vary with its random draw and the model's end of sequence; a different length
# asked for (1024 vs 8192) is far beyond it.
WORKLOAD_TOLERANCE = 0.25


def same_realized(a: str, b: str, tolerance: float) -> bool:
    try:
        x, y = float(a), float(b)
    except ValueError:
        return a == b
    return abs(x - y) <= tolerance * max(abs(x), abs(y), 1.0)


@dataclass
class Source:
    """One file as the readers see it: its bytes, the JSON document (None if it is not one
    JSON value), its JSON lines (None unless every non-empty line is one JSON value) and the
    result the user chose in a file of several (`benchmark`, 1-based: `import --benchmark N`;
    None: not chosen; read by the readers whose files hold several, GuideLLM's)."""

    path: str
    raw: bytes
    doc: Any
    rows: list[Any] | None
    benchmark: int | None = None

    @classmethod
    def of(cls, path: str, raw: bytes, benchmark: int | None = None) -> Source:
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
        return cls(path, raw, doc, rows, benchmark)

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
    # Length distributions the file gives as realized (what the requests came to), not as
    # asked: they vary from run to run and are not compared as the workload.
    realized: tuple[str, ...] = ("output length distribution",)


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
    realized: tuple[str, ...] = ("output length distribution",)

    @property
    def name(self) -> str:
        return self.path + (f" line {self.line}" if self.line else "")


# A decode rate no server comes near, tokens per second per request (a TPOT of 1 µs).
MAX_DECODE_RATE = 1_000_000.0
MAX_AMOUNT = 1e12  # a throughput, a mean length or a rate beyond this is not a measurement


class Fields:
    """The numbers of one result, each read once through one check (type, sign, range:
    decodescope.edge's checks of numbers from outside). A bad value is withheld — None, never
    a number — with a note naming the file, the field and the value (`withheld`). An absent
    field (missing or null) is None without a note: the file does not record it."""

    def __init__(self, doc: Any, path: str, line: int | None = None):
        self.doc = doc
        self.where = path + (f" line {line}" if line else "")
        self.withheld: list[str] = []

    def raw(self, *keys: str) -> Any:
        d = self.doc
        for k in keys:
            if not isinstance(d, dict):
                return None
            d = d.get(k)
        return d

    def _bad(self, keys: tuple[str, ...], value: Any, expected: str) -> None:
        shown = repr(value)
        if len(shown) > 40:
            shown = shown[:37] + "..."
        self.withheld.append(f"withheld: {self.where}: {'.'.join(keys)} = {shown} "
                             f"({type(value).__name__}) is not {expected}; it is kept as no value")

    def seconds(self, *keys: str, scale: float = 1.0, positive: bool = False) -> float | None:
        """A duration (`scale` 1e-3 for ms) in seconds; `positive`: zero is refused too (a
        time per token of zero is no rate)."""
        v = self.raw(*keys)
        if v is None:
            return None
        unit = "ms" if scale == 1e-3 else "s"
        try:
            s = edge.seconds_field(v, ".".join(keys), self.where, scale=scale)
        except ProtocolError:
            s = None
        if s is None or (positive and s <= 0):
            self._bad(keys, v, f"a {'positive' if positive else 'non-negative'} finite duration "
                               f"in {unit}")
            return None
        return s

    def count(self, *keys: str) -> int | None:
        """A whole number ≥ 0 (requests, tokens, a concurrency)."""
        return self.count_of(self.raw(*keys), ".".join(keys))

    def count_of(self, v: Any, name: str) -> int | None:
        """`count` of a value found elsewhere (in a list, a config beside the file)."""
        if v is None:
            return None
        try:
            return edge.count_field(v, name, self.where)
        except ProtocolError:
            self._bad((name,), v, f"a whole number from 0 to {edge.MAX_TOKEN_COUNT:,}")
            return None

    def amount(self, *keys: str, positive: bool = False, limit: float = MAX_AMOUNT) -> float | None:
        """A finite number ≥ 0 (> 0 with `positive`) and at most `limit`: a throughput, a
        mean length, a rate."""
        return self.amount_of(self.raw(*keys), ".".join(keys), positive=positive, limit=limit)

    def amount_of(self, v: Any, name: str, *, positive: bool = False,
                  limit: float = MAX_AMOUNT) -> float | None:
        """`amount` of a value found elsewhere (in a list, a config beside the file)."""
        if v is None:
            return None
        ok = (type(v) in (int, float) and math.isfinite(v) and v <= limit
              and (v > 0 if positive else v >= 0))
        if not ok:
            self._bad((name,), v, f"a finite number {'above' if positive else 'from'} 0"
                                  f"{' up to' if positive else ' to'} {limit:g}")
            return None
        return float(v)

    def rate_per_token(self, *keys: str, scale: float = 1e-3) -> float | None:
        """A decode rate (tokens/s) from a time per output token (ms by default)."""
        s = self.seconds(*keys, scale=scale, positive=True)
        if s is None:
            return None
        if 1.0 / s > MAX_DECODE_RATE:
            self._bad(keys, self.raw(*keys), f"a time per token a server can reach (it makes "
                                            f"more than {MAX_DECODE_RATE:,.0f} tok/s)")
            return None
        return 1.0 / s


def doc_has(f: Fields, *keys: str) -> bool:
    """The file records the field (a withheld value is recorded, and so not a default)."""
    return f.raw(*keys) is not None


# The one contract for a trial's numbers, whatever reader made them: key -> (lowest, highest,
# lowest excluded). A value that breaks it is withheld with a note (check_trial).
TRIAL_RANGES: dict[str, tuple[float, float, bool]] = {
    "decode_rate": (0.0, MAX_DECODE_RATE, True),
    "ttft_s": (0.0, edge.MAX_DURATION_S, False),
    "itl_median_s": (0.0, edge.MAX_DURATION_S, False),
    "requests": (0.0, edge.MAX_TOKEN_COUNT, False),
    "failed": (0.0, edge.MAX_TOKEN_COUNT, False),
    "output_tokens": (0.0, edge.MAX_TOKEN_COUNT, False),
    "prompt_tokens": (0.0, edge.MAX_TOKEN_COUNT, False),
    "wall_rate": (0.0, MAX_AMOUNT, False),
    "aggregate_rate": (0.0, MAX_AMOUNT, False),
    "request_throughput": (0.0, MAX_AMOUNT, False),
    "engine_mal": (1.0, 1e4, False),
    "engine_drafts": (0.0, MAX_AMOUNT, False),
    "engine_accepted_tokens": (0.0, MAX_AMOUNT, False),
}


# Records a trial may carry beside its numbers: the work its file claims (`work`, for
# peers.audit) and each successful request's numbers (`per_request`, for analysis.goodput).
RECORDS = ("work", "per_request")


def _check_per_request(rows: Any, where: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Each request's numbers finite and ≥ 0, else withheld (one note for them all)."""
    out: list[dict[str, Any]] = []
    bad = 0
    for r in rows if isinstance(rows, list) else []:
        if not isinstance(r, dict):
            bad += 1
            continue
        row = dict(r)
        for k, v in r.items():
            if v is not None and not (type(v) in (int, float) and math.isfinite(v) and v >= 0):
                row[k] = None
                bad += 1
        out.append(row)
    notes = ([f"withheld: {where}: {bad} per-request value(s) not a finite number ≥ 0; "
              "kept as no value"] if bad else [])
    return out, notes


def check_trial(trial: dict[str, Any], where: str) -> tuple[dict[str, Any], list[str]]:
    """The trial with every number outside the contract (TRIAL_RANGES; any other number:
    finite and ≥ 0) withheld, and a note for each — the last guard, whatever a reader did.
    Its records (RECORDS) are kept; per-request numbers checked the same way."""
    out, notes = dict(trial), []
    for k, v in trial.items():
        if k in ("idx", "status") or v is None:
            continue
        if k == "work" and isinstance(v, dict):
            continue
        if k == "per_request":
            out[k], more = _check_per_request(v, where)
            notes += more
            continue
        lo, hi, strict = TRIAL_RANGES.get(k, (0.0, math.inf, False))
        ok = (type(v) in (int, float) and math.isfinite(v) and v <= hi
              and (v > lo if strict else v >= lo))
        if not ok:
            out[k] = None
            notes.append(f"withheld: {where}: {k} = {v!r} is outside "
                         f"{'(' if strict else '['}{lo:g}, {hi:g}]; it is kept as no value")
    return out, notes


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
