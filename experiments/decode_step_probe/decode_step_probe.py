"""Where a compiled decode step's time goes (not a test): issue 33's goal is a TinyLlama-shaped step within
1.5x of its memory-bandwidth floor.

    python -m inferbench build-model --workload llm:llama --arch '{}' --out ckpt.pt --meta ckpt.json
    python experiments/decode_step_probe/decode_step_probe.py --checkpoint ckpt.pt --meta ckpt.json --out decode.json

For each torch.compile mode of the ``hf_generate_static`` engine (the workflow's, prepared as a cell
prepares it): requests timed as the generation scenario times them (TPOT between CUDA events), the host's
own time to issue a step (no waiting), and one request under the profiler: per decode step, how many
kernels ran and how long they ran in total (the GPU's busy time), by kind. A step's TPOT above its
kernels' sum is the GPU waiting between kernels or for the host; kernels' sum above the floor is the
kernels themselves (small GEMVs that cannot reach the memory's bandwidth, and their count).
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from pathlib import Path

import numpy as np

from inferbench.core.fsutil import read_json
from inferbench.engines.registry import load_engine_class
from inferbench.models.registry import input_specs, make_inputs
from inferbench.scenarios.generation.measure import decode_roofline, generate_request
from inferbench.trackers.roofline import copy_bandwidth

#: substrings of a kernel's name -> its kind (the first that matches)
KINDS = (
    ("gemm", ("gemm", "gemv", "cutlass", "cublas", "sm90_", "splitk", "mm_")),
    ("attention", ("flash", "fmha", "attention", "sdpa", "efficient")),
    ("copy", ("memcpy", "memset", "copy")),
    ("inductor", ("triton",)),
)


def kind_of(name: str) -> str:
    lowered = name.lower()
    return next((kind for kind, marks in KINDS if any(m in lowered for m in marks)), "other")


def synchronize(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def profiled_steps(engine, batch: dict, device: str) -> dict:
    """The decode steps of one request under the profiler (its prefill run before): per step, the kernels
    that ran, their summed time (the GPU busy), the span from the first kernel's start to the last one's end
    (busy + idle gaps), by kind, and the kernels that took longest."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    request = engine.start(engine.stage(batch))
    synchronize(device)
    steps = engine.new_tokens - 1
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            request = engine.step(request)
        synchronize(device)
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    if not kernels:
        return {"kernels_seen": 0}
    span_us = max(k.time_range.end for k in kernels) - min(k.time_range.start for k in kernels)
    by_kind: dict[str, float] = {}
    by_name: dict[str, list[float]] = {}
    for k in kernels:
        by_kind[kind_of(k.name)] = by_kind.get(kind_of(k.name), 0.0) + k.time_range.elapsed_us()
        by_name.setdefault(k.name[:100], []).append(k.time_range.elapsed_us())
    longest = sorted(by_name.items(), key=lambda item: -sum(item[1]))[:15]
    return {
        "steps_profiled": steps,
        "kernels_per_step": len(kernels) / steps,
        "kernel_busy_ms_per_step": sum(k.time_range.elapsed_us() for k in kernels) / steps / 1e3,
        "span_ms_per_step": span_us / steps / 1e3,
        "busy_ms_per_step_by_kind": {k: v / steps / 1e3 for k, v in sorted(by_kind.items())},
        "longest_kernels": [
            {"name": name, "per_step": len(us) / steps, "mean_us": float(np.mean(us))} for name, us in longest
        ],
    }


def probe(mode: str, args: argparse.Namespace, batch: dict, specs) -> dict:
    import torch

    # Dynamo keeps what it compiled per code object, and every engine's decode step is the same method: without
    # a reset a later mode (or Inductor setting) reuses the earlier one's graph (a 0.3-s "compile")
    torch._dynamo.reset()
    engine = load_engine_class("hf_generate_static")(
        args.device, args.precision, 0, {"engine": "hf_generate_static", "mode": mode, "new_tokens": args.new_tokens}
    )
    start = time.perf_counter()
    engine.prepare(args.checkpoint, specs, batch)
    prepare_s = time.perf_counter() - start
    stream = engine.stream() if args.device == "cuda" else None
    for _ in range(3):
        generate_request(engine, batch, stream)
    tpot, ttft = [], []
    for _ in range(args.requests):
        first, steps, _, _, _ = generate_request(engine, batch, stream)
        ttft.append(first)
        tpot.extend(steps)
    # the host's own cost of issuing a step, with the GPU left to catch up (no event, no wait)
    request = engine.start(engine.stage(batch))
    synchronize(args.device)
    issue = []
    for _ in range(engine.new_tokens - 1):
        t = time.perf_counter()
        request = engine.step(request)
        issue.append(time.perf_counter() - t)
    synchronize(args.device)
    bandwidth = copy_bandwidth(args.device)
    tpot_ms = float(np.median(tpot) * 1e3)
    row = {
        "mode": mode,
        "prepare_s": prepare_s,
        "cold_start_s": engine.cold_start_s,
        "ttft_p50_ms": float(np.median(ttft) * 1e3),
        "tpot_p50_ms": tpot_ms,
        "tpot_p99_ms": float(np.percentile(tpot, 99) * 1e3),
        "host_issue_ms_per_step_p50": float(np.median(issue) * 1e3),
        **decode_roofline(engine.decode_read_bytes(), bandwidth, tpot_ms),
        "profile": profiled_steps(engine, batch, args.device),
    }
    del engine, request
    gc.collect()
    if args.device == "cuda":
        torch.cuda.empty_cache()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--meta", type=Path, required=True)
    parser.add_argument("--device", default="cuda", help="cpu: a smoke run of the probe itself")
    parser.add_argument("--precision", default="fp16")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--modes", nargs="+", default=["reduce-overhead", "max-autotune"])
    parser.add_argument(
        "--coordinate-descent", action="store_true", help="Inductor's coordinate-descent tuning for the last mode"
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    specs = input_specs(read_json(args.meta))
    batch = make_inputs(specs, args.batch, args.seq, 0)
    rows = []
    for number, mode in enumerate(args.modes):
        if args.coordinate_descent and number == len(args.modes) - 1:
            import torch._inductor.config as inductor_config

            inductor_config.coordinate_descent_tuning = True
            mode_name = f"{mode}+coordinate_descent"
        else:
            mode_name = mode
        row = probe(mode, args, batch, specs) | {"mode": mode_name}
        print(json.dumps({k: v for k, v in row.items() if k != "profile"}), flush=True)
        print(json.dumps(row["profile"]), flush=True)
        rows.append(row)
        args.out.write_text(json.dumps({"batch": args.batch, "prompt": args.seq, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
