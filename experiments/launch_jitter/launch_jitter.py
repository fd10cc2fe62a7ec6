"""Why do launch-bound GPU cells disagree between fresh processes? (issue 5)

A launch-bound cell (BERT-base eager fp32 at batch 1 on the GPU) spends its time in the host thread
that launches kernels, so its p50 depends on the CPU that thread runs on. This measures, in ONE process,
the p50 with the launching thread pinned to each allowed CPU in turn (and unpinned before and after),
then the same p50 in several fresh processes, unpinned and pinned to one CPU. If the per-CPU p50s differ
as much as the fresh processes do, which CPU a process lands on explains the spread, and pinning the
measuring process (`measure.cpu_affinity`) is the fix.

    python experiments/launch_jitter/launch_jitter.py [--workload bert_base] [--calls 300] [--fresh 3] [--pin-cpu 2]

Needs a GPU. Prints a table; times are host-clock milliseconds per synchronised call.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import torch

from inferbench.models.registry import create_model, make_inputs


def build(workload: str, batch: int, seq: int) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    spec = create_model(workload)
    module = spec.module.to("cuda").eval()
    inputs = {k: torch.from_numpy(v).to("cuda") for k, v in make_inputs(spec.inputs, batch, seq, seed=0).items()}
    return module, inputs


@torch.inference_mode()
def p50_ms(module: torch.nn.Module, inputs: dict[str, torch.Tensor], calls: int) -> float:
    for _ in range(20):  # warm-up on this CPU
        module(**inputs)
    torch.cuda.synchronize()
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        module(**inputs)
        torch.cuda.synchronize()
        samples.append(time.perf_counter() - start)
    return float(np.median(samples) * 1e3)


def child(args: argparse.Namespace) -> None:
    if args.child_pin is not None:
        os.sched_setaffinity(0, {args.child_pin})
    module, inputs = build(args.workload, args.batch, args.seq)
    print(json.dumps({"cpu": os.sched_getaffinity(0).__len__(), "p50_ms": p50_ms(module, inputs, args.calls)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="bert_base")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--fresh", type=int, default=3, help="fresh processes per setting")
    parser.add_argument("--pin-cpu", type=int, default=2)
    parser.add_argument("--child-pin", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return

    allowed = sorted(os.sched_getaffinity(0))
    module, inputs = build(args.workload, args.batch, args.seq)
    print(f"{args.workload} b{args.batch} s{args.seq} eager fp32 on {torch.cuda.get_device_name()}, {args.calls} calls")
    print(f"one process, unpinned: {p50_ms(module, inputs, args.calls):.3f} ms")
    per_cpu = {}
    for cpu in allowed:
        os.sched_setaffinity(0, {cpu})  # this thread only: the launching thread
        per_cpu[cpu] = p50_ms(module, inputs, args.calls)
    os.sched_setaffinity(0, set(allowed))
    print("one process, launching thread pinned to each CPU (p50 ms):")
    print("  " + ", ".join(f"cpu{c} {v:.3f}" for c, v in per_cpu.items()))
    values = np.array(list(per_cpu.values()))
    print(f"  spread over CPUs: min {values.min():.3f}, max {values.max():.3f}, "
          f"(max-min)/median {100 * (values.max() - values.min()) / np.median(values):.1f}%")  # fmt: skip
    print(f"one process, unpinned again: {p50_ms(module, inputs, args.calls):.3f} ms")
    del module, inputs
    torch.cuda.empty_cache()

    for label, pin in (("unpinned", None), (f"pinned to cpu{args.pin_cpu}", args.pin_cpu)):
        results = []
        for _ in range(args.fresh):
            command = [sys.executable, __file__, "--child", "--workload", args.workload, "--batch", str(args.batch),
                       "--seq", str(args.seq), "--calls", str(args.calls)]  # fmt: skip
            if pin is not None:
                command += ["--child-pin", str(pin)]
            out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
            results.append(json.loads(out.strip().splitlines()[-1])["p50_ms"])
        spread = 100 * (max(results) - min(results)) / float(np.median(results))
        print(f"{args.fresh} fresh processes, {label}: " + ", ".join(f"{r:.3f}" for r in results)
              + f" ms; spread {spread:.1f}%")  # fmt: skip


if __name__ == "__main__":
    main()
