"""Run one fleet check: `decodescope check` as a function that never raises."""

from __future__ import annotations

import time
from collections.abc import Callable

from decodescope.errors import DecodescopeError
from decodescope.exporter.config import CheckSpec
from decodescope.exporter.outcome import CALIBER_MISSED_EXIT, Outcome


def run_check(spec: CheckSpec, store_path: str | None,
              clock: Callable[[], float] = time.time) -> Outcome:
    """Probe spec.url at the anchor caliber of baseline spec.baseline and compare with its band.

    Every failure becomes an Outcome with error_kind (the exception's class) and its one-line
    message: a service must not die of one unreachable endpoint.
    """
    t0 = time.monotonic()
    try:
        return _run(spec, store_path, clock, t0)
    except DecodescopeError as e:
        return Outcome(clock(), time.monotonic() - t0, error_kind=type(e).__name__,
                       error=e.one_line())
    except Exception as e:  # noqa: BLE001 — one line, never a traceback (docs/exporter.md)
        return Outcome(clock(), time.monotonic() - t0, error_kind=type(e).__name__,
                       error=f"{type(e).__name__}: {e}")


def _run(spec: CheckSpec, store_path: str | None, clock: Callable[[], float],
         t0: float) -> Outcome:
    from decodescope.errors import UsageError
    from decodescope.run.probe_side import ProbeOptions, probe_side, read_api_key
    from decodescope.store.connect import open_store
    from decodescope.verdict.anchor import check_against, judge_anchor
    from decodescope.verdict.baseline import anchor_caliber, get_baseline

    opts = ProbeOptions(trials=spec.trials, labels={"check": spec.name, **dict(spec.labels)},
                        model=spec.model, api_key=read_api_key(spec.api_key_env),
                        proxy=spec.proxy, log_path=spec.log, scrape=spec.scrape,
                        scrape_interval_s=spec.scrape_interval_s, fingerprint=spec.fingerprint)
    with open_store(store_path) as store:
        base = get_baseline(store, spec.baseline, missing_ok=True)
        if base is None:
            raise UsageError(f"no baseline named {spec.baseline!r}", where=f"check {spec.name}",
                             remedy="Create it with `decodescope baseline set`")
        cal = anchor_caliber(base)
        side, missed = probe_side(store, spec.url, cal, opts)
        judged = judge_anchor(store, base, side)
    result = check_against(base, side, judged=judged)
    band = base.band
    ch = result.change
    return Outcome(
        t_done_s=clock(), duration_s=time.monotonic() - t0,
        verdict="CALIBER_MISSED" if missed else result.status,
        exit_code=CALIBER_MISSED_EXIT if missed else result.exit_code,
        decode_rate=result.value, source=result.source, mal=side.median("mal"),
        step_rate=side.median("step_rate"), floor=base.floor,
        band_lo=band[0] if band else None, band_hi=band[1] if band else None,
        simulated=bool(side.simulated), moved=None if missed else result.moved,
        change=None if ch is None else ch.rel,
        change_lo=None if ch is None else ch.ci_lo, change_hi=None if ch is None else ch.ci_hi,
        spread_source=None if result.spread is None else result.spread.source,
        headline=result.headline, floor_given=bool(base.floor_given),
        run_id=side.run_ids[-1] if side.run_ids else None, caliber_identity=cal.identity)
