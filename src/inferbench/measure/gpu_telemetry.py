"""GPU telemetry from NVML while a cell measures: clocks, temperature, power, this process's memory,
and the energy counter, read on a background thread.

Energy is the GPU's whole-board counter (``nvmlDeviceGetTotalEnergyConsumption``, Volta and newer)
read at the start and end of the window: it includes the idle power of the gaps between calls and
any other process on that GPU, which the lock keeps away from measuring cells. NVML is optional
(``nvidia-ml-py``, the ``gpu`` extra); without it, or on a GPU without a counter, the fields are None.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

#: seconds between two samples: short enough for a 1 s measurement, cheap (a few NVML calls)
SAMPLE_INTERVAL_S = 0.05
DESCRIPTION = (
    "NVML, sampled every {interval} s on a background thread during the device-boundary loop; "
    "energy = the board's energy counter over that window (idle gaps between calls included) / items"
)


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


class GpuTelemetry:
    """Use as a context manager around the timed loop, then call :meth:`summary`."""

    def __init__(self, nvml: Any, handle: Any, pid: int | None = None, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self.nvml, self.handle = nvml, handle
        self.pid = os.getpid() if pid is None else pid
        self.interval_s = interval_s
        self.samples: dict[str, list[float]] = {
            "sm_clock_mhz": [],
            "mem_clock_mhz": [],
            "temperature_c": [],
            "power_w": [],
        }
        self.process_memory_mb: list[float] = []
        self.energy_j: float | None = None
        self.window_s = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
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

    def _energy_mj(self) -> int | None:
        try:
            return int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))
        except Exception:  # NVMLError_NotSupported before Volta
            return None

    def sample(self) -> None:
        nvml, handle = self.nvml, self.handle
        readings = {
            "sm_clock_mhz": lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),
            "mem_clock_mhz": lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM),
            "temperature_c": lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU),
            "power_w": lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,  # mW
        }
        for name, read in readings.items():
            try:
                self.samples[name].append(float(read()))
            except Exception:
                continue
        try:
            for process in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                used = getattr(process, "usedGpuMemory", None)
                if process.pid == self.pid and used is not None:  # None where the driver hides it (some VMs)
                    self.process_memory_mb.append(used / 2**20)
        except Exception:
            pass

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def __enter__(self) -> GpuTelemetry:
        self.sample()
        self._energy_start_mj = self._energy_mj()
        self._start = time.perf_counter()
        self._thread = threading.Thread(target=self._loop, name="gpu-telemetry", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.window_s = time.perf_counter() - self._start
        end = self._energy_mj()
        if self._energy_start_mj is not None and end is not None:
            self.energy_j = (end - self._energy_start_mj) / 1000.0
        self.sample()

    def summary(self, items: int) -> dict[str, Any]:
        """Aggregates of the samples, and energy per item for ``items`` items computed in the window."""

        def spread(values: list[float]) -> dict[str, float] | None:
            if not values:
                return None
            return {"min": min(values), "mean": sum(values) / len(values), "max": max(values)}

        return {
            "source": "nvml",
            "description": DESCRIPTION.format(interval=self.interval_s),
            "n_samples": len(self.samples["sm_clock_mhz"]),
            "window_s": self.window_s,
            **{name: spread(values) for name, values in self.samples.items()},
            "process_peak_mb": max(self.process_memory_mb) if self.process_memory_mb else None,
            "energy_j": self.energy_j,
            "energy_per_item_mj": self.energy_j * 1000.0 / items if self.energy_j is not None and items > 0 else None,
        }
