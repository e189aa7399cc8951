"""Stack fingerprint: what the serving stack looked like when a number was taken.

    collect_fingerprint(url, ...) -> Fingerprint      best-effort, never raises, redacted
    GpuSampler().start() ... .stop() -> GpuSamples    SM/memory clocks sampled under load
    Fingerprint.with_gpu_samples(samples)             attach the probe's samples
    diff_fingerprints(a, b) -> list[EvidenceRow]      the seed's evidence chain
    redact_* / register_secret                        secrets never stored or printed
"""

from decodescope.fingerprint.collect import collect_fingerprint
from decodescope.fingerprint.diff import diff_fingerprints
from decodescope.fingerprint.model import SCHEMA_VERSION, SECTIONS, Fingerprint, Item
from decodescope.fingerprint.nvml import GpuSampler, GpuSamples
from decodescope.fingerprint.redact import (
    REDACTED,
    redact_cmdline,
    redact_env,
    redact_headers,
    redact_obj,
    redact_text,
    redact_url,
    register_secret,
)

__all__ = [
    "REDACTED",
    "SCHEMA_VERSION",
    "SECTIONS",
    "Fingerprint",
    "GpuSampler",
    "GpuSamples",
    "Item",
    "collect_fingerprint",
    "diff_fingerprints",
    "redact_cmdline",
    "redact_env",
    "redact_headers",
    "redact_obj",
    "redact_text",
    "redact_url",
    "register_secret",
]
