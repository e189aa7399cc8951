"""Real NVML output captured on an NVIDIA H200 (device run; see docs/gpu-fingerprint-h200.txt):
the clock, offset and throttle fields are filled, and the stored JSON reads back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from decodescope.fingerprint.diff import diff_fingerprints
from decodescope.fingerprint.stack import Fingerprint

DATA = Path(__file__).parent / "data"


def load(name: str) -> Fingerprint:
    return Fingerprint.from_dict(json.loads((DATA / name).read_text()))


@pytest.mark.parametrize("name", ["gpu-fingerprint-h200.json", "gpu-fingerprint-h200-probe.json",
                                  "gpu-fingerprint-h200-idle.json"])
def test_gpu_fields_filled(name: str) -> None:
    fp = load(name)
    gpu = fp.section("gpu")
    assert fp.value("gpu", "count") == 1
    assert fp.value("gpu", "driver_version") == "580.159.04"
    assert fp.value("gpu", "cuda_driver_version") == "13.0"
    assert "H200" in fp.value("gpu", "gpu0.name")
    for key in ("gpu0.sm_clock_mhz", "gpu0.mem_clock_mhz", "gpu0.gpc_clock_offset_mhz",
                "gpu0.mem_clock_offset_mhz", "gpu0.applications_clocks_mhz",
                "gpu0.max_clocks_mhz", "gpu0.power_limit_w", "gpu0.enforced_power_limit_w",
                "gpu0.temperature_c", "gpu0.throttle_reasons", "gpu0.persistence_mode",
                "gpu0.sm_clock_sampled_mhz", "gpu0.mem_clock_sampled_mhz",
                "gpu0.throttle_reasons_sampled"):
        assert gpu[key].collected, (key, gpu[key].why)
    assert isinstance(fp.value("gpu", "gpu0.gpc_clock_offset_mhz"), int)
    assert fp.value("gpu", "gpu0.max_clocks_mhz") == {"sm": 1980, "mem": 3201}
    sampled = fp.value("gpu", "gpu0.sm_clock_sampled_mhz")
    assert 0 < sampled["min"] <= sampled["median"] <= sampled["max"] <= 1980
    # The one NVML cannot give says why.
    assert gpu["gpu0.locked_clocks"].status == "unavailable"
    assert Fingerprint.from_dict(fp.to_dict()).to_dict() == fp.to_dict()


def test_under_load_vs_idle() -> None:
    idle, probe = load("gpu-fingerprint-h200-idle.json"), load("gpu-fingerprint-h200-probe.json")
    assert idle.value("gpu", "gpu0.throttle_reasons") == ["gpu_idle"]
    loaded = probe.value("gpu", "gpu0.sm_clock_sampled_mhz")
    assert loaded["n"] == 50 and loaded["median"] > 1000  # matmul load lifts the SM clock
    assert idle.value("gpu", "gpu0.sm_clock_sampled_mhz")["median"] < 500
    row = {r.check: r for r in diff_fingerprints(idle, probe)}["GPU clocks and offsets in place?"]
    assert row.status == "same"  # offsets equal; idle clocks are not compared with load clocks
    assert "not compared" in (row.detail or "")
