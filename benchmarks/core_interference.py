"""What slows a launch-bound GPU loop on its own core (issue 36; a probe, not a test).

    python benchmarks/core_interference.py [--cpu 28] [--seconds 3] > interference.json   # after the README install

A host-bound GPU cell (eager PyTorch at batch 1: the GPU waits for the thread launching its kernels)
measured on its GPU's slot ran 10-19% slower in a gpu=2 run than in a gpu=1 run on the same 2 x H200
machine, including cells whose measurement overlapped no other measurement. This times such a loop
(a 3-layer MLP, batch 1, eager, synchronised each call) pinned to one core, alone and beside a busy
loop: on its SMT sibling (another hardware thread of the same physical core), on another core of the
slot, on a core of the shared pool, on eight shared cores, and beside the same launch-bound loop on the
second GPU (as a gpu=2 run measures). Prints the CPU topology the kernel reports and, per condition, the
loop's median call (µs) and its ratio to alone.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import time
from pathlib import Path

from inferbench.launch.host_partition import parse_cpulist


def topology() -> dict[str, object]:
    """Each CPU's SMT siblings and package, as /sys reports them."""
    cpus = sorted(int(p.name[3:]) for p in Path("/sys/devices/system/cpu").glob("cpu[0-9]*"))
    siblings, packages = {}, {}
    for cpu in cpus:
        base = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        siblings[cpu] = (base / "thread_siblings_list").read_text().strip()
        packages[cpu] = (base / "physical_package_id").read_text().strip()
    nodes = {p.name: (p / "cpulist").read_text().strip() for p in Path("/sys/devices/system/node").glob("node[0-9]*")}
    return {"siblings": siblings, "packages": packages, "numa_nodes": nodes}


def spin(cpu: int, stop: mp.Event, ready: mp.Event) -> None:
    os.sched_setaffinity(0, {cpu})
    ready.set()
    x = 0
    while not stop.is_set():
        for _ in range(10_000):
            x += 1


def launch_loop(
    cpu: int, device: int, seconds: float, stop: mp.Event | None = None, ready: mp.Event | None = None
) -> float:
    """The median time (µs) of one synchronised call of a small eager MLP at batch 1 on ``device``."""
    import torch

    os.sched_setaffinity(0, {cpu})
    torch.set_num_threads(1)
    model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(3)]).to(f"cuda:{device}")
    x = torch.randn(1, 256, device=f"cuda:{device}")
    times = []
    with torch.inference_mode():
        for _ in range(200):
            model(x).cpu()
        if ready is not None:
            ready.set()  # warm: the loop runs from here
        end = time.perf_counter() + seconds
        while time.perf_counter() < end and (stop is None or not stop.is_set()):
            start = time.perf_counter()
            model(x).cpu()
            times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2] * 1e6


def _second_gpu(cpu: int, stop: mp.Event, ready: mp.Event) -> None:
    launch_loop(cpu, 1, 3600, stop, ready)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cpu", type=int, default=os.cpu_count() - 4, help="the measuring core (a slot's first)")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=2, help="every condition this many times, in turn")
    args = parser.parse_args()
    topo = topology()
    cpu = args.cpu
    allowed = os.sched_getaffinity(0)
    if not {cpu, cpu + 3, cpu - 4} <= allowed:
        parser.error(f"--cpu {cpu}: this probe needs cores {cpu - 4} to {cpu + 3}, of {sorted(allowed)}")
    sibling = sorted(parse_cpulist(topo["siblings"][cpu]) - {cpu})
    slot = list(range(cpu, cpu + 4))
    other_slot = [c - 4 for c in slot]
    shared = [c for c in sorted(allowed) if c not in slot + other_slot and c not in sibling]
    conditions: dict[str, tuple[list[int], object]] = {
        "alone": ([], spin),
        "spin on its SMT sibling": (sibling[:1], spin),
        "spin on another core of the slot": ([slot[1]] if slot[1] not in sibling else [slot[2]], spin),
        "spin on one shared core": (shared[:1], spin),
        "spin on eight shared cores": (shared[:8], spin),
        "launch loop on GPU 1 from the other slot": (other_slot[:1], _second_gpu),
        "launch loops on GPU 1 from two cores": (other_slot[:2], _second_gpu),
        "alone, again": ([], spin),  # the drift over the probe
    }
    ctx = mp.get_context("spawn")
    results: dict[str, dict[str, object] | None] = {}
    for _ in range(args.rounds):
        for name, (cores, target) in conditions.items():
            if name == "spin on its SMT sibling" and not sibling:
                results[name] = None
                continue
            stop = ctx.Event()
            readies = [ctx.Event() for _ in cores]
            workers = [
                ctx.Process(target=target, args=(c, stop, r), daemon=True) for c, r in zip(cores, readies, strict=True)
            ]
            for w in workers:
                w.start()
            # every busy loop running (the second GPU's warm) before the timing starts; one that never
            # started (no second GPU, a core outside this process's set) leaves the condition unmeasured
            running = all(ready.wait(timeout=120) for ready in readies)
            entry = results.setdefault(name, {"cores": cores, "p50_us": []})
            entry["p50_us"].append(launch_loop(cpu, 0, args.seconds) if running else None)
            stop.set()
            for w in workers:
                w.join(timeout=10)
    alone = min(results["alone"]["p50_us"])
    for value in results.values():
        if value:
            value["ratio"] = [None if t is None else t / alone for t in value["p50_us"]]
    print(json.dumps({"cpu": cpu, "sibling": sibling, "topology": topo, "conditions": results}, indent=1))


if __name__ == "__main__":
    main()
