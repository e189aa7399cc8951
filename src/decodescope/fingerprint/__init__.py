"""Stack fingerprint: what the serving stack looked like when a number was taken.

    collect_fingerprint(url, ...) -> Fingerprint      best-effort, never raises, redacted
    GpuSampler().start() ... .stop() -> GpuSamples    SM/memory clocks sampled under load
    Fingerprint.with_gpu_samples(samples)             attach the probe's samples
    diff_fingerprints(a, b) -> list[EvidenceRow]      the seed's evidence chain
"""

from decodescope.fingerprint.collect import collect_fingerprint
from decodescope.fingerprint.diff import diff_fingerprints
from decodescope.fingerprint.nvml import GpuSampler, GpuSamples
from decodescope.fingerprint.stack import SCHEMA_VERSION, SECTIONS, Fingerprint, Item

__all__ = [
    "SCHEMA_VERSION",
    "SECTIONS",
    "Fingerprint",
    "GpuSampler",
    "GpuSamples",
    "Item",
    "collect_fingerprint",
    "diff_fingerprints",
]
