"""Distance to the limit: each cell placed on a roofline.

A cell's floor is the larger of its compute time and its compulsory memory time at the machine's
measured peaks (inferbench.trackers.roofline: ``model_cost``, ``machine_peaks``); the cell is that many
times slower than the floor, and the larger term says which limit it would meet first.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: bytes per weight or activation element at each precision (fp8: the linear layers' weights; the rest
#: stays bf16, so fp8 cells are placed with 2 bytes, an upper bound on their traffic)
ELEMENT_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 2, "int8": 1}
#: which measured GEMM peak bounds a cell of each precision (fp32 with TF32: tf32)
PEAK_KEYS = {"fp32": "fp32", "fp16": "fp16", "bf16": "bf16", "fp8": "fp8", "int8": None}


def place(row: dict[str, Any], cost: dict[str, Any], peaks: dict[str, Any]) -> dict[str, Any]:
    """One summary row under the roof: its work, its floor, how far it is from it and which limit binds."""
    batch, precision = int(row["batch_size"]), row["precision"]
    size = ELEMENT_BYTES[precision]
    flops = cost["flops_per_row"] * batch
    weight_bytes = cost["parameters"] * size
    io_bytes = (cost["input_elements_per_row"] + cost["output_elements_per_row"]) * batch * 4  # fp32 in/out
    compulsory = weight_bytes + io_bytes
    unfused = weight_bytes + 2 * cost["activation_elements_per_row"] * batch * size
    # TF32 math allowed anywhere: its peak is the ceiling the cell could reach
    peak_key = "tf32" if precision == "fp32" and row.get("tf32") in ("conv", "all") else PEAK_KEYS[precision]
    peak_flops = peaks["gemm_flops_per_s"].get(peak_key) if peak_key else None
    seconds = row["latency_p50_ms"] / 1e3
    compute_s = flops / peak_flops if peak_flops else None
    memory_s = compulsory / peaks["copy_bytes_per_s"]
    floor_s = max(compute_s or 0.0, memory_s)
    return {
        "flops": flops,
        "bytes_compulsory": compulsory,
        "bytes_unfused": unfused,
        "intensity_flops_per_byte": flops / compulsory,
        "achieved_flops_per_s": flops / seconds,
        "peak_flops_per_s": peak_flops,
        "peak_bytes_per_s": peaks["copy_bytes_per_s"],
        "floor_ms": floor_s * 1e3,
        "limit": "compute" if (compute_s or 0.0) >= memory_s else "memory",
        "times_floor": seconds / floor_s if floor_s > 0 else np.nan,
        # the same floor had every operator's output gone through memory once (no fusion)
        "unfused_memory_floor_ms": unfused / peaks["copy_bytes_per_s"] * 1e3,
    }


def roofline_table(summary: Any, costs: list[dict[str, Any]], peaks: list[dict[str, Any]]) -> Any:
    """The measured cells of ``summary`` (a pandas frame) under the roof of their device: one row each,
    with the cell's dimensions, p50, and what ``place`` says. Cells without a cost or a peak are left out."""
    import pandas as pd

    by_shape = {(c["model"], int(c["seq_len"])): c for c in costs}
    by_device = {p["device"]: p for p in peaks}
    rows = []
    for row in summary[summary["status"].isin(["ok", "invalid"])].to_dict("records"):
        cost = by_shape.get((row["workload"], int(row["seq_len"])))
        peak = by_device.get(row["device"])
        if cost is None or peak is None or row["precision"] not in PEAK_KEYS or pd.isna(row["latency_p50_ms"]):
            continue
        keys = ("workload", "engine", "precision", "device", "batch_size", "seq_len", "status", "latency_p50_ms")
        rows.append({k: row[k] for k in keys} | place(row, cost, peak))
    return pd.DataFrame(rows)
