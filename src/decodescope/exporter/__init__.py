"""Fleet checks for Prometheus: `decodescope exporter --config fleet.toml` (docs/exporter.md).

    load_config(path) -> FleetConfig
    Exporter(config).start() ... .stop(); .port; .metrics_text()
    run_check(spec, store_path) -> Outcome   (never raises; in this process)
    run_check_bounded(spec, store_path) -> Outcome   (a worker process, stopped at timeout_s)
"""

from decodescope.exporter.check_job import run_check
from decodescope.exporter.collector import CheckState, FleetCollector
from decodescope.exporter.config import CheckSpec, FleetConfig, load_config, parse_config
from decodescope.exporter.outcome import Outcome
from decodescope.exporter.service import Exporter
from decodescope.exporter.worker import run_check_bounded

__all__ = ["CheckSpec", "CheckState", "Exporter", "FleetCollector", "FleetConfig", "Outcome",
           "load_config", "parse_config", "run_check", "run_check_bounded"]
