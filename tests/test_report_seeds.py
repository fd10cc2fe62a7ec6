"""The seed studies' tables: each seed's axes and units from synthetic cells whose values are known."""

from __future__ import annotations

import pandas as pd

from inferbench.analysis.decisions import ClaimBasis
from inferbench.report.markdown import build_report
from inferbench.report.seeds import seed_tables_section
from tests.test_decisions import cell
from tests.test_report_studies import LOAN, epoch_cell, loan_summary

VISION = {"workloads": ["resnet50"], "engines": ["torch_eager", "torchscript"], "precisions": ["fp32", "fp16"],
          "devices": ["cuda"], "batch_sizes": [1, 8], "layout": "engines"}  # fmt: skip
HEART = {"workloads": ["mlp_heart"], "engines": ["train_epoch", "train_epoch_loader"], "precisions": ["fp32"],
         "devices": ["cpu", "cuda"], "batch_sizes": [32], "threads": [2], "layout": "training"}  # fmt: skip


def section(rows: list[dict] | pd.DataFrame, studies: dict) -> str:
    summary = pd.DataFrame(rows)
    return "\n".join(seed_tables_section(summary, studies, ClaimBasis.of(summary)))


def test_seed_000_is_ms_per_sample_per_engine_against_batch_end_to_end():
    text = section(loan_summary(), {"loan_default": LOAN})
    assert "### Seed 000" in text
    assert "| workload | engine | b1 | b10 | b100 | b1000 |" in text
    # CPU: 0.01 ms per item at every batch; GPU: 1 ms end to end per call, so 1 / batch per item
    assert "| mlp_lendingclub | ort_cpu cpu 4t | 10.0 µs | 10.0 µs | 10.0 µs | 10.0 µs |" in text
    assert "| mlp_lendingclub | ort_cuda cuda | 1.00 ms | 100 µs | 10.0 µs | 1.00 µs |" in text


def vision_cells() -> list[dict]:
    p50 = {("torch_eager", "fp32"): 8.0, ("torch_eager", "fp16"): 4.0, ("torchscript", "fp32"): 8.0,
           ("torchscript", "fp16"): 2.0}  # fmt: skip
    rows = []
    for (engine, precision), ms in p50.items():
        for batch in (1, 8):
            for_each_process = [ms * batch, ms * batch * 1.01]  # two processes, 1% apart
            by_process = ";".join(map(str, for_each_process))
            spread = {"repeat_p50_min_ms": min(for_each_process), "repeat_p50_max_ms": max(for_each_process)}
            rows.append(cell(engine=engine, engine_impl=engine, precision=precision, device="cuda", threads=0,
                             batch_size=batch, latency_p50_ms=ms * batch, repeats=2, **spread,
                             p50_by_process_ms=by_process, e2e_p50_by_process_ms=by_process))  # fmt: skip
    return rows


def test_seed_001_has_the_four_rows_in_the_seeds_order_with_the_speedup_over_fp32_eager():
    text = section(vision_cells(), {"vision_fp16": VISION})
    lines = [line for line in text.splitlines() if line.startswith("| resnet50 |")]
    assert [line.split(" | ")[1] for line in lines] == ["FP32 eager", "FP16 eager", "FP32 TorchScript",
                                                         "FP16 TorchScript"]  # fmt: skip
    assert lines[0] == "| resnet50 | FP32 eager | 8.00 ms | 64.0 ms |"  # the baseline: no ratio
    assert lines[1].startswith("| resnet50 | FP16 eager | 4.00 ms (2.00×") and "32.0 ms (2.00×" in lines[1]
    assert "| 2.00 ms (4.00×" in lines[3]
    assert "(1.00×, within the spread)" in lines[2]  # equal p50s: the interval holds 1


def test_seed_004_gives_epoch_times_and_the_gpu_cpu_speedup():
    rows = [
        {**epoch_cell("train_epoch", "cpu", 1000.0), "latency_p50_ms": 6.0},
        {**epoch_cell("train_epoch", "cuda", 500.0), "latency_p50_ms": 15.0},  # the ratio is of items/s
        {**epoch_cell("train_epoch_loader", "cpu", 250.0), "latency_p50_ms": 20.0},  # no GPU twin: no ratio
    ]
    text = section(rows, {"heart_training": HEART})
    assert "| mlp_heart | train_epoch | b32 | 6.00 ms | 15.0 ms | 0.500× |" in text
    assert "| mlp_heart | train_epoch_loader | b32 | 20.0 ms | – | – |" in text


def test_only_seeds_whose_studies_ran_get_a_table_and_the_report_places_them_after_the_studies():
    assert section(loan_summary(), {"vision_fp16": VISION}) == ""  # no vision cell measured
    text = build_report(loan_summary(), studies={"loan_default": LOAN})
    assert text.index("## Study `loan_default`") < text.index("## The seeds' tables") < text.index("## What was")
    assert "### Seed 001" not in text
