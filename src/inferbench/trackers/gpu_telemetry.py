"""GPU telemetry from NVML around a timed loop, read only at the loop's two ends.

Nothing runs while calls are timed: no sampling thread competes with the thread that launches
kernels (a 50 ms sampler on a background thread did, and moved launch-bound cells; see
experiments/observer_effect/observer_effect.py). At the window's start the newest timestamp of the driver's own
sample buffers and the board's energy counter are read; at its end, the samples the driver took in
between (GPU utilization, SM and memory clocks, power: ``nvmlDeviceGetSamples``), the energy counter
again, the temperature and this process's GPU memory. Where the driver keeps no samples, clocks and
power are the two end readings and the utilization is unknown.

Energy is the whole-board counter (``nvmlDeviceGetTotalEnergyConsumption``, Volta and newer): it
includes the idle power of the gaps between calls and any other process on that GPU, which the
machine lock keeps away from measuring cells. NVML is optional (``nvidia-ml-py``, the ``gpu`` extra);
without it, or on a GPU without a counter, the fields are None.
"""

from __future__ import annotations

import os
import time
from typing import Any

DESCRIPTION = (
    "NVML read at the two ends of each round of the cell's own-boundary calls only (nothing samples during "
    "them): the driver's own samples in between (GPU utilization, SM/memory clock, power), the hottest "
    "temperature at a round's end and this process's GPU memory at the end (the allocators keep their "
    "peak); energy = the board's energy counter over the rounds (idle gaps between calls included) / items"
)
#: the sample buffers read at a window's end, with the attribute of each sample value's union to use
SAMPLED = {
    "gpu_busy_pct": "NVML_GPU_UTILIZATION_SAMPLES",
    "sm_clock_mhz": "NVML_PROCESSOR_CLK_SAMPLES",
    "mem_clock_mhz": "NVML_MEMORY_CLK_SAMPLES",
    "power_w": "NVML_TOTAL_POWER_SAMPLES",
}
#: nvmlValueType_t -> the field of nvmlValue_t holding the value
VALUE_FIELDS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def _load_nvml() -> Any | None:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # not installed, no driver, or no NVML in this container
        return None
    return pynvml


def torch_device_handle(nvml: Any, device_index: int = 0) -> Any:
    """The NVML handle of torch's CUDA device ``device_index``: matched by UUID, since NVML numbers
    GPUs without regard to CUDA_VISIBLE_DEVICES."""
    import torch

    uuid = str(torch.cuda.get_device_properties(device_index).uuid)
    return nvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")


def _spread(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"min": min(values), "mean": sum(values) / len(values), "max": max(values)}


class GpuTelemetry:
    """Use as a context manager around the timed loop, then call :meth:`summary`. Entered again around
    further rounds of the same loop, it adds them up: energy and seconds summed, samples gathered."""

    def __init__(self, nvml: Any, handle: Any, pid: int | None = None) -> None:
        self.nvml, self.handle = nvml, handle
        self.pid = os.getpid() if pid is None else pid
        self.samples: dict[str, list[float]] = {name: [] for name in SAMPLED}
        #: where the driver keeps no samples of a kind: the readings at the window's two ends
        self.end_readings: dict[str, list[float]] = {"sm_clock_mhz": [], "mem_clock_mhz": [], "power_w": []}
        self.temperature_c: float | None = None
        self.process_memory_mb: float | None = None
        self.energy_j: float | None = None
        self.window_s = 0.0
        self._since: dict[str, int] = {}
        self._energy_start_mj: int | None = None
        self._start = 0.0

    @classmethod
    def for_cuda_device(cls, device_index: int = 0) -> GpuTelemetry | None:
        nvml = _load_nvml()
        if nvml is None:
            return None
        try:
            return cls(nvml, torch_device_handle(nvml, device_index))
        except Exception:
            return None

    def energy_mj(self) -> int | None:
        """The board's energy counter now (mJ since the driver loaded), or None where it has none."""
        try:
            return int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))
        except Exception:  # NVMLError_NotSupported before Volta
            return None

    def _driver_samples(self, name: str, since_us: int) -> list[tuple[int, float]] | None:
        """(timestamp µs, value) of the driver's samples of one kind newer than ``since_us``, or None
        where this driver or GPU keeps none."""
        try:
            value_type, samples = self.nvml.nvmlDeviceGetSamples(
                self.handle, getattr(self.nvml, SAMPLED[name]), since_us
            )
        except Exception:  # NVMLError_NotSupported / NotFound (no sample newer than since_us)
            return None
        field = VALUE_FIELDS.get(int(value_type), "uiVal")
        return [(int(s.timeStamp), float(getattr(s.sampleValue, field))) for s in samples]

    def read_instant(self) -> dict[str, float | None]:
        """One reading of the clocks, power and temperature now (cheap: four NVML calls)."""
        nvml, handle = self.nvml, self.handle
        reads = {
            "sm_clock_mhz": lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),
            "mem_clock_mhz": lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM),
            "power_w": lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,  # mW
            "temperature_c": lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU),
        }
        out: dict[str, float | None] = {}
        for name, read in reads.items():
            try:
                out[name] = float(read())
            except Exception:
                out[name] = None
        return out

    def _process_memory_mb(self) -> float | None:
        try:
            for process in self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle):
                used = getattr(process, "usedGpuMemory", None)
                if process.pid == self.pid and used is not None:  # None where the driver hides it (some VMs)
                    return used / 2**20
        except Exception:
            pass
        return None

    def __enter__(self) -> GpuTelemetry:
        # the newest sample each buffer holds now: later ones fall inside the window (whatever clock
        # the driver stamps them with)
        for name in SAMPLED:
            existing = self._driver_samples(name, 0)
            self._since[name] = max((t for t, _ in existing), default=0) if existing is not None else -1
        self._record_ends(self.read_instant())
        self._energy_start_mj = self.energy_mj()
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.window_s += time.perf_counter() - self._start
        end = self.energy_mj()
        if self._energy_start_mj is not None and end is not None:
            self.energy_j = (self.energy_j or 0.0) + (end - self._energy_start_mj) / 1000.0
        for name, since in self._since.items():
            found = self._driver_samples(name, since) if since >= 0 else None
            if found:
                scale = 1e-3 if name == "power_w" else 1.0  # power samples are in mW
                self.samples[name] += [value * scale for _, value in found]
        instant = self.read_instant()
        self._record_ends(instant)
        if instant["temperature_c"] is not None:  # the hottest of the rounds' ends
            self.temperature_c = max(self.temperature_c or instant["temperature_c"], instant["temperature_c"])
        self.process_memory_mb = self._process_memory_mb()

    def _record_ends(self, reading: dict[str, float | None]) -> None:
        for name, values in self.end_readings.items():
            if reading.get(name) is not None:
                values.append(float(reading[name]))

    @property
    def gpu_busy_pct(self) -> float | None:
        """Mean of the driver's utilization samples in the window: the share of time a kernel ran."""
        busy = self.samples["gpu_busy_pct"]
        return sum(busy) / len(busy) if busy else None

    def summary(self, items: int) -> dict[str, Any]:
        """What the window showed, and energy per item for ``items`` items computed in it."""

        def series(name: str) -> dict[str, float] | None:
            return _spread(self.samples[name] or self.end_readings[name])

        return {
            "source": "nvml",
            "description": DESCRIPTION,
            "n_samples": {name: len(values) for name, values in self.samples.items()},
            "window_s": self.window_s,
            "gpu_busy_pct": self.gpu_busy_pct,
            "sm_clock_mhz": series("sm_clock_mhz"),
            "mem_clock_mhz": series("mem_clock_mhz"),
            "power_w": series("power_w"),
            "temperature_c": {"max": self.temperature_c} if self.temperature_c is not None else None,
            "process_peak_mb": self.process_memory_mb,
            "energy_j": self.energy_j,
            "energy_per_item_mj": self.energy_j * 1000.0 / items if self.energy_j is not None and items > 0 else None,
        }
