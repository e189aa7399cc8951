"""One probe of one caliber as a comparison side: what `check`, `sweep` and the exporter run.

    ProbeOptions          what every such probe is given (trials, labels, auth, observers)
    read_api_key(VAR)     the API key from an environment variable, registered as a secret
    probe_once(...)       THE probe pipeline (prepare, observers, fingerprint, run_probe): every
                          command that probes (probe, check, sweep, spread, demo) goes through it
    probe_side(...)       prepare, observe, run and store one probe; its Side and caliber status
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from decodescope.caliber.spec import Caliber
from decodescope.errors import UsageError
from decodescope.records.findings import Finding
from decodescope.redact import register_secret
from decodescope.run.runner import ProbeOutcome, ProbeSettings, prepare, run_probe
from decodescope.run.setup import build_observers, collect_fp
from decodescope.store.db import Store
from decodescope.telemetry.detect import EngineInfo
from decodescope.verdict.side import Side
from decodescope.verdict.side_from_runs import side_from_runs
from decodescope.verdict.side_resolve import load_run


def read_api_key(var: str | None) -> str | None:
    """The key in environment variable VAR (None without VAR), registered for redaction."""
    if not var:
        return None
    key = os.environ.get(var)
    if not key:
        raise UsageError(f"environment variable {var} is empty or unset", where="--api-key-env",
                         remedy=f"export {var}=... (the variable's NAME goes to --api-key-env, never the key)")
    register_secret(key)
    return key


@dataclass
class ProbeOptions:
    """What `check`, `sweep` and the exporter pass to every probe they run."""

    trials: int
    labels: dict[str, str] = field(default_factory=dict)
    model: str | None = None
    api_key: str | None = None
    proxy: str | None = None
    log_path: str | None = None
    scrape: bool = True
    scrape_interval_s: float = 1.0
    fingerprint: bool = True


Prepared = tuple[Any, Any, Any]  # run.runner.prepare's (EngineInfo, served model, prompt)


def probe_once(store: Store, settings: ProbeSettings, *, log_path: str | None = None,
               scrape: bool = True, scrape_interval_s: float = 1.0, fingerprint: bool = True,
               watch_repos: tuple[str, ...] = (),
               progress: Callable[[int, int, int], None] | None = None,
               on_created: Callable[[int], None] | None = None,
               announce: Callable[[Prepared], None] | None = None,
               check_fingerprint: Callable[[dict[str, Any] | None], None] | None = None,
               prepared: Prepared | None = None) -> ProbeOutcome:
    """One probe, stored: prepare (unless `prepared` is given), `announce(prepared)` (what a
    command says before it starts), the observers (Prometheus scrape, log tail), the stack
    fingerprint (checked by `check_fingerprint`, which raises to stop before any run is
    created), then run.runner.run_probe with `progress` and `on_created`."""
    prepared = prepared or prepare(settings)
    info: EngineInfo = prepared[0]
    if announce is not None:
        announce(prepared)
    observers = build_observers(settings, info, log_path=log_path, scrape=scrape,
                                scrape_interval_s=scrape_interval_s)
    fp = collect_fp(settings, log_path, watch_repos) if fingerprint else None
    if check_fingerprint is not None:
        check_fingerprint(fp)
    return run_probe(settings, store, observers=observers, progress=progress, fingerprint=fp,
                     prepared=prepared, on_created=on_created)


def probe_side(store: Store, url: str, cal: Caliber, opts: ProbeOptions, *,
               announce: Callable[[str], None] | None = None,
               warn: Callable[[Finding], None] | None = None) -> tuple[Side, bool]:
    """Run one probe (probe_once, with the same observers as `probe`); return its Side and
    whether the realized run missed its caliber. `announce` gets the line that says what is
    probed, `warn` every finding of the run (a command prints them; the exporter does not)."""
    outcome = probe_point(store, url, cal, opts, announce=announce, warn=warn)
    run = load_run(store, outcome.run_id)
    missed = (run.result or {}).get("caliber_status") == "missed"
    return side_from_runs([run]), missed


def probe_point(store: Store, url: str, cal: Caliber, opts: ProbeOptions, *, warmup: int = 1,
                what: str = "", on_created: Callable[[int], None] | None = None,
                announce: Callable[[str], None] | None = None,
                warn: Callable[[Finding], None] | None = None) -> ProbeOutcome:
    """One probe of `cal` with `opts` (probe_once); its outcome. `what` names the load point
    in the announced line (a load sweep's "concurrency 8")."""
    settings = ProbeSettings(url=url, caliber=cal, trials=opts.trials, labels=dict(opts.labels),
                             model=opts.model, api_key=opts.api_key, proxy=opts.proxy,
                             warmup=warmup)

    def said(prepared: Prepared) -> None:
        if announce is not None:
            info = prepared[0]
            sim = " [SIMULATED]" if info.simulated else ""
            at = f" at {what}" if what else ""
            announce(f"probing {cal.ref} ({cal.identity}){at} on {info.kind} "
                     f"{info.version or ''}{sim} · {opts.trials} trials")

    outcome = probe_once(store, settings, log_path=opts.log_path, scrape=opts.scrape,
                         scrape_interval_s=opts.scrape_interval_s, fingerprint=opts.fingerprint,
                         announce=said, on_created=on_created)
    if warn is not None:
        for f in outcome.findings:
            warn(f if isinstance(f, Finding) else Finding.from_dict(f))
    return outcome
