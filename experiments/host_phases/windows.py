"""One-off probe for issue 68: does a µs-scale call's time move with the process or with the moment? One
process times a small numpy MLP (three matmuls, ~8 µs) in consecutive windows and prints each window's p50
in µs. Run it in several fresh processes, pinned to one core:

    for i in $(seq 8); do taskset -c 1 python experiments/host_phases/windows.py --windows 20; done
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--windows", type=int, default=20)
    parser.add_argument("--window-s", type=float, default=0.1)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    weights = [rng.standard_normal(shape).astype(np.float32) for shape in ((30, 64), (64, 64), (64, 2))]
    rows = rng.standard_normal((2, 30)).astype(np.float32)

    def call() -> np.ndarray:
        hidden = rows
        for weight in weights:
            hidden = np.maximum(hidden @ weight, 0)
        return hidden

    for _ in range(2000):  # warm-up
        call()
    p50s = []
    for _ in range(args.windows):
        times, end = [], time.perf_counter() + args.window_s
        while time.perf_counter() < end:
            start = time.perf_counter_ns()
            call()
            times.append(time.perf_counter_ns() - start)
        p50s.append(np.median(times) / 1e3)
    print(os.getpid(), " ".join(f"{p50:.2f}" for p50 in p50s))


if __name__ == "__main__":
    main()
