"""How long aggregation, plots, the report and Snakemake's DAG take for a large grid (not a test):
writes N synthetic cell records (realistic fields, random latencies) into a temporary folder, then
times the `aggregate` step (records -> summary.csv + parquet), the plots of every workload and the
report's build (decisions and one section per study included). With --dag, also times a dry run of
the workflow for a config of about 2,000 cells (the DAG Snakemake builds before any job).

    python benchmarks/tools/aggregate_scale.py [--cells 2000] [--dag]
"""

from __future__ import annotations

import argparse
import itertools
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

from inferbench.analysis.summary import write_summary
from inferbench.core.cells import CellKey, CellRecord
from inferbench.core.stats import latency_stats
from inferbench.report.markdown import build_report
from inferbench.report.plots import plot_every_workload

REPO = Path(__file__).resolve().parents[2]

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


#: one study per layout over the synthetic grid, as a preset would define them
GRID = {"workloads": WORKLOADS, "engines": ENGINES, "precisions": ["fp32", "fp16"], "devices": ["cpu", "cuda"],
        "batch_sizes": [1, 4, 16, 64, 256], "seq_lens": [128, 512], "threads": [2]}  # fmt: skip
STUDIES = {
    layout: {**GRID, "layout": layout, "question": f"the {layout} question"}
    for layout in ("by_batch", "engines", "seq")
}


def dag_seconds(folder: Path) -> tuple[int, float]:
    """A dry run of the workflow for a config of about 2,000 CPU cells: (cells, seconds)."""
    study = {"workloads": WORKLOADS, "engines": ["noop", "torch_eager", "ort_cpu"], "devices": ["cpu"],
             "batch_sizes": list(range(1, 18)), "seq_lens": [32, 128, 512], "threads": [1, 2, 4, 8]}  # fmt: skip
    config = folder / "config" / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text((REPO / "config" / "config.yaml").read_text())
    preset = folder / "big.yaml"
    preset.write_text(yaml.safe_dump({"run": ["big"], "studies": {"big": study}, "profile": {"cells": []}}))
    command = [sys.executable, "-m", "snakemake", "-n", "--snakefile", str(REPO / "Snakefile"), "--configfile",
               str(preset), "--quiet", "rules"]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, check=True)
    seconds = time.perf_counter() - start
    cells = next(int(line.split()[1]) for line in done.stdout.splitlines() if line.startswith("benchmark_cell"))
    return cells, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cells", type=int, default=2000)
    parser.add_argument("--dag", action="store_true", help="also time a dry run of a ~2,000-cell workflow")
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
        plots = plot_every_workload(frame, folder / "plots")
        plots_s = time.perf_counter() - start
        start = time.perf_counter()
        text = build_report(frame, plots, report_dir=folder, studies=STUDIES)
        report_s = time.perf_counter() - start
        print(
            f"{len(paths)} records (made in {made_s:.1f} s): aggregate {aggregate_s:.2f} s, {len(plots)} plots "
            f"{plots_s:.2f} s, report with {len(STUDIES)} study sections {report_s:.2f} s "
            f"({len(text.splitlines()):,} lines)"
        )
        if args.dag:
            cells, seconds = dag_seconds(folder / "dag")
            print(f"dry run of a workflow with {cells:,} cells: {seconds:.1f} s (the DAG is built, no job runs)")


if __name__ == "__main__":
    main()
