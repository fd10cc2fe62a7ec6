"""How long aggregation and the report take for a large grid (not a test): writes N synthetic cell
records (realistic fields, random latencies) into a temporary folder, then times the `aggregate`
step (records -> summary.csv + parquet) and the report's build (decisions included).

    python benchmarks/aggregate_scale.py [--cells 2000]
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
import time
from pathlib import Path

import numpy as np

from inferbench.analysis.summary import write_summary
from inferbench.cells import CellKey, CellRecord
from inferbench.measure.stats import latency_stats
from inferbench.report.markdown import build_report

WORKLOADS = ["mlp_lendingclub", "mlp_heart", "resnet50", "vit_b16", "bert_base", "distilbert"]
ENGINES = ["torch_eager", "ort_cpu", "torchscript", "torch_compile", "ort_cuda", "torch_cudagraph"]


def synthetic_records(folder: Path, n: int, seed: int = 0) -> list[Path]:
    rng = np.random.default_rng(seed)
    keys = itertools.product(WORKLOADS, ENGINES, ["fp32", "fp16"], ["cpu", "cuda"], [1, 4, 16, 64, 256], [0, 128, 512])
    paths = []
    for workload, engine, precision, device, batch, seq in itertools.islice(keys, n):
        key = CellKey(workload, engine, precision, device, batch, seq, 2 if device == "cpu" else 0)
        stats = latency_stats(rng.gamma(9.0, 0.001 * batch, 200), batch)
        record = CellRecord(
            key=key,
            status="ok",
            engine_impl=engine,
            timing="device",
            latency_ms=stats["latency_ms"],
            latency_ci95_ms=stats["latency_ci95_ms"],
            cv=stats["cv"],
            throughput_per_s=stats["throughput_per_s"],
            n_iters=stats["n_iters"],
            end_to_end={"latency_ms": stats["latency_ms"], "n_iters": stats["n_iters"]},
            cold_start_s={"prepare": float(rng.uniform(1, 30)), "first_call": 0.1},
        )
        path = folder / key.relpath
        record.save(path)
        paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cells", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        start = time.perf_counter()
        paths = synthetic_records(folder / "cells", args.cells)
        made_s = time.perf_counter() - start
        start = time.perf_counter()
        frame = write_summary(paths, folder / "summary.csv", folder / "summary.parquet")
        aggregate_s = time.perf_counter() - start
        start = time.perf_counter()
        text = build_report(frame)
        report_s = time.perf_counter() - start
    print(
        f"{len(paths)} records (made in {made_s:.1f} s): aggregate {aggregate_s:.2f} s, "
        f"report {report_s:.2f} s ({len(text.splitlines()):,} lines)"
    )


if __name__ == "__main__":
    main()
