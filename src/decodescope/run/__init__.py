"""Run orchestration: prepare a probe, run its trials with the observers beside it, commit
each trial to the store and analyse the run (`runner`), plus the wiring every command that
probes shares (`setup`, `probe_side`). Sits above probe, telemetry, store, analysis and
verdict; only exporter and cli import it (docs/architecture.md).
"""
