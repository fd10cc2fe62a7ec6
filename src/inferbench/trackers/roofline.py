"""What a roofline is made of: the work of a workload at one shape, and the machine's limits.

The work of a workload at one shape is counted once (``model_cost``): FLOPs with
``torch.utils.flop_counter`` on one eager call, and the bytes that any engine must move at least once
(weights, inputs, output) beside the bytes of every operator's output (what an engine that fuses
nothing writes and reads again). The machine's limits are measured on the machine that measured the
cells (``machine_peaks``): a large GEMM per precision and a device-to-device copy. Each cell is
placed under them by inferbench.analysis.roofline.
"""

from __future__ import annotations

import time
from typing import Any


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
    peaks["copy_bytes_per_s"] = copy_bandwidth(device, copy_bytes)
    peaks["torch"] = torch.__version__
    return peaks


def copy_bandwidth(device: str, copy_bytes: int | None = None) -> float:
    """The best bandwidth of a copy within ``device``'s memory here and now: bytes read + written per second."""
    import torch

    copy_bytes = copy_bytes or (2048 if device == "cuda" else 256) * 2**20
    synchronize = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    source = torch.empty(copy_bytes // 4, device=device, dtype=torch.float32)
    target = torch.empty_like(source)
    seconds = _best_seconds(lambda: target.copy_(source), synchronize, 10)
    return 2 * copy_bytes / seconds
