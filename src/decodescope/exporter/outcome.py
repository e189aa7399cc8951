"""One check run as the exporter keeps it: numbers, verdict and exit code, or the error."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from decodescope.exitcodes import ExitCode


@dataclass(frozen=True)
class Outcome:
    """What one run of a check gave (typed; the collector turns it into samples)."""

    t_done_s: float  # wall-clock time the run finished (epoch seconds)
    duration_s: float
    verdict: str | None = None  # CheckResult.status, or "CALIBER_MISSED"; None: an error
    exit_code: int | None = None  # as `decodescope check` would exit
    decode_rate: float | None = None  # tok/s, the baseline's source (client or engine)
    source: str | None = None
    mal: float | None = None
    step_rate: float | None = None  # steps / s / running request (engine)
    floor: float | None = None
    band_lo: float | None = None
    band_hi: float | None = None
    simulated: bool = False
    error_kind: str | None = None  # exception class name when the run failed
    error: str | None = None  # its one-line message
    timed_out: bool = False  # stopped at the check's timeout_s: no verdict, never a number
    # the judge's decode-rate change against the anchor's runs (None: no runs, or no data)
    moved: str | None = None  # "down" / "up": beyond noise (REGRESSION / IMPROVEMENT)
    change: float | None = None  # relative, current / anchor − 1
    change_lo: float | None = None  # its 95 % interval
    change_hi: float | None = None
    spread_source: str | None = None  # "learned" | "prior": the anchor's run-to-run spread
    headline: str | None = None  # the check's own headline
    floor_given: bool = False  # the floor is the user's own (baseline set --floor / --band)
    run_id: int | None = None  # the stored run (None: nothing stored, e.g. a failed probe)
    caliber_identity: str | None = None  # its caliber: the check's history is read at it

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Outcome:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


CALIBER_MISSED_EXIT = int(ExitCode.CALIBER_MISSED)
