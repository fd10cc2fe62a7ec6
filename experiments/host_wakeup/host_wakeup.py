"""How long a blocked thread takes to wake on this host, with and without a PM QoS request (not a test).

    python experiments/host_wakeup/host_wakeup.py --out wakeup.json [--samples 2000] [--gpu]

A serving cell's queries pass threads that sleep between queries: LoadGen's issue thread hands a query to
the batcher's worker, which is blocked on a queue, and the worker waits for the GPU. On a virtual machine
an idle vCPU halts and leaves the guest; waking it again goes through the hypervisor, and the sparser the
queries the more often that happens, which is one way a p99 can fail to fall as the load drops. This
probe times the hand-over alone (one thread puts an item in a queue.Queue, the blocked one returns from
get(); wake latency = the get's return minus the put), after idle gaps of 0, 1, 5 and 20 ms, and, with
--gpu, a ~1 ms CUDA graph launched and synchronised after the same gaps; each with no request and with
0 us written to /dev/cpu_dma_latency (the kernel's PM QoS interface: while the file stays open no CPU
enters an idle state slower to leave than that, i.e. the idle loop polls instead of halting; tuned's
latency-performance profile and MLPerf submissions do the same). Records the cpuidle driver and states,
how often each state was entered, and the steal time (/proc/stat) of each setting.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

GAPS_S = (0.0, 0.001, 0.005, 0.02)
CPUIDLE = Path("/sys/devices/system/cpu")


@contextmanager
def cpu_dma_latency(us: int | None) -> Iterator[str]:
    """Hold a PM QoS request of ``us`` microseconds (None: none) for the block."""
    if us is None:
        yield "none"
        return
    try:
        fd = os.open("/dev/cpu_dma_latency", os.O_WRONLY)
    except OSError as error:
        yield f"refused: {error.strerror}"
        return
    try:
        os.write(fd, struct.pack("i", us))
        yield f"{us} us"
    finally:
        os.close(fd)


def idle_state_usage() -> dict[str, int]:
    """Entries into each cpuidle state, summed over CPUs."""
    usage: dict[str, int] = {}
    for state in CPUIDLE.glob("cpu[0-9]*/cpuidle/state[0-9]*"):
        name = (state / "name").read_text().strip()
        usage[name] = usage.get(name, 0) + int((state / "usage").read_text())
    return usage


def steal_ticks() -> int:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()
    return int(fields[8]) if len(fields) > 8 else 0


def handover_ms(samples: int, gap_s: float) -> list[float]:
    """Wake latency of a thread blocked on queue.get(), after ``gap_s`` of idleness."""
    handed: queue.Queue[float | None] = queue.Queue()
    woke: list[float] = []

    def worker() -> None:
        while (put_at := handed.get()) is not None:
            woke.append((time.perf_counter() - put_at) * 1e3)

    thread = threading.Thread(target=worker)
    thread.start()
    for _ in range(samples):
        time.sleep(gap_s) if gap_s else time.sleep(0.0002)  # let the worker block again
        handed.put(time.perf_counter())
    handed.put(None)
    thread.join()
    return woke


def gpu_call() -> Callable[[], None]:
    """A CUDA graph of ~1 ms of matrix products, replayed and waited for."""
    import torch

    x = torch.randn(2048, 2048, device="cuda", dtype=torch.float16)
    y = x
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):
            y = x @ x  # warm up cuBLAS outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(40):
            y = y @ x
    torch.cuda.synchronize()

    def call() -> None:
        graph.replay()
        torch.cuda.synchronize()

    return call


def gpu_ms(call: Callable[[], None], samples: int, gap_s: float) -> list[float]:
    times = []
    for _ in range(samples):
        if gap_s:
            time.sleep(gap_s)
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def summary(times: list[float]) -> dict[str, float]:
    return {
        "p50_ms": float(np.percentile(times, 50)),
        "p99_ms": float(np.percentile(times, 99)),
        "p99.9_ms": float(np.percentile(times, 99.9)),
        "max_ms": float(max(times)),
        "over_1ms_share": float(np.mean(np.asarray(times) > 1.0)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--gpu", action="store_true", help="also time a CUDA graph after the same gaps")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    driver = CPUIDLE / "cpuidle" / "current_driver"
    governor = CPUIDLE / "cpuidle" / "current_governor_ro"
    out: dict[str, Any] = {
        "cpuidle_driver": driver.read_text().strip() if driver.exists() else None,
        "cpuidle_governor": governor.read_text().strip() if governor.exists() else None,
        "cpus": os.cpu_count(),
        "rows": [],
    }
    call = gpu_call() if args.gpu else None
    for request in (None, 0):
        with cpu_dma_latency(request) as held:
            for gap_s in GAPS_S:
                probes: dict[str, Callable[[], list[float]]] = {
                    "handover": lambda gap_s=gap_s: handover_ms(args.samples, gap_s)
                }
                if call is not None:
                    probes["gpu_graph"] = lambda gap_s=gap_s: gpu_ms(call, args.samples, gap_s)
                for probe, run in probes.items():
                    before_idle, before_steal = idle_state_usage(), steal_ticks()
                    times = run()
                    after_idle = idle_state_usage()
                    row = {
                        "probe": probe,
                        "pm_qos": held,
                        "gap_ms": gap_s * 1e3,
                        **summary(times),
                        "idle_entries": {k: after_idle[k] - before_idle.get(k, 0) for k in after_idle},
                        "steal_ticks": steal_ticks() - before_steal,
                    }
                    print(json.dumps(row), flush=True)
                    out["rows"].append(row)
    args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
