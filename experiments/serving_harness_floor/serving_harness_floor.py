"""The serving harness alone: the no-op engine through inferbench's serving path (LoadGen's server
scenario, the dynamic batcher, the gather from the sample library, LoadGen's completion callback) at
fixed target QPS, with nothing to compute. Its p50/p99 are what the harness adds to every query of a
serving cell (issue 31: below 0.5 ms at 2,000 QPS on the H100 VM).

    python experiments/serving_harness_floor/serving_harness_floor.py --qps 500 1000 2000 4000 [--max-batch 1]
        [--device cuda] [--overlapped] [--wait spin] [--out floor.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
from pathlib import Path

import numpy as np

from inferbench.scenarios.serving.measure import engine_path, harness_baseline, measure_serving
from inferbench.scenarios.serving.settings import ServingSettings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--qps", type=float, nargs="+", default=[500, 1000, 2000, 4000])
    parser.add_argument("--max-batch", type=int, default=1)
    parser.add_argument("--queries", type=int, default=4000, help="per run: 40 beyond the p99")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="cuda: page-locked buffers")
    parser.add_argument(
        "--overlapped",
        action="store_true",
        help="stage each batch on the worker (a CUDA stream of its own) and run it on a second thread, as GPU "
        "cells of eager, TorchScript and CUDA-graph engines do (serving.overlap_copies)",
    )
    parser.add_argument("--wait", choices=["block", "spin"], default="block", help="serving.batcher_wait")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    library = {"x": np.random.default_rng(0).standard_normal((256, 64)).astype(np.float32)}

    # the path a serving cell's batches take (inferbench.scenarios.serving.engine_path), through the
    # no-op engine: what every serving record's harness floor measures
    harness = harness_baseline(args.device, (), {})
    no_op = engine_path(lambda size: harness, library, args.device, args.overlapped)

    rows = []
    for qps in args.qps:
        settings = ServingSettings(
            latency_bound_ms=10, min_duration_s=1, min_query_count=args.queries, target_qps=qps, batcher_wait=args.wait
        )
        with tempfile.TemporaryDirectory() as logs:
            served = measure_serving("server", no_op, args.max_batch, 256, settings, Path(logs) / "floor")
        answer = served["result"]
        row = {"target_qps": qps, "completed_qps": answer["completed_qps"], "queries": answer["query_count"],
               **{k: answer["latency_ms"].get(k) for k in ("p50", "p99", "p99.9", "max")},
               "mean_batch": served["batches"]["mean_size"], "device": args.device,
               "overlapped": args.overlapped, "wait": args.wait}  # fmt: skip
        print(json.dumps(row), flush=True)
        rows.append(row)
    if args.out:
        args.out.write_text(json.dumps({"host": platform.node(), "cpus": os.cpu_count(), "runs": rows}))


if __name__ == "__main__":
    main()
