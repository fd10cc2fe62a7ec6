"""Who sets the pace of a GPU cell: the device (its kernels) or the host (the thread launching them).

A host-bound cell's time follows the speed of one host CPU thread, which on shared VMs changes from
process to process by tens of percent; a device-bound cell's follows the GPU, steady to about 1%.
The report shows the class beside every GPU number and asks host-bound cells for more fresh
processes before it calls a difference real (inferbench.launch.processes, inferbench.analysis.uncertainty).

Two measured signals, each where it means something:

- ``launch_share`` (inferbench.scenarios.timing): the median share of a call's host time spent before
  ``run()`` returned. For engines whose ``run`` returns as soon as the work is queued (PyTorch on
  CUDA, TensorRT), a share near 1 means the GPU finished right after the last launch: it waited for
  the host. ONNX Runtime's ``run`` returns only when its stream is done, so there the share is 1
  whatever the bound, and it is not used.
- ``gpu_busy_pct`` (inferbench.trackers.gpu_telemetry): NVML's share of the window in which a kernel
  was running. Engine-agnostic but coarse: the driver samples every ~1/6 s, and the samples at the
  window's edges cover idle time outside it, so device-bound cells read 75-94% on the H100, not 100
  (host-bound ORT cells 26-36%: docs/results/h100/default/).
"""

from __future__ import annotations

from typing import Literal

Bound = Literal["device", "host"]

#: an asynchronous run() that returns later than this share of the call: the GPU waited for the host
HOST_LAUNCH_SHARE = 0.5
#: a GPU busy less than this share of the window: it idled between kernels, waiting for the host
DEVICE_BUSY_PCT = 70.0


def classify(
    launch_share: float | None, gpu_busy_pct: float | None, launches_async: bool
) -> tuple[Bound | None, str | None]:
    """The bound of a GPU cell and the signal that decided it (None, None when neither is known).

    The launch share decides for asynchronous engines (it is per call and exact); NVML's busy share
    for the others."""
    if launches_async and launch_share is not None:
        bound: Bound = "host" if launch_share >= HOST_LAUNCH_SHARE else "device"
        return bound, f"launch share {launch_share:.2f} (host if >= {HOST_LAUNCH_SHARE})"
    if gpu_busy_pct is not None:
        bound = "device" if gpu_busy_pct >= DEVICE_BUSY_PCT else "host"
        return bound, f"GPU busy {gpu_busy_pct:.0f}% (device if >= {DEVICE_BUSY_PCT:.0f}%)"
    return None, None
