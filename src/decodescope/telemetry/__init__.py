"""Engine-side numbers: logs, Prometheus, engine detection."""
