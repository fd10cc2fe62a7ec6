"""Distance to the limit: each cell placed on a roofline.

The work of a workload at one shape is counted once (``model_cost``): FLOPs with
``torch.utils.flop_counter`` on one eager call, and the bytes that any engine must move at least once
(weights, inputs, output) beside the bytes of every operator's output (what an engine that fuses
nothing writes and reads again). The machine's limits are measured on the machine that measured the
cells (``machine_peaks``): a large GEMM per precision and a device-to-device copy. A cell's floor is
the larger of its compute time and its compulsory memory time at those peaks; the cell is that many
times slower than the floor, and the larger term says which limit it would meet first.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

#: bytes per weight or activation element at each precision (fp8: the linear layers' weights; the rest
#: stays bf16, so fp8 cells are placed with 2 bytes, an upper bound on their traffic)
ELEMENT_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 2, "int8": 1}
#: which measured GEMM peak bounds a cell of each precision (fp32 with TF32: tf32)
PEAK_KEYS = {"fp32": "fp32", "fp16": "fp16", "bf16": "bf16", "fp8": "fp8", "int8": None}


def model_cost(spec: Any, seq_len: int) -> dict[str, Any]:
    """FLOPs and bytes of one row (batch 1) of ``spec`` at ``seq_len``, from one eager fp32 call on the
    CPU. Both scale linearly with the batch for these models (every row is independent); weights do not."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import FlopCounterMode

    from inferbench.models.registry import make_inputs

    class OutputElements(TorchDispatchMode):
        """Counts the elements every operator writes (the traffic of an engine that fuses nothing)."""

        def __init__(self) -> None:
            super().__init__()
            self.elements = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for tensor in torch.utils._pytree.tree_leaves(out):
                if isinstance(tensor, torch.Tensor) and tensor.is_floating_point():
                    self.elements += tensor.numel()
            return out

    feed = {k: torch.from_numpy(v) for k, v in make_inputs(spec.inputs, 1, seq_len, 0).items()}
    module = spec.module.eval()
    counter, outputs = FlopCounterMode(display=False), OutputElements()
    with torch.inference_mode(), counter, outputs:
        result = module(**feed)
    return {
        "model": spec.name,
        "seq_len": seq_len,
        "flops_per_row": int(counter.get_total_flops()),
        "parameters": int(sum(p.numel() for p in module.parameters())),
        "input_elements_per_row": int(sum(t.numel() for t in feed.values())),
        "output_elements_per_row": int(result.numel()),
        "activation_elements_per_row": int(outputs.elements),
        "counted_with": f"torch.utils.flop_counter.FlopCounterMode, torch {torch.__version__}",
    }


def _best_seconds(call: Any, synchronize: Any, repeats: int) -> float:
    call()
    synchronize()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        synchronize()
        best = min(best, time.perf_counter() - start)
    return best


def machine_peaks(device: str, gemm_size: int | None = None, copy_mib: int | None = None) -> dict[str, Any]:
    """The best GEMM throughput per precision (FLOP/s) and copy bandwidth (bytes/s, read + write) that
    this machine reaches here and now: the roof the cells are placed under."""
    import torch

    cuda = device == "cuda"
    n = gemm_size or (8192 if cuda else 1024)
    copy_bytes = (copy_mib or (2048 if cuda else 256)) * 2**20
    synchronize = torch.cuda.synchronize if cuda else (lambda: None)
    peaks: dict[str, Any] = {"device": device, "gemm_size": n, "copy_bytes": copy_bytes, "gemm_flops_per_s": {}}
    if cuda:
        peaks["gpu"] = torch.cuda.get_device_name()
    dtypes = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    previous = torch.backends.cuda.matmul.allow_tf32
    for name, dtype in dtypes.items():
        if not cuda and name != "fp32":  # CPUs without bf16/fp16 GEMM units emulate them: no roof
            continue
        torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        seconds = _best_seconds(lambda a=a, b=b: a @ b, synchronize, 10 if cuda else 3)
        peaks["gemm_flops_per_s"][name] = 2 * n**3 / seconds
    torch.backends.cuda.matmul.allow_tf32 = previous
    if cuda and torch.cuda.get_device_capability() >= (8, 9):  # e4m3 tensor cores
        a = torch.randn(n, n, device=device).to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device=device).to(torch.float8_e4m3fn).t()  # _scaled_mm wants column-major b
        one = torch.ones((), device=device)
        seconds = _best_seconds(
            lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16), synchronize, 10
        )
        peaks["gemm_flops_per_s"]["fp8"] = 2 * n**3 / seconds
    source = torch.empty(copy_bytes // 4, device=device, dtype=torch.float32)
    target = torch.empty_like(source)
    seconds = _best_seconds(lambda: target.copy_(source), synchronize, 10)
    peaks["copy_bytes_per_s"] = 2 * copy_bytes / seconds
    peaks["torch"] = torch.__version__
    return peaks


def place(row: dict[str, Any], cost: dict[str, Any], peaks: dict[str, Any]) -> dict[str, Any]:
    """One summary row under the roof: its work, its floor, how far it is from it and which limit binds."""
    batch, precision = int(row["batch_size"]), row["precision"]
    size = ELEMENT_BYTES[precision]
    flops = cost["flops_per_row"] * batch
    weight_bytes = cost["parameters"] * size
    io_bytes = (cost["input_elements_per_row"] + cost["output_elements_per_row"]) * batch * 4  # fp32 in/out
    compulsory = weight_bytes + io_bytes
    unfused = weight_bytes + 2 * cost["activation_elements_per_row"] * batch * size
    peak_key = "tf32" if precision == "fp32" and row.get("tf32") is True else PEAK_KEYS[precision]
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
