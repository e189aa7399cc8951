"""The stack fingerprint: what the stack looked like when a number was taken.

A fingerprint is sections of named items. Every item says whether it was collected or why it
is unavailable — "no data" is an item with status "unavailable" and a reason, never a blank or
a zero. Values are JSON-able and already redacted (see `decodescope.redact`).

Sections (SECTIONS, in display order):
    endpoint   engine kind/version, served models, model card, /get_server_info, /props
    process    the local server process on the endpoint's port: pid, cmdline, start time, env
    packages   engine package version + newest file mtime, related packages, engine binary
    backend    quantization / kernel-backend selection lines since the engine's last start
    repos      watched repositories: git HEAD, and whether the engine could load code from them
    gpu        NVML: per GPU name, clocks (sampled), offsets, power, throttle reasons
    host       hostname, OS, kernel, CPU, memory, Python, decodescope version
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from decodescope.fingerprint.item import Item

SCHEMA_VERSION = 1  # v1: first stored form (sections of {value, status, why} items)

SECTIONS = ("endpoint", "process", "packages", "backend", "repos", "gpu", "host")

Section = dict[str, Item]


@dataclass(frozen=True)
class Fingerprint:
    taken_at: str  # ISO-8601 UTC
    url: str | None  # redacted
    sections: dict[str, Section] = field(default_factory=dict)
    duration_s: float | None = None  # how long collection took
    schema_version: int = SCHEMA_VERSION

    def section(self, name: str) -> Section:
        return self.sections.get(name, {})

    def item(self, section: str, name: str) -> Item:
        """The item, or an unavailable one saying it was never collected."""
        found = self.sections.get(section, {}).get(name)
        if found is None:
            return Item.missing(f"{section}.{name} not in this fingerprint")
        return found

    def value(self, section: str, name: str) -> Any:
        """The collected value, or None."""
        it = self.item(section, name)
        return it.value if it.collected else None

    def with_items(self, section: str, items: Mapping[str, Item]) -> Fingerprint:
        """A copy with these items set (replacing same-named ones) in one section."""
        sections = {k: dict(v) for k, v in self.sections.items()}
        sections.setdefault(section, {}).update(items)
        return replace(self, sections=sections)

    def with_gpu_samples(self, samples: Any) -> Fingerprint:
        """A copy whose sampled-clock items come from `samples` (a `nvml.GpuSamples`, e.g.
        from the `GpuSampler` the probe ran during its trials)."""
        from decodescope.fingerprint.nvml import sampled_items

        return self.with_items("gpu", sampled_items(samples))

    def counts(self) -> tuple[int, int]:
        """(collected, unavailable) item counts."""
        items = [it for sec in self.sections.values() for it in sec.values()]
        n_ok = sum(1 for it in items if it.collected)
        return n_ok, len(items) - n_ok

    def to_dict(self) -> dict[str, Any]:
        ordered = [s for s in SECTIONS if s in self.sections]
        ordered += [s for s in self.sections if s not in SECTIONS]
        return {
            "schema_version": self.schema_version,
            "taken_at": self.taken_at,
            "url": self.url,
            "duration_s": self.duration_s,
            "sections": {s: {k: it.to_dict() for k, it in self.sections[s].items()}
                         for s in ordered},
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Fingerprint:
        version = int(d.get("schema_version", 1))
        if version > SCHEMA_VERSION:
            raise ValueError(f"fingerprint schema {version} is newer than this decodescope "
                             f"({SCHEMA_VERSION}); upgrade decodescope to read it")
        sections = {s: {k: Item.from_dict(v) for k, v in items.items()}
                    for s, items in (d.get("sections") or {}).items()}
        return cls(taken_at=str(d.get("taken_at", "")), url=d.get("url"), sections=sections,
                   duration_s=d.get("duration_s"), schema_version=SCHEMA_VERSION)
