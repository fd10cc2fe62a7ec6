"""Who sets the pace of a GPU cell: the device (its kernels) or the host (the thread launching them).

A host-bound cell's time follows the speed of one host CPU thread, which on shared VMs changes from
process to process by tens of percent; a device-bound cell's follows the GPU, steady to about 1%.
The report shows the class beside every GPU number and asks host-bound cells for more fresh
processes before it calls a difference real (inferbench.launch.processes, inferbench.analysis.uncertainty).

Two measured signals, each where it means something:

- ``launch_share`` (inferbench.scenarios.timing): the median share of a call's host time spent before
  ``run()`` returned. Where ``run`` returns as soon as the work is queued (PyTorch on CUDA, TensorRT),
  a share near 1 means the GPU finished right after the last launch: it waited for the host. Where
  ``run`` waits for the device anywhere (ONNX Runtime's CUDA provider at its end; transformers' eager
  encoders at their attention-mask check, timm's ViT), the host's time is not launching alone and the
  share is not used. Which of the two a call does is measured, not declared: ``probe_launches_async``
  keeps the engine's stream busy with a sleeping kernel and sees whether the call returns before the
  sleep ends.
- ``gpu_busy_pct`` (inferbench.trackers.gpu_telemetry): NVML's share of the window in which a kernel
  was running. Engine-agnostic but coarse: the driver samples every ~1/6 s, and the samples at the
  window's edges cover idle time outside it, so device-bound cells read below 100%
  (docs/results/h100/default/).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Literal

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


#: GPU clock cycles the probe's sleeping kernel keeps the stream busy (~20-40 ms at 1-2 GHz): longer than
#: launching any cell's kernels takes the host
PROBE_SLEEP_CYCLES = 40_000_000


def probe_launches_async(call: Callable[[], Any], stream: Any, synchronize: Callable[[], None]) -> bool | None:
    """Whether ``call()`` only queues work, never waiting for the device: ``stream`` (the engine's) is kept
    busy by a sleeping kernel first, and a call that returns before the sleep ends waited for nothing.
    A call that synchronises anywhere (at its end, or on a value it reads back mid-way) reads False.
    None where it cannot be told (no stream, no sleeping kernel in this PyTorch). A call whose kernels
    overflow the driver's launch queue (over ~1,000 of them) blocks until the queue drains and reads
    False too: its bound then comes from NVML's busy share, which suits such device-heavy calls."""
    import torch

    sleep = getattr(torch.cuda, "_sleep", None)
    if stream is None or sleep is None:
        return None
    synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(stream):
        start.record(stream)
        sleep(PROBE_SLEEP_CYCLES)
        end.record(stream)
    began = time.perf_counter()
    call()
    returned_s = time.perf_counter() - began
    synchronize()
    stream.synchronize()
    slept_s = start.elapsed_time(end) * 1e-3
    return returned_s < slept_s / 2
