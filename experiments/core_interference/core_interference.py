"""What slows a launch-bound GPU loop on its own core (issue 36; a probe, not a test).

    python experiments/core_interference/core_interference.py [--cpu 28] [--seconds 3] [--rounds 3] > interference.json

A host-bound GPU cell (eager PyTorch at batch 1: the GPU waits for the thread launching its kernels)
measured on its GPU's slot ran 10-19% slower in a gpu=2 run than in a gpu=1 run on the same 2 x H200
machine, including cells whose measurement overlapped no other measurement, only the other GPU's
set-up. This times such a loop (a 3-layer MLP, batch 1, eager, synchronised each call) pinned to one
core, alone and beside each kind of work a gpu=2 run does meanwhile, in turn, every round: plain CPU
work and memory copies on the shared cores, the same launch-bound loop on the second GPU (a measurement
beside), and the second GPU's set-up, repeated: CUDA contexts made and torn down (a job's start),
torch.compile (Inductor's compile workers), host-to-device copies (loading weights), ``nvidia-smi``.
Beside each condition, before the launch loop, a pure-Python loop on the same core times the core
itself (its clock: a frequency drop shows there, a driver or PCIe effect does not).
Each condition is paired with the loop alone just before and just after it (the VM's own speed moves
by tens of percent within a minute: a lent 2 x H200 VM's pure-Python loop took 64-139 ms over three
minutes). Prints, per condition and round, the launch loop's median call (µs) beside, just before and
just after (alone), the core's own loop (ms, timed beside the condition, before the launch loop), and
``paired_ratio``: beside / the mean of before and after. (Lease 4's VM 4 ran the version of 718bf8e:
paired with the loop just before only.)
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path


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


# --- the work beside: each runs on ``cores`` until ``stop``, setting ``ready`` once it is running ---


def spin(cores: list[int], stop: mp.Event, ready: mp.Event) -> None:
    os.sched_setaffinity(0, set(cores))
    ready.set()
    x = 0
    while not stop.is_set():
        for _ in range(10_000):
            x += 1


def memory_copies(cores: list[int], stop: mp.Event, ready: mp.Event) -> None:
    import numpy as np

    os.sched_setaffinity(0, set(cores))
    source, target = np.ones(2**26), np.empty(2**26)  # 512 MB each: far past any cache
    ready.set()
    while not stop.is_set():
        np.copyto(target, source)


def second_gpu_launch_loop(cores: list[int], stop: mp.Event, ready: mp.Event) -> None:
    launch_loop(cores[0], 1, 3600, stop, ready)


def _cuda_start_on_gpu1() -> None:
    """What a job's process does first on its GPU: a context, memory, cuBLAS loaded; then it exits."""
    os.environ["CUDA_VISIBLE_DEVICES"] = "1"
    import torch

    a = torch.randn(2048, 2048, device="cuda")
    buffer = torch.empty(2**28, device="cuda")  # 1 GiB
    (a @ a).sum().item()
    del buffer


def cuda_setups(cores: list[int], stop: mp.Event, ready: mp.Event) -> None:
    import torch  # noqa: F401  (imported once; each forked child makes a context of its own)

    os.sched_setaffinity(0, set(cores))
    fork = mp.get_context("fork")
    while not stop.is_set():
        child = fork.Process(target=_cuda_start_on_gpu1)
        child.start()
        child.join()
        ready.set()


def compiles(cores: list[int], stop: mp.Event, ready: mp.Event) -> None:
    os.environ["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"  # every compile from scratch, as a fresh process's
    os.sched_setaffinity(0, set(cores))
    import torch

    model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(6)]).to("cuda:1")
    x = torch.randn(8, 512, device="cuda:1")
    while not stop.is_set():
        torch._dynamo.reset()
        torch.compile(model)(x).sum().item()
        ready.set()


def host_to_gpu_copies(cores: list[int], stop: mp.Event, ready: mp.Event) -> None:
    os.sched_setaffinity(0, set(cores))
    import torch

    weights = torch.randn(2**26)  # 256 MB, pageable, as a loaded checkpoint's
    while not stop.is_set():
        weights.to("cuda:1")
        torch.cuda.synchronize(1)
        ready.set()


def nvidia_smi(cores: list[int], stop: mp.Event, ready: mp.Event) -> None:
    os.sched_setaffinity(0, set(cores))
    while not stop.is_set():
        subprocess.run(["nvidia-smi", "--query-gpu=index,pci.bus_id", "--format=csv,noheader"], capture_output=True)
        ready.set()


# --- what is timed ---


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


def cpu_loop_ms(cpu: int, iterations: int = 2_000_000) -> float:
    """The best of three runs of a pure-Python loop on ``cpu`` (ms): the core's own speed."""
    os.sched_setaffinity(0, {cpu})
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        x = 0
        for i in range(iterations):
            x += i
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def on_core(allowed: list[int], timed: Callable[..., float], *args: object) -> float:
    """``timed(*args)`` (which pins this process to its core), then this process back on ``allowed``: the
    workers it starts next must not begin on the measuring core."""
    try:
        return timed(*args)
    finally:
        os.sched_setaffinity(0, allowed)


def beside(
    ctx: mp.context.BaseContext,
    core_sets: list[list[int]],
    target: Callable[[list[int], mp.Event, mp.Event], None] | None,
    cpu: int,
    seconds: float,
    allowed: list[int],
) -> tuple[float | None, float | None]:
    """The launch loop's median call (µs) and the core's own loop (ms) with ``target`` running on each of
    ``core_sets``; (None, None) where a worker never got going. The workers are stopped and gone before
    this returns, whatever happens."""
    stop = ctx.Event()
    readies = [ctx.Event() for _ in core_sets]
    # not daemons: a daemon may not start processes (the CUDA contexts' children, Inductor's workers)
    workers = [ctx.Process(target=target, args=(c, stop, r)) for c, r in zip(core_sets, readies, strict=True)]
    try:
        for w in workers:
            w.start()
        # every worker running (a compile done, the second GPU's loop warm) before the timing starts;
        # one that died or never got going leaves the condition unmeasured this round
        deadline = time.monotonic() + 180
        while not all(r.is_set() for r in readies) and all(w.is_alive() for w in workers):
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if not all(r.is_set() for r in readies):
            return None, None
        return on_core(allowed, cpu_loop_ms, cpu), on_core(allowed, launch_loop, cpu, 0, seconds)
    finally:
        stop.set()
        for w in workers:
            w.join(timeout=30)
            if w.is_alive():
                w.kill()
                w.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cpu", type=int, default=os.cpu_count() - 4, help="the measuring core (a slot's first)")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3, help="every condition this many times, in turn")
    args = parser.parse_args()
    cpu = args.cpu
    allowed = sorted(os.sched_getaffinity(0))
    slot, other_slot = list(range(cpu, cpu + 4)), list(range(cpu - 4, cpu))
    shared = [c for c in allowed if c not in slot + other_slot]
    if not set(slot + other_slot) <= set(allowed) or len(shared) < 8:
        parser.error(f"--cpu {cpu}: this probe needs cores {cpu - 4} to {cpu + 3} and 8 more, of {allowed}")
    # each condition: the core sets of its workers and what each runs
    Work = Callable[[list[int], mp.Event, mp.Event], None]
    conditions: dict[str, tuple[list[list[int]], Work | None]] = {
        "alone": ([], None),
        "spin on eight shared cores": ([[c] for c in shared[:8]], spin),
        "memory copies on eight shared cores": ([[c] for c in shared[:8]], memory_copies),
        "launch loop on GPU 1 from the other slot": ([other_slot[:1]], second_gpu_launch_loop),
        "CUDA contexts made on GPU 1, repeated": ([shared[:8]], cuda_setups),
        "torch.compile on GPU 1, repeated": ([shared], compiles),
        "host-to-GPU 1 copies": ([shared[:1]], host_to_gpu_copies),
        "nvidia-smi, repeated": ([shared[:1]], nvidia_smi),
    }
    ctx = mp.get_context("spawn")
    results: dict[str, dict[str, object]] = {}
    for _ in range(args.rounds):
        for name, (core_sets, target) in conditions.items():
            entry = results.setdefault(
                name,
                {
                    "cores": core_sets,
                    "launch_p50_us": [],
                    "cpu_loop_ms": [],
                    "alone_before_us": [],
                    "alone_after_us": [],
                },
            )
            # the pair's halves around the condition: nothing beside
            entry["alone_before_us"].append(on_core(allowed, launch_loop, cpu, 0, args.seconds))
            launch_us, cpu_ms = beside(ctx, core_sets, target, cpu, args.seconds, allowed)
            entry["cpu_loop_ms"].append(cpu_ms)
            entry["launch_p50_us"].append(launch_us)
            entry["alone_after_us"].append(on_core(allowed, launch_loop, cpu, 0, args.seconds))
    alone = {k: statistics.median(results["alone"][k]) for k in ("launch_p50_us", "cpu_loop_ms")}
    for entry in results.values():
        entry["paired_ratio"] = [
            None if t is None else round(2 * t / (a + z), 4)
            for t, a, z in zip(entry["launch_p50_us"], entry["alone_before_us"], entry["alone_after_us"], strict=True)
        ]
        for key, base in alone.items():
            entry[key.replace("_us", "").replace("_ms", "") + "_ratio"] = [
                None if t is None else round(t / base, 4) for t in entry[key]
            ]
    print(json.dumps({"cpu": cpu, "topology": topology(), "conditions": results}, indent=1))


if __name__ == "__main__":
    main()
