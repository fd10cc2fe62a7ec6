"""Why a serving cell's queries can be slower than its back-to-back calls (not a test).

    python experiments/idle_latency/idle_latency.py --workload bert_base --engine ort_cuda --precision fp16 --batch 8 \
        --seq 128 --artifact results/onnx/bert_base.fp16.onnx --out idle.json

Times one end-to-end call (host arrays in, host array out, as the serving batcher runs it) of an engine
back to back, and again with an idle gap before each call, as sparse queries arrive in a server run;
with the engine's host thread count at its default (0) and at 1 (ONNX Runtime: no intra-op pool whose
threads sleep between calls), and records the GPU's SM clock (NVML) just before each call.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from inferbench.core.fsutil import read_json
from inferbench.engines.registry import load_engine_class
from inferbench.models.registry import input_specs, make_inputs


def sm_clock() -> float | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        return float(pynvml.nvmlDeviceGetClockInfo(pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.NVML_CLOCK_SM))
    except Exception:  # no NVIDIA driver here
        return None


def timed_calls(engine, batch: dict, calls: int, gap_s: float) -> dict:
    times, clocks = [], []
    for _ in range(calls):
        if gap_s:
            time.sleep(gap_s)
        clocks.append(sm_clock())
        start = time.perf_counter()
        engine.to_numpy(engine.run(engine.stage(batch)))
        times.append((time.perf_counter() - start) * 1e3)
    known = [c for c in clocks if c is not None]
    return {
        "gap_ms": gap_s * 1e3,
        "p50_ms": float(np.percentile(times, 50)),
        "p99_ms": float(np.percentile(times, 99)),
        "max_ms": float(max(times)),
        "sm_clock_mhz_mean": float(np.mean(known)) if known else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", required=True)
    parser.add_argument("--engine", required=True, help="an engine implementation (e.g. ort_cuda)")
    parser.add_argument("--precision", default="fp16")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--artifact", type=Path, required=True)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    specs = input_specs(read_json(Path("results/models") / f"{args.workload}.json"))
    batch = make_inputs(specs, args.batch, args.seq, 0)
    rows = []
    for threads in (0, 1):
        engine = load_engine_class(args.engine)(args.device, args.precision, threads, {"engine": args.engine})
        engine.prepare(args.artifact, specs, batch)
        timed_calls(engine, batch, 20, 0.0)  # warm-up
        for gap_s in (0.0, 0.002, 0.02):
            row = {"threads": threads, **timed_calls(engine, batch, args.calls, gap_s)}
            print(json.dumps(row))
            rows.append(row)
    args.out.write_text(
        json.dumps({"cell": vars(args) | {"artifact": str(args.artifact), "out": None}, "rows": rows}, indent=1)
    )


if __name__ == "__main__":
    main()
