"""How much of a CUDA-event "device" time is the host submitting the call, and how much that part moves
from one process to the next (issue 30: a 0.75 ms device-bound cell read 0.745-0.789 ms by process).

Per fresh (spawned) process and cell, three p50s over the same calls: events around the call as the
workflow and benchmarks/tools/independent_loop.py time it (`plain`); the same with the stream first kept busy
by a sleeping kernel, so the start event fires only once the host has queued the call (`hidden`: the
device's own span); and the host's time to issue the call (`issue`, perf_counter until run returns).
plain - hidden is the host's submission inside the window.

    python experiments/launch_in_window/launch_in_window.py --out launch_in_window.json [--processes 6]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from pathlib import Path

import numpy as np
import torch

# the cells and warm-up of the independent loop (benchmarks/tools/independent_loop.py), a user's tool
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "tools"))
from independent_loop import CELLS, WARMUP_S

CALLS = 300
SLEEP_CYCLES = 1_000_000  # ~0.5 ms at 1.98 GHz: longer than issuing any of these calls


def one_process(cell: tuple) -> dict[str, float]:
    torch.backends.cudnn.benchmark = True
    build, compile_ = CELLS[cell]
    model, inputs = build()
    call = compile_(model, inputs)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    began, i = time.perf_counter(), 0
    while time.perf_counter() - began < WARMUP_S:
        call(i)
        torch.cuda.synchronize()
        i += 1
    plain, hidden, issue = [], [], []
    for i in range(CALLS):
        for busy in (False, True):  # alternating, so both see the same host
            if busy:
                torch.cuda._sleep(SLEEP_CYCLES)
            t0 = time.perf_counter()
            start.record()
            call(i)
            t1 = time.perf_counter()
            stop.record()
            stop.synchronize()
            (hidden if busy else plain).append(start.elapsed_time(stop))
            if not busy:
                issue.append((t1 - t0) * 1e3)
    return {name: float(np.median(v)) for name, v in (("plain", plain), ("hidden", hidden), ("issue", issue))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--processes", type=int, default=6)
    args = parser.parse_args()
    spawn = multiprocessing.get_context("spawn")
    cells = [c for c in CELLS if c[1] == "torch_cudagraph"]
    rows = []
    for _ in range(args.processes):
        for cell in cells:
            with spawn.Pool(1) as pool:
                row = {"cell": "/".join(map(str, cell)), **pool.apply(one_process, (cell,))}
            print(json.dumps(row), flush=True)
            rows.append(row)
    args.out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
