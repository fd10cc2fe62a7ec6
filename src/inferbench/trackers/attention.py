"""Which attention kernel a PyTorch call runs: SDPA's flash, memory-efficient, cuDNN or math backend,
or an unfused matmul/softmax chain, read from the ATen operators of one profiled call.

PyTorch picks the SDPA backend per call from the shapes, dtype, mask and GPU, silently; the same model
can run flash attention in one cell and the math fallback in the next. Only the CPU side of the
profiler is used (operator names), so no CUDA profiling state outlives the probe in a measuring process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

#: what a record says ran, and the operator (or kernel) names that show it
ATTENTION_KERNELS: dict[str, tuple[str, ...]] = {
    "sdpa flash": ("_scaled_dot_product_flash_attention", "flash_fwd"),
    "sdpa memory-efficient": ("_scaled_dot_product_efficient_attention", "fmha_cutlass", "efficient_attention"),
    "sdpa cudnn": ("_scaled_dot_product_cudnn_attention",),
    "sdpa math": ("_scaled_dot_product_attention_math",),
}
UNFUSED = "unfused (matmul, softmax, matmul)"


def classify(names: Iterable[str]) -> str | None:
    """The attention kernel that operator or kernel ``names`` show; None where nothing looks like attention."""
    names = [name.lower() for name in names]
    for kernel, patterns in ATTENTION_KERNELS.items():
        if any(pattern in name for pattern in patterns for name in names):
            return kernel
    return UNFUSED if any("softmax" in name for name in names) else None


def profiled_attention(call: Callable[[], Any], synchronize: Callable[[], None]) -> str | None:
    """The attention kernel of one call of ``call`` (untimed), from the ATen operators it dispatches."""
    import torch

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        call()
        synchronize()
    return classify(event.name for event in prof.events())
