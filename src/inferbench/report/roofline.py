"""The report's roofline section: each cell of the roofline studies against its machine's limits."""

from __future__ import annotations

import pandas as pd

from inferbench.report.tables import markdown_table

ROOFLINE_COLUMNS = [
    ("workload", "workload"),
    ("engine", "engine"),
    ("precision", "precision"),
    ("batch_size", "batch"),
    ("seq_len", "seq"),
    ("latency_p50_ms", "p50"),
    ("tflops_achieved", "TFLOP/s achieved"),
    ("tflops_peak", "GEMM peak TFLOP/s"),
    ("intensity_flops_per_byte", "FLOP/byte (compulsory)"),
    ("floor_ms", "floor ms"),
    ("limit", "limit"),
    ("times_floor", "× floor"),
    ("unfused_memory_floor_ms", "memory floor without fusion, ms"),
]


def roofline_section(table: pd.DataFrame | None) -> list[str]:
    """Distance to the limit of each placed cell, fastest engine of each shape first."""
    if table is None or table.empty:
        return []
    table = table.assign(
        tflops_achieved=table["achieved_flops_per_s"] / 1e12,
        tflops_peak=table["peak_flops_per_s"] / 1e12,
    ).sort_values(["workload", "batch_size", "seq_len", "times_floor"])
    peak_bw = table["peak_bytes_per_s"].max() / 1e9
    return [
        "## Distance to the limit (roofline)",
        "",
        "FLOPs are counted once per workload and shape (`torch.utils.flop_counter` on one eager call); the "
        "compulsory bytes are the weights at the cell's precision plus the fp32 inputs and output; the peaks "
        f"were measured in the same run on the same machine (largest copy bandwidth {peak_bw:,.0f} GB/s, read + "
        "write; GEMM peaks per precision). The floor is the larger of compute time and compulsory memory time "
        "at those peaks, and `limit` names it; `× floor` is how many times slower than that floor the cell runs. "
        "The last column is the memory floor had every operator's output gone through memory once: a cell "
        "above it cannot be fused much further by saving traffic alone.",
        "",
        markdown_table(table, ROOFLINE_COLUMNS),
        "",
    ]
