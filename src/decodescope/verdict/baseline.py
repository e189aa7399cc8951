"""Named anchor baselines: a caliber with a band (and floor) of decode rate on a stack.

The seed's acceptance method, step 3: "c1 out1280 = 96–107, a flat band … suspect the stack only
if this anchor itself drops below 90". `baseline set` records such an anchor (given, or derived
from stored runs' per-trial values); `check` probes the anchor caliber and compares.
Stored in the run store's `baselines` table (spec_json carries everything but the name),
with the anchor caliber's full content (`caliber`, spec v2) and its identity: `check` and the
exporter re-probe from the store alone, on any host that has it, whether the caliber came from
a built-in or a file that is gone. A baseline of spec v1 (name only) still resolves built-ins.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from decodescope.caliber.spec import Caliber
from decodescope.errors import StoreError, UsageError
from decodescope.records.stored_run import StoredRun
from decodescope.store.db import Store
from decodescope.verdict import thresholds as th
from decodescope.verdict.run_spread import RunSpread, prior
from decodescope.verdict.side_from_runs import side_from_runs

# spec_json layout; v1: band, floor, runs, source, values, length decay; v2: + caliber (content),
# and (optional, read with defaults) spread and floor_given
SPEC_VERSION = 2


@dataclass(frozen=True)
class Baseline:
    name: str
    created_at: float
    caliber_ref: str
    caliber_identity: str | None
    band: tuple[float, float] | None  # decode tok/s, inclusive
    floor: float | None  # decode tok/s; below it the stack is suspect
    run_ids: tuple[int, ...] = ()
    source: str = "client"  # which decode rate the numbers are: "engine" | "client"
    values: tuple[float, ...] = ()  # per-trial values a derived band came from
    length_decay_pct: float | None = None  # the runs' mean, % per 1K output tokens
    derived: bool = False  # band derived from runs (not given)
    # the anchor caliber's full content (Caliber.to_dict() less identity); None: a v1 baseline
    caliber: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    # the run-to-run spread of the anchor's stack the band was derived with, and that `check`
    # judges under (RunSpread.to_dict(): sd, source "learned" | "prior", runs, text); None: a
    # baseline without runs, or one stored before spreads (check learns it then)
    spread: dict[str, Any] | None = None
    floor_given: bool = False  # the floor is the user's (--floor, or under a given --band)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("caliber")  # pages of prompt text: `calibers show` and the stored spec carry it
        d["caliber_stored"] = self.caliber is not None
        d["band"] = list(self.band) if self.band else None
        return d

    def spec(self) -> dict[str, Any]:
        d = self.to_dict()
        for k in ("name", "created_at", "caliber_ref", "caliber_stored"):
            d.pop(k)
        d["caliber"] = self.caliber
        d["spec_version"] = SPEC_VERSION
        return d

    def band_text(self) -> str:
        parts = []
        if self.band:
            parts.append(f"band {self.band[0]:.1f}–{self.band[1]:.1f}")
        if self.floor is not None:
            parts.append(f"floor {self.floor:.1f}")
        return ", ".join(parts) + f" tok/s ({self.source} decode rate)"

    def run_spread(self) -> RunSpread | None:
        """The stored run-to-run spread as a RunSpread (None: not stored)."""
        d = self.spread
        if not isinstance(d, dict) or not isinstance(d.get("sd"), (int, float)):
            return None
        ci = d.get("ci") or [None, None]
        src = d.get("source")
        return RunSpread(sd=float(d["sd"]),
                         source=src if src in ("learned", "prior", "override", "log") else "prior",
                         runs=int(d.get("runs") or 0), df=d.get("df"), lo=ci[0], hi=ci[1],
                         metric=d.get("metric"), why=d.get("why"), stack=d.get("stack"))

    def spread_text(self) -> str | None:
        rs_ = self.run_spread()
        return None if rs_ is None else rs_.text()


def parse_band(text: str) -> tuple[float, float]:
    """'96-107' or '96–107' or '96..107' → (96.0, 107.0)."""
    t = text.replace("–", "-").replace("..", "-").strip()
    lo_s, sep, hi_s = t.partition("-")
    try:
        if not sep:
            raise ValueError(text)
        lo, hi = float(lo_s), float(hi_s)
    except ValueError:
        raise UsageError(f"bad band {text!r}", where="--band",
                         remedy="Write LO-HI in decode tok/s, e.g. --band 96-107") from None
    if not 0 < lo < hi:
        raise UsageError(f"band {text!r} must satisfy 0 < LO < HI", where="--band",
                         remedy="Write LO-HI in decode tok/s, e.g. --band 96-107")
    return lo, hi


def derive_band(values: Sequence[float], spread: RunSpread, runs: int = 1,
                trials: int | None = None) -> tuple[float, float]:
    """Where one check's median can read without the judge calling it beyond noise (about):
    the geometric mean of the anchor's per-trial values × exp(± z·σ), σ² = s_between²·(1/k + 1)
    + s_within²·(1/n + 1/m) — `spread` the run-to-run spread of the anchor's stack (learned,
    or the prior), k the anchor's runs, n its trials, m a check's trials (default: the
    anchor's per run) — and never narrower than ±MIN_EFFECT (no smaller change is a verdict).
    One run of two trials no longer gives ±2 %: the between-run term is there."""
    xs = [math.log(v) for v in values if v > 0]
    if not xs:
        raise ValueError("no positive values")
    k = max(1, runs)
    m = trials or max(th.MIN_UNITS, round(len(xs) / k))
    within = statistics.stdev(xs) if len(xs) >= 2 else 0.0
    var = spread.sd ** 2 * (1.0 / k + 1.0) + within ** 2 * (1.0 / len(xs) + 1.0 / m)
    z = statistics.NormalDist().inv_cdf(0.5 + th.CONFIDENCE / 2.0)
    half = max(z * math.sqrt(var), math.log1p(th.MIN_EFFECT))
    centre = statistics.fmean(xs)
    return math.exp(centre - half), math.exp(centre + half)


def derive_floor(band: tuple[float, float]) -> float:
    return band[0] * (1 - th.FLOOR_BELOW_BAND)


def make_baseline(name: str, caliber: Caliber, runs: Sequence[StoredRun], *,
                  band: tuple[float, float] | None, floor: float | None,
                  now: float | None = None, spread: RunSpread | None = None) -> Baseline:
    """Pure: validate and build a baseline (runs must carry their derived result). `spread`:
    the run-to-run spread of the runs' stack (run_spread.for_side over the store); None with
    runs: the conservative prior, said so."""
    if not name or any(c.isspace() for c in name) or name.isdigit() or "=" in name or "@" in name:
        raise UsageError(f"bad baseline name {name!r}", where="baseline set",
                         remedy="Use a word without spaces, '=', '@' or only digits, e.g. anchor-h200")
    for run in runs:
        if run.caliber_identity != caliber.identity:
            raise UsageError(
                f"run {run.id} was taken at {run.caliber_ref} ({run.caliber_identity}), not "
                f"{caliber.ref} ({caliber.identity})", where="--from-runs",
                remedy="A baseline pools runs of its own caliber only")
        if (run.result or {}).get("caliber_status") == "missed":
            raise UsageError(f"run {run.id} missed its caliber", where="--from-runs",
                             remedy="`decodescope runs show` lists why; probe again")
        c = (run.result or {}).get("contamination")
        if isinstance(c, dict) and c.get("flagged"):
            raise UsageError(f"run {run.id} saw foreign load on the engine", where="--from-runs",
                             remedy="`check` judges against the anchor's runs: use runs the "
                                    "engine served alone (probe again when it is idle)")
    values: tuple[float, ...] = ()
    source = "client"
    decay = None
    if runs:
        side = side_from_runs(list(runs))
        eng, cli = side.values("engine_decode_rate"), side.values("decode_rate")
        source, vals = ("engine", eng) if len(eng) >= len(cli) and eng else ("client", cli)
        if not vals:
            raise UsageError("the runs have no per-trial decode rate", where="--from-runs",
                             remedy="Use completed probe runs, or give --band / --floor")
        values = tuple(vals)
        decay = side.length_decay_pct
    derived = band is None and bool(values)
    floor_given = floor is not None or band is not None
    if values and spread is None:
        spread = prior(0, why="no run store consulted for the runs' stack")
    if band is None and values:
        assert spread is not None
        band = derive_band(values, spread, len(runs))
    if floor is None and band is not None:
        floor = derive_floor(band)
    if band is None and floor is None:
        raise UsageError("a baseline needs --from-runs, --band or --floor", where="baseline set",
                         remedy="e.g. decodescope baseline set anchor --caliber anchor-c1-out1280 "
                                "--band 96-107 --floor 90")
    if band is not None and floor is not None and floor > band[0] and not derived:
        # (a user's floor inside a band derived from noise is the user's stricter word: kept)
        raise UsageError(f"floor {floor:g} is above the band's low end {band[0]:g}",
                         where="--floor", remedy="The floor sits at or below the band")
    return Baseline(name, now if now is not None else time.time(), caliber.ref, caliber.identity,
                    band, floor, tuple(r.id for r in runs), source, values, decay, derived,
                    caliber=_caliber_content(caliber),
                    spread=spread.to_dict() if (spread is not None and values) else None,
                    floor_given=floor_given)


def _caliber_content(caliber: Caliber) -> dict[str, Any]:
    """What the baseline stores to re-probe: the caliber's full content, verbatim (a redacted
    caliber would be another caliber). It holds no key (keys come from the environment); a
    secret this process knows found in it is refused rather than stored."""
    from decodescope.redact import redact_literals

    d = caliber.to_dict()
    d.pop("identity", None)
    text = json.dumps(d)
    if redact_literals(text) != text:
        raise UsageError("the caliber's text contains a secret this command was given (an API "
                         "key)", where=f"caliber {caliber.ref}",
                         remedy="Take the key out of the caliber file; keys go in --api-key-env")
    return d


def save_baseline(store: Store, b: Baseline) -> None:
    with store.tx() as c:
        c.execute("INSERT OR REPLACE INTO baselines (name, created_at, caliber_ref, spec_json)"
                  " VALUES (?, ?, ?, ?)", (b.name, b.created_at, b.caliber_ref, json.dumps(b.spec())))


def _from_row(name: str, created: float, ref: str, spec_json: str) -> Baseline:
    s = json.loads(spec_json)
    band = s.get("band")
    return Baseline(name, created, ref, s.get("caliber_identity"),
                    (float(band[0]), float(band[1])) if band else None, s.get("floor"),
                    tuple(s.get("run_ids") or ()), s.get("source", "client"),
                    tuple(s.get("values") or ()), s.get("length_decay_pct"),
                    bool(s.get("derived")),
                    caliber=s.get("caliber") if isinstance(s.get("caliber"), dict) else None,
                    spread=s.get("spread") if isinstance(s.get("spread"), dict) else None,
                    floor_given=bool(s.get("floor_given", not s.get("derived"))))


def get_baseline(store: Store, name: str, *, missing_ok: bool = False) -> Baseline | None:
    row = store.conn.execute("SELECT name, created_at, caliber_ref, spec_json FROM baselines"
                             " WHERE name = ?", (name,)).fetchone()
    if row is None:
        if missing_ok:
            return None
        raise StoreError(f"no baseline named {name!r}", where=store.path,
                         remedy="List them with `decodescope baseline list`; create one with "
                                "`decodescope baseline set NAME --caliber C ...`")
    return _from_row(*row)


def list_baselines(store: Store) -> list[Baseline]:
    rows = store.conn.execute("SELECT name, created_at, caliber_ref, spec_json FROM baselines"
                              " ORDER BY name").fetchall()
    return [_from_row(*r) for r in rows]


def delete_baseline(store: Store, name: str) -> bool:
    with store.tx() as c:
        cur = c.execute("DELETE FROM baselines WHERE name = ?", (name,))
        return cur.rowcount > 0


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def anchor_caliber(base: Baseline) -> Caliber:
    """The baseline's anchor caliber: the content it stored (checked against its identity), or
    for a v1 baseline (name only) the built-in as it resolves today, refused when its identity
    is no longer the one the baseline was taken at."""
    from decodescope.caliber.resolve import resolve
    from decodescope.errors import CaliberError

    remedy = ("Re-create it: decodescope baseline set NAME --caliber NAME-OR-FILE.toml "
              "--from-runs IDS (a baseline stores its caliber's content)")
    if base.caliber is not None:
        try:
            cal = Caliber.from_dict(base.caliber)
        except (TypeError, ValueError, KeyError, AttributeError) as e:
            raise CaliberError(f"the caliber stored with the baseline cannot be read: {e}",
                               where=f"baseline {base.name}", remedy=remedy) from None
        if cal.identity != base.caliber_identity:
            raise CaliberError(
                f"the caliber stored with the baseline hashes to {cal.identity}, not the "
                f"identity {base.caliber_identity} it was taken at (the store was edited, or "
                "another decodescope version hashes it differently)",
                where=f"baseline {base.name}", remedy=remedy)
        from decodescope.caliber.resolve import check_values

        check_values(cal, f"baseline {base.name}")  # within limits, as a caliber file is
        return cal
    try:
        cal = resolve(base.caliber_ref)
    except CaliberError:
        raise CaliberError(
            f"the baseline holds only its caliber's name {base.caliber_ref} (an older baseline), "
            "and no built-in caliber has that name", where=f"baseline {base.name}",
            remedy=remedy) from None
    if cal.identity != base.caliber_identity:
        raise CaliberError(
            f"caliber {base.caliber_ref} now has identity {cal.identity}, the baseline was "
            f"taken at {base.caliber_identity}", where=f"baseline {base.name}",
            remedy=remedy)
    return cal
