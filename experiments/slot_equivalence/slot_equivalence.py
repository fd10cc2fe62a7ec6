"""Do a 2-GPU machine's slots time the same launch-bound loop alike? (issue 36; a probe, not a test)

    python experiments/slot_equivalence/slot_equivalence.py [--rounds 8] [--seconds 3] > slots.json

In lease 5 (2026-11-27, 2 x H200) the host-bound GPU cells that a gpu=2 run put on the second slot
(GPU 1, cores 24-27) read 0.97x their gpu=1 figure (slot 0: GPU 0, cores 28-31) where those that stayed on
slot 0 read 0.81x; lease 3 showed the same order (1.10x against 1.05x). A cell's slot is whichever was
free, so if the slots differ, a gpu=2 run is not like with like against a gpu=1 run. This times the
launch-bound loop of core_interference.py (a 3-layer MLP at batch 1, eager, synchronised each call) on
each GPU from each slot's first core, nothing else running, in turn every round (the VM's speed moves
within a minute: only pairs from one round compare), with the core's own pure-Python loop beside. Prints
per round and (GPU, core) the loop's median call (µs) and the core loop (ms), then per combination the
median over rounds of its ratio to slot 0 (GPU 0, core 28) of the same round: a GPU effect shows in both
cores' rows for GPU 1, a core effect in both GPUs' rows for core 24.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

# the loops of the core-interference probe, its sibling folder
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core_interference"))
from core_interference import cpu_loop_ms, launch_loop, on_core, topology


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument(
        "--cores",
        type=int,
        nargs=2,
        default=[os.cpu_count() - 4, os.cpu_count() - 8],
        help="slot 0's and slot 1's first cores (the host partition's layout: last slots first)",
    )
    args = parser.parse_args()
    allowed = sorted(os.sched_getaffinity(0) - set(args.cores))
    combos = [(gpu, core) for gpu in (0, 1) for core in args.cores]
    rounds = []
    for r in range(args.rounds):
        # each round in another order, so that no combination always follows the same one
        order = combos[r % len(combos) :] + combos[: r % len(combos)]
        row = {}
        for gpu, core in order:
            core_ms = on_core(allowed, cpu_loop_ms, core)
            loop_us = on_core(allowed, launch_loop, core, gpu, args.seconds)
            row[f"gpu{gpu}-core{core}"] = {"loop_us": loop_us, "core_loop_ms": core_ms}
        rounds.append(row)
        medians = {k: round(v["loop_us"], 1) for k, v in row.items()}
        print(json.dumps({"round": r, **medians}), file=sys.stderr, flush=True)
    base = f"gpu0-core{args.cores[0]}"
    ratios = {
        k: {
            "loop_ratio_median": statistics.median(row[k]["loop_us"] / row[base]["loop_us"] for row in rounds),
            "loop_ratios": [round(row[k]["loop_us"] / row[base]["loop_us"], 3) for row in rounds],
            "core_loop_ratio_median": statistics.median(
                row[k]["core_loop_ms"] / row[base]["core_loop_ms"] for row in rounds
            ),
        }
        for k in rounds[0]
    }
    try:
        topo = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True).stdout
    except OSError as error:  # the rounds are measured: print them whatever the topology's fate
        topo = f"nvidia-smi topo -m failed: {error}"
    print(
        json.dumps(
            {"baseline": base, "ratios": ratios, "rounds": rounds, "topology": topology(), "nvidia_smi_topo": topo},
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
