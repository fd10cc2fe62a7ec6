"""Peak memory of the measuring process."""

from __future__ import annotations

import resource
import sys


def host_peak_rss_mb() -> float:
    """Peak resident set size of this process since it started, in MiB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1024 / 1024 if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB on Linux


def reset_gpu_peak() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def gpu_peak_allocated_mb() -> float | None:
    """Peak memory allocated through PyTorch's CUDA allocator since the last reset, in MiB."""
    import torch

    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    return torch.cuda.max_memory_allocated() / 2**20
