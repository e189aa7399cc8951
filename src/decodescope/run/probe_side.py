"""One probe of one caliber as a comparison side: what `check`, `sweep` and the exporter run.

    ProbeOptions          what every such probe is given (trials, labels, auth, observers)
    read_api_key(VAR)     the API key from an environment variable, registered as a secret
    probe_side(...)       prepare, observe, run and store one probe; its Side and caliber status
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from decodescope.caliber.spec import Caliber
from decodescope.errors import UsageError
from decodescope.records.findings import Finding
from decodescope.redact import register_secret
from decodescope.run.runner import ProbeSettings, prepare, run_probe
from decodescope.run.setup import build_observers, collect_fp
from decodescope.store.db import Store
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


def probe_side(store: Store, url: str, cal: Caliber, opts: ProbeOptions, *,
               announce: Callable[[str], None] | None = None,
               warn: Callable[[Finding], None] | None = None) -> tuple[Side, bool]:
    """Run one probe through run_probe (with the same observers as `probe`); return its Side
    and whether the realized run missed its caliber. `announce` gets the line that says what
    is probed, `warn` every finding of the run (a command prints them; the exporter does not)."""

    settings = ProbeSettings(url=url, caliber=cal, trials=opts.trials, labels=dict(opts.labels),
                             model=opts.model, api_key=opts.api_key, proxy=opts.proxy)
    prepared = prepare(settings)
    info = prepared[0]
    if announce is not None:
        sim = " [SIMULATED]" if info.simulated else ""
        announce(f"probing {cal.ref} ({cal.identity}) on {info.kind} {info.version or ''}{sim}"
                 f" · {opts.trials} trials")
    observers = build_observers(settings, info, log_path=opts.log_path, scrape=opts.scrape,
                                scrape_interval_s=opts.scrape_interval_s)
    fp = collect_fp(settings, opts.log_path, ()) if opts.fingerprint else None
    outcome = run_probe(settings, store, observers=observers, fingerprint=fp, prepared=prepared)
    if warn is not None:
        for f in outcome.findings:
            warn(f if isinstance(f, Finding) else Finding.from_dict(f))
    run = load_run(store, outcome.run_id)
    missed = (run.result or {}).get("caliber_status") == "missed"
    return side_from_runs([run]), missed
