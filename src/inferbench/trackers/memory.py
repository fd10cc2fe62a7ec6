"""Peak memory of the measuring process."""

from __future__ import annotations

import resource
import sys
from pathlib import Path

_STATUS = Path("/proc/self/status")
#: RSS when ``note_process_start`` ran (a forked process's start), MiB; None if it never ran
_rss_at_start_mb: float | None = None


def _status_mb(field: str) -> float | None:
    """A ``VmXxx`` line of /proc/self/status in MiB (Linux), else None."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def note_process_start() -> None:
    """Remember this forked process's RSS at its start. A process forked from one that has imported
    libraries (the warm-start server: every engine's; a cell's parent: its engine's) has their pages
    mapped from the start, and they count in its RSS and peak as they would in a process that
    imported them itself; the server's imports of other engines' libraries are in it too, so the
    record keeps this baseline beside the peak (peak - start = what the job itself added)."""
    global _rss_at_start_mb
    _rss_at_start_mb = _status_mb("VmRSS")


def host_rss_at_start_mb() -> float | None:
    """RSS of this forked process when it began (see ``note_process_start``), MiB; None if not noted."""
    return _rss_at_start_mb


def host_peak_rss_mb() -> float:
    """Peak resident set size of this process since it started, in MiB."""
    peak = _status_mb("VmHWM")
    if peak is not None:
        return peak
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
