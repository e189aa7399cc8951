"""GPU state through NVML (`nvidia-ml-py`, imported as `pynvml`; optional extra `gpu`).

Every read is best-effort: a function missing from the installed nvidia-ml-py, or an NVML error
(Not Supported, No Permission …), makes that one item unavailable with the reason; nothing
raises. The module object is a seam (`nvml=`) so tests inject a fake.

Clocks that matter for a step-rate regression are *sampled* while work runs (`GpuSampler`):
an idle GPU parks its SM clock far below the load clock, so one instantaneous read says little.
"""

from __future__ import annotations

import contextlib
import ctypes
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from decodescope.fingerprint.item import Item

INSTALL_HINT = "pip install 'decodescope[gpu]' (nvidia-ml-py)"
# Label of the short sample a fingerprint takes on its own: no probe load ran meanwhile, so
# its clocks describe whatever the GPU was doing (often idle) and are not compared.
NO_LOAD_LABEL = "fingerprint (no probe load)"
DEFAULT_SAMPLE_INTERVAL_S = 0.1  # 10 Hz: NVML clock reads cost ~tens of µs; enough for medians

# nvmlClocksEventReason* bits (nvml.h); same values as the older ...ThrottleReason* names.
THROTTLE_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}

LOCKED_CLOCKS_WHY = ("NVML has no getter for locked clocks (nvmlDeviceSetGpuLockedClocks is "
                     "set-only); the sampled SM clock and the applications_clocks_setting "
                     "throttle reason show their effect")


def load_nvml() -> tuple[Any | None, str | None]:
    """(pynvml module, None) or (None, why it is unavailable)."""
    try:
        import pynvml
    except ImportError:
        return None, f"nvidia-ml-py is not installed: {INSTALL_HINT}"
    return pynvml, None


def _err(fn: str, exc: BaseException) -> str:
    if isinstance(exc, AttributeError):
        return f"{fn} is not in this nvidia-ml-py"
    text = str(exc) or type(exc).__name__
    return f"{fn}: {text}"


def _const(nvml: Any, name: str, default: int) -> int:
    value = getattr(nvml, name, default)
    return value if isinstance(value, int) else default


def _text(v: Any) -> Any:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


def _read(nvml: Any, fn: str, *args: Any, convert: Callable[[Any], Any] = _text) -> Item:
    try:
        return Item.ok(convert(getattr(nvml, fn)(*args)))
    except Exception as exc:  # NVMLError, AttributeError, ctypes errors: all "unavailable"
        return Item.missing(_err(fn, exc))


def _pair(a: Item, b: Item, names: tuple[str, str]) -> Item:
    if a.collected and b.collected:
        return Item.ok({names[0]: a.value, names[1]: b.value})
    return Item.missing("; ".join(it.why or "" for it in (a, b) if not it.collected))


def decode_reasons(mask: int) -> list[str]:
    names = [name for bit, name in THROTTLE_REASONS.items() if mask & bit]
    unknown = mask & ~sum(THROTTLE_REASONS)
    if unknown:
        names.append(hex(unknown))
    return names


def _throttle(nvml: Any, handle: Any) -> Item:
    whys = []
    for fn in ("nvmlDeviceGetCurrentClocksEventReasons",
               "nvmlDeviceGetCurrentClocksThrottleReasons"):
        it = _read(nvml, fn, handle, convert=lambda m: decode_reasons(int(m)))
        if it.collected:
            return it
        whys.append(it.why or fn)
    return Item.missing("; ".join(whys))


def _offset_new_api(nvml: Any, handle: Any, clock_type: int) -> int:
    """nvmlDeviceGetClockOffsets for P0. Called through the function pointer because the
    nvidia-ml-py wrapper discards the return code (a failed call would read as offset 0)."""
    struct = nvml.c_nvmlClockOffset_t
    info = struct()
    info.version = nvml.nvmlClockOffset_v1
    info.type = clock_type
    info.pstate = _const(nvml, "NVML_PSTATE_0", 0)
    fn = nvml._nvmlGetFunctionPointer("nvmlDeviceGetClockOffsets")
    nvml._nvmlCheckReturn(fn(handle, ctypes.byref(info)))
    return int(info.clockOffsetMHz)


def _offset(nvml: Any, handle: Any, clock_type: int, legacy_fn: str) -> Item:
    try:
        return Item.ok(_offset_new_api(nvml, handle, clock_type), "nvmlDeviceGetClockOffsets, P0")
    except Exception as exc:
        why_new = _err("nvmlDeviceGetClockOffsets", exc)
    legacy = _read(nvml, legacy_fn, handle, convert=int)
    if legacy.collected:
        return Item.ok(legacy.value, legacy_fn)
    return Item.missing(f"{why_new}; {legacy.why}")


def _device_items(nvml: Any, i: int, handle: Any) -> dict[str, Item]:
    sm = _const(nvml, "NVML_CLOCK_SM", 1)
    mem = _const(nvml, "NVML_CLOCK_MEM", 2)
    gfx = _const(nvml, "NVML_CLOCK_GRAPHICS", 0)
    p = f"gpu{i}."

    def watts(mw: Any) -> float:
        return round(int(mw) / 1000.0, 1)

    items: dict[str, Item] = {
        p + "name": _read(nvml, "nvmlDeviceGetName", handle),
        p + "uuid": _read(nvml, "nvmlDeviceGetUUID", handle),
        p + "sm_clock_mhz": _read(nvml, "nvmlDeviceGetClockInfo", handle, sm, convert=int),
        p + "mem_clock_mhz": _read(nvml, "nvmlDeviceGetClockInfo", handle, mem, convert=int),
        p + "applications_clocks_mhz": _pair(
            _read(nvml, "nvmlDeviceGetApplicationsClock", handle, sm, convert=int),
            _read(nvml, "nvmlDeviceGetApplicationsClock", handle, mem, convert=int), ("sm", "mem")),
        p + "max_clocks_mhz": _pair(
            _read(nvml, "nvmlDeviceGetMaxClockInfo", handle, sm, convert=int),
            _read(nvml, "nvmlDeviceGetMaxClockInfo", handle, mem, convert=int), ("sm", "mem")),
        p + "pstate0_graphics_clock_range_mhz": _read(
            nvml, "nvmlDeviceGetMinMaxClockOfPState", handle, gfx, _const(nvml, "NVML_PSTATE_0", 0),
            convert=lambda r: {"min": int(r[0]), "max": int(r[1])}),
        p + "locked_clocks": Item.missing(LOCKED_CLOCKS_WHY),
        p + "gpc_clock_offset_mhz": _offset(nvml, handle, gfx, "nvmlDeviceGetGpcClkVfOffset"),
        p + "mem_clock_offset_mhz": _offset(nvml, handle, mem, "nvmlDeviceGetMemClkVfOffset"),
        p + "power_limit_w": _read(nvml, "nvmlDeviceGetPowerManagementLimit", handle,
                                   convert=watts),
        p + "enforced_power_limit_w": _read(nvml, "nvmlDeviceGetEnforcedPowerLimit", handle,
                                            convert=watts),
        p + "power_draw_w": _read(nvml, "nvmlDeviceGetPowerUsage", handle, convert=watts),
        p + "temperature_c": _read(nvml, "nvmlDeviceGetTemperature", handle,
                                   _const(nvml, "NVML_TEMPERATURE_GPU", 0), convert=int),
        p + "performance_state": _read(nvml, "nvmlDeviceGetPerformanceState", handle,
                                       convert=lambda s: f"P{int(s)}"),
        p + "throttle_reasons": _throttle(nvml, handle),
        p + "persistence_mode": _read(nvml, "nvmlDeviceGetPersistenceMode", handle,
                                      convert=lambda m: bool(int(m))),
    }
    return items


def _cuda_version(v: Any) -> str:
    n = int(v)
    return f"{n // 1000}.{(n % 1000) // 10}"


def collect_gpu(nvml: Any | None = None, samples: GpuSamples | None = None) -> dict[str, Item]:
    """GPU items (never raises). `samples` adds the sampled-clock items."""
    if nvml is None:
        nvml, why = load_nvml()
        if nvml is None:
            return {"nvml": Item.missing(why or "NVML unavailable")}
    try:
        nvml.nvmlInit()
    except Exception as exc:
        return {"nvml": Item.missing(f"NVML init failed (no NVIDIA driver?): {_err('nvmlInit', exc)}")}
    try:
        items: dict[str, Item] = {
            "driver_version": _read(nvml, "nvmlSystemGetDriverVersion"),
            "cuda_driver_version": _read(nvml, "nvmlSystemGetCudaDriverVersion",
                                         convert=_cuda_version),
            "nvml_version": _read(nvml, "nvmlSystemGetNVMLVersion"),
        }
        count = _read(nvml, "nvmlDeviceGetCount", convert=int)
        items["count"] = count
        for i in range(count.value if count.collected else 0):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(i)
            except Exception as exc:
                items[f"gpu{i}.name"] = Item.missing(_err("nvmlDeviceGetHandleByIndex", exc))
                continue
            items.update(_device_items(nvml, i, handle))
        if samples is not None:
            items.update(sampled_items(samples))
        return items
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


# --- sampling -------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuSamples:
    """Clock reads taken while something ran. Keys are GPU indices."""

    label: str  # what ran meanwhile: "probe", "fingerprint (idle?)", ...
    interval_s: float
    t_start_s: float | None  # epoch seconds
    t_end_s: float | None
    sm_mhz: dict[int, tuple[int, ...]] = field(default_factory=dict)
    mem_mhz: dict[int, tuple[int, ...]] = field(default_factory=dict)
    reasons_seen: dict[int, tuple[str, ...]] = field(default_factory=dict)
    error: str | None = None  # why sampling produced nothing, if it did


def _spread(xs: tuple[int, ...], label: str) -> dict[str, Any]:
    return {"min": min(xs), "median": statistics.median(xs), "max": max(xs), "n": len(xs),
            "during": label}


def sampled_items(samples: GpuSamples) -> dict[str, Item]:
    """Items `gpuN.sm_clock_sampled_mhz`, `gpuN.mem_clock_sampled_mhz`,
    `gpuN.throttle_reasons_sampled` from a sampler's result."""
    items: dict[str, Item] = {}
    indices = sorted(set(samples.sm_mhz) | set(samples.mem_mhz))
    if not indices:
        why = samples.error or "the sampler took no samples"
        return {"gpu0.sm_clock_sampled_mhz": Item.missing(why),
                "gpu0.mem_clock_sampled_mhz": Item.missing(why)}
    for i in indices:
        for key, series in (("sm_clock_sampled_mhz", samples.sm_mhz.get(i, ())),
                            ("mem_clock_sampled_mhz", samples.mem_mhz.get(i, ()))):
            items[f"gpu{i}.{key}"] = (Item.ok(_spread(series, samples.label)) if series
                                      else Item.missing(samples.error or "no samples"))
        items[f"gpu{i}.throttle_reasons_sampled"] = Item.ok(
            sorted(samples.reasons_seen.get(i, ())))
    return items


class GpuSampler:
    """Samples SM / memory clocks (and throttle reasons) on a thread between start() and
    stop(). Never raises: a missing NVML yields GpuSamples with `error` set."""

    def __init__(self, interval_s: float = DEFAULT_SAMPLE_INTERVAL_S, *, label: str = "probe",
                 nvml: Any | None = None) -> None:
        self.interval_s = interval_s
        self.label = label
        self._nvml = nvml
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sm: dict[int, list[int]] = {}
        self._mem: dict[int, list[int]] = {}
        self._reasons: dict[int, set[str]] = {}
        self._error: str | None = None
        self._t0: float | None = None
        self._inited = False

    def start(self) -> GpuSampler:
        if self._thread is not None:
            return self
        self._t0 = time.time()
        nvml = self._nvml
        if nvml is None:
            nvml, why = load_nvml()
            if nvml is None:
                self._error = why
                return self
            self._nvml = nvml
        try:
            nvml.nvmlInit()
            self._inited = True
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        except Exception as exc:
            self._error = f"NVML unavailable: {_err('nvmlInit', exc)}"
            return self
        self._thread = threading.Thread(target=self._run, args=(nvml, handles),
                                        name="decodescope-gpu-sampler", daemon=True)
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        return self._thread is not None and not self._stop.is_set()

    def _run(self, nvml: Any, handles: list[Any]) -> None:
        sm = _const(nvml, "NVML_CLOCK_SM", 1)
        mem = _const(nvml, "NVML_CLOCK_MEM", 2)
        while True:
            for i, h in enumerate(handles):
                try:
                    self._sm.setdefault(i, []).append(int(nvml.nvmlDeviceGetClockInfo(h, sm)))
                    self._mem.setdefault(i, []).append(int(nvml.nvmlDeviceGetClockInfo(h, mem)))
                except Exception as exc:
                    self._error = _err("nvmlDeviceGetClockInfo", exc)
                reasons = _throttle(nvml, h)
                if reasons.collected:
                    self._reasons.setdefault(i, set()).update(reasons.value)
            if self._stop.wait(self.interval_s):
                break

    def stop(self) -> GpuSamples:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        if self._inited and self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
            self._inited = False
        return GpuSamples(
            label=self.label, interval_s=self.interval_s, t_start_s=self._t0,
            t_end_s=time.time(),
            sm_mhz={i: tuple(v) for i, v in self._sm.items() if v},
            mem_mhz={i: tuple(v) for i, v in self._mem.items() if v},
            reasons_seen={i: tuple(sorted(v)) for i, v in self._reasons.items()},
            error=self._error)

    def __enter__(self) -> GpuSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
