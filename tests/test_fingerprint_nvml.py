"""NVML path with a fake pynvml module: every field filled; a missing function or an NVML error
makes that one item unavailable with the reason; the sampler yields min/median/max."""

from __future__ import annotations

import time
import types

import pytest

from decodescope.fingerprint.nvml import (
    GpuSampler,
    GpuSamples,
    collect_gpu,
    decode_reasons,
    sampled_items,
)
from decodescope.fingerprint.stack import Fingerprint


class FakeNVMLError(Exception):
    pass


def fake_nvml(*, drop: tuple[str, ...] = (), fail: dict[str, str] | None = None,
              sm_series: list[int] | None = None) -> types.SimpleNamespace:
    fail = fail or {}
    series = list(sm_series or [1395])
    calls = {"sm": 0}

    def maybe_fail(name: str) -> None:
        if name in fail:
            raise FakeNVMLError(fail[name])

    def clock_info(handle: int, kind: int) -> int:
        maybe_fail("nvmlDeviceGetClockInfo")
        if kind == 1:
            v = series[min(calls["sm"], len(series) - 1)]
            calls["sm"] += 1
            return v
        return 3201

    funcs = {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlSystemGetDriverVersion": lambda: "580.159.04",
        "nvmlSystemGetCudaDriverVersion": lambda: 13000,
        "nvmlSystemGetNVMLVersion": lambda: "13.580.159.04",
        "nvmlDeviceGetCount": lambda: 2,
        "nvmlDeviceGetHandleByIndex": lambda i: i,
        "nvmlDeviceGetName": lambda h: b"NVIDIA H200",
        "nvmlDeviceGetUUID": lambda h: f"GPU-0000000{h}",
        "nvmlDeviceGetClockInfo": clock_info,
        "nvmlDeviceGetApplicationsClock": lambda h, k: 1980 if k == 1 else 3201,
        "nvmlDeviceGetMaxClockInfo": lambda h, k: 1980 if k == 1 else 3201,
        "nvmlDeviceGetMinMaxClockOfPState": lambda h, k, p: (345, 1980),
        "nvmlDeviceGetGpcClkVfOffset": lambda h: 200 if h == 0 else 250,
        "nvmlDeviceGetMemClkVfOffset": lambda h: 0,
        "nvmlDeviceGetPowerManagementLimit": lambda h: 700000,
        "nvmlDeviceGetEnforcedPowerLimit": lambda h: 700000,
        "nvmlDeviceGetPowerUsage": lambda h: 312345,
        "nvmlDeviceGetTemperature": lambda h, s: 41,
        "nvmlDeviceGetPerformanceState": lambda h: 0,
        "nvmlDeviceGetCurrentClocksEventReasons": lambda h: 0x4 | 0x1,
        "nvmlDeviceGetPersistenceMode": lambda h: 1,
    }
    ns = types.SimpleNamespace(NVML_CLOCK_GRAPHICS=0, NVML_CLOCK_SM=1, NVML_CLOCK_MEM=2,
                               NVML_TEMPERATURE_GPU=0, NVML_PSTATE_0=0)
    for name, fn in funcs.items():
        if name in drop:
            continue
        if name in fail:
            def failing(*a: object, _n: str = name) -> object:
                raise FakeNVMLError(fail[_n])
            setattr(ns, name, failing)
        else:
            setattr(ns, name, fn)
    return ns


def test_all_fields_filled_from_fake_nvml() -> None:
    items = collect_gpu(fake_nvml())
    assert items["driver_version"].value == "580.159.04"
    assert items["cuda_driver_version"].value == "13.0"
    assert items["count"].value == 2
    for i, offset in ((0, 200), (1, 250)):
        p = f"gpu{i}."
        assert items[p + "name"].value == "NVIDIA H200"  # bytes decoded
        assert items[p + "uuid"].value == f"GPU-0000000{i}"
        assert items[p + "gpc_clock_offset_mhz"].value == offset
        assert items[p + "gpc_clock_offset_mhz"].why == "nvmlDeviceGetGpcClkVfOffset"
        assert items[p + "mem_clock_offset_mhz"].value == 0
        assert items[p + "applications_clocks_mhz"].value == {"sm": 1980, "mem": 3201}
        assert items[p + "max_clocks_mhz"].value == {"sm": 1980, "mem": 3201}
        assert items[p + "pstate0_graphics_clock_range_mhz"].value == {"min": 345, "max": 1980}
        assert items[p + "power_limit_w"].value == 700.0
        assert items[p + "enforced_power_limit_w"].value == 700.0
        assert items[p + "power_draw_w"].value == 312.3
        assert items[p + "temperature_c"].value == 41
        assert items[p + "performance_state"].value == "P0"
        assert items[p + "throttle_reasons"].value == ["gpu_idle", "sw_power_cap"]
        assert items[p + "persistence_mode"].value is True
    # The only item NVML cannot give at all says why.
    locked = items["gpu0.locked_clocks"]
    assert locked.status == "unavailable" and "set-only" in (locked.why or "")
    collected = [k for k, it in items.items() if it.collected]
    assert len(collected) == len(items) - 2  # locked_clocks × 2 GPUs


def test_missing_function_is_unavailable_with_why() -> None:
    items = collect_gpu(fake_nvml(drop=("nvmlDeviceGetGpcClkVfOffset",
                                        "nvmlDeviceGetCurrentClocksEventReasons")))
    off = items["gpu0.gpc_clock_offset_mhz"]
    assert off.status == "unavailable"
    assert "nvmlDeviceGetGpcClkVfOffset is not in this nvidia-ml-py" in (off.why or "")
    assert "nvmlDeviceGetClockOffsets" in (off.why or "")  # the newer API was tried first
    # Throttle reasons fall back to the older function name ... which is also absent here.
    assert items["gpu0.throttle_reasons"].status == "unavailable"
    assert items["gpu0.temperature_c"].collected  # one failure does not spoil the rest


def test_throttle_reasons_fall_back_to_older_function() -> None:
    nv = fake_nvml(drop=("nvmlDeviceGetCurrentClocksEventReasons",))
    nv.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: 0x40
    assert collect_gpu(nv)["gpu0.throttle_reasons"].value == ["hw_thermal_slowdown"]


def test_nvml_error_is_unavailable_with_message() -> None:
    items = collect_gpu(fake_nvml(fail={"nvmlDeviceGetPowerManagementLimit": "Not Supported"}))
    it = items["gpu1.power_limit_w"]
    assert it.status == "unavailable"
    assert it.why == "nvmlDeviceGetPowerManagementLimit: Not Supported"


def test_init_failure_and_missing_module() -> None:
    items = collect_gpu(fake_nvml(fail={"nvmlInit": "Driver Not Loaded"}))
    assert list(items) == ["nvml"]
    assert "Driver Not Loaded" in (items["nvml"].why or "")


def test_decode_reasons_names_unknown_bits() -> None:
    assert decode_reasons(0) == []
    assert decode_reasons(0x2 | 0x800) == ["applications_clocks_setting", "0x800"]


def test_sampler_gives_min_median_max() -> None:
    nv = fake_nvml(sm_series=[1380, 1395, 1400, 1410, 1395, 1395, 1395, 1395])
    sampler = GpuSampler(interval_s=0.005, label="probe", nvml=nv).start()
    time.sleep(0.1)
    samples = sampler.stop()
    assert samples.error is None
    assert len(samples.sm_mhz[0]) >= 2
    items = sampled_items(samples)
    sm = items["gpu0.sm_clock_sampled_mhz"].value
    assert sm["min"] <= sm["median"] <= sm["max"]
    assert sm["during"] == "probe"
    assert items["gpu1.mem_clock_sampled_mhz"].value["median"] == 3201
    assert items["gpu0.throttle_reasons_sampled"].value == ["gpu_idle", "sw_power_cap"]


def test_sampler_without_nvml_reports_why(monkeypatch: pytest.MonkeyPatch) -> None:
    samples = GpuSampler(nvml=fake_nvml(fail={"nvmlInit": "Driver Not Loaded"})).start().stop()
    assert samples.sm_mhz == {}
    assert "Driver Not Loaded" in (samples.error or "")
    items = sampled_items(samples)
    assert items["gpu0.sm_clock_sampled_mhz"].status == "unavailable"


def test_with_gpu_samples_replaces_sampled_items() -> None:
    fp = Fingerprint(taken_at="t", url=None, sections={"gpu": collect_gpu(fake_nvml())})
    samples = GpuSamples(label="probe", interval_s=0.1, t_start_s=0.0, t_end_s=1.0,
                         sm_mhz={0: (1390, 1395, 1400)}, mem_mhz={0: (3201, 3201, 3201)})
    fp2 = fp.with_gpu_samples(samples)
    assert fp2.value("gpu", "gpu0.sm_clock_sampled_mhz")["median"] == 1395
    assert fp2.value("gpu", "gpu0.name") == "NVIDIA H200"  # the rest is kept
    assert fp.value("gpu", "gpu0.sm_clock_sampled_mhz") is None  # the original is unchanged
    again = Fingerprint.from_dict(fp2.to_dict())
    assert again.to_dict() == fp2.to_dict()
