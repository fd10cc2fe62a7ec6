"""How long `inferbench compare` takes as runs grow (not a test): writes two synthetic summaries of N rows
each into a temporary folder and times ``compare_runs`` on them (reading both, every cell, every claim of
either run, the Markdown), at each size asked for, printing rows, seconds and milliseconds per cell.

    python benchmarks/tools/compare_scale.py [--rows 10000 100000] [--knobs] [--keep DIR]

A summary has 100 rows per workload: 5 engine/precision pairs x 20 batch sizes (1 to 524,288), every cell a
device-bound GPU cell measured in 3 processes, B about 2% slower than A. With ``--knobs`` each row also has
the computation columns (graph, precision mode, CUDA graph...) a summary has had since they were added, so
that single-option steps are claimed too (5 a shape). Work linear in cells keeps ms per cell flat as the
rows grow.
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from inferbench.report.compare import compare_runs

#: each engine/precision pair and its computation (graph, precision_mode, compile_mode, cuda_graph)
ENGINES = {
    ("torch_eager", "fp32"): ("eager", None, None, False),
    ("torch_eager", "fp16"): ("eager", "cast", None, False),
    ("torch_compile", "fp16"): ("inductor", "cast", "default", False),
    ("ort", "fp32"): ("onnx", None, None, False),
    ("cuda_graphs", "fp16"): ("eager", "cast", None, True),
}
BATCHES = [2**i for i in range(20)]
ROWS_PER_WORKLOAD = len(ENGINES) * len(BATCHES)


def synthetic_summary(workloads: int, scale: float, knobs: bool = False) -> pd.DataFrame:
    """``workloads`` x ``ROWS_PER_WORKLOAD`` rows: p50 ~ sqrt(batch), ``scale`` times over, 1% noise a cell."""
    rng = np.random.default_rng(int(scale * 100))
    rows = []
    for workload, ((engine, precision), computation), batch in itertools.product(
        range(workloads), ENGINES.items(), BATCHES
    ):
        p50 = batch**0.5 * (1 + 0.1 * len(engine)) * scale * (1 + 0.01 * rng.standard_normal())
        row = {"workload": f"w{workload}", "engine": engine, "precision": precision, "device": "cuda",
               "batch_size": batch, "seq_len": 0, "threads": 0, "scenario": "single", "status": "ok",
               "engine_impl": engine, "timing": "device", "bound": "device", "latency_p50_ms": p50,
               "e2e_latency_p50_ms": p50 * 1.1, "p50_by_process_ms": f"{p50 * 0.99:.6g};{p50:.6g};{p50 * 1.01:.6g}",
               "n_iters": 400, "throughput_per_s": 1e3 * batch / p50}  # fmt: skip
        if knobs:
            graph, precision_mode, compile_mode, cuda_graph = computation
            row |= {"graph": graph, "precision_mode": precision_mode, "compile_mode": compile_mode,
                    "cuda_graph": cuda_graph, "channels_last": False, "io_binding": None, "tf32": "strict"}  # fmt: skip
        rows.append(row)
    return pd.DataFrame(rows)


def write_runs(folder: Path, rows: int, knobs: bool = False) -> tuple[Path, Path]:
    """Two summaries of ``rows`` rows (rounded up to whole workloads) in ``folder``: A, and B ~2% slower."""
    workloads = max(1, -(-rows // ROWS_PER_WORKLOAD))
    paths = []
    for name, scale in (("a", 1.0), ("b", 1.02)):
        path = folder / f"{name}{rows}.csv"
        synthetic_summary(workloads, scale, knobs).to_csv(path, index=False)
        paths.append(path)
    return paths[0], paths[1]


def time_compare(path_a: Path, path_b: Path) -> dict[str, float]:
    """One ``compare_runs`` of the two summaries: its seconds, cells and claims."""
    start = time.perf_counter()
    cells, agreement, _, _ = compare_runs(path_a, path_b)
    seconds = time.perf_counter() - start
    ms_per_cell = 1e3 * seconds / max(1, len(cells))
    return {"cells": len(cells), "claims": len(agreement), "seconds": seconds, "ms_per_cell": ms_per_cell}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1000, 10000, 100000], help="rows of each summary")
    parser.add_argument("--knobs", action="store_true", help="with the computation columns: option steps claimed")
    parser.add_argument("--keep", type=Path, help="write the summaries here (kept) rather than in a temporary folder")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        print(f"{'rows':>8} {'cells':>8} {'claims':>8} {'seconds':>8} {'ms/cell':>8}")
        for rows in args.rows:
            timing = time_compare(*write_runs(folder, rows, args.knobs))
            print(f"{rows:>8} {timing['cells']:>8} {timing['claims']:>8} {timing['seconds']:>8.2f} "
                  f"{timing['ms_per_cell']:>8.3f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
