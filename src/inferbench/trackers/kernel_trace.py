"""What the GPU did during a stretch of work: its kernels' count and busy time, from a profiler trace.

A decode step's time per output token splits into the GPU's busy time (kernels running) and the time it
idles between them, waiting for the host to schedule, launch or hand back the step. The busy time is the
union of the kernels' intervals (kernels of several streams may overlap; a sum would count that twice).

Two sources, one arithmetic: torch.profiler in this process (an engine whose kernels this process
launches), or a Chrome-trace file another process wrote (vLLM's engine core profiles its worker with
torch.profiler and writes ``*.pt.trace.json.gz``).
"""

from __future__ import annotations

import bisect
import gzip
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class KernelTotals:
    """The kernels of one profiled stretch: how many, and how long the GPU ran any of them (µs)."""

    kernels: int
    busy_us: float


def busy_us(intervals: Iterable[tuple[float, float]]) -> float:
    """The length of the union of ``(start, end)`` intervals (µs): the time at least one kernel ran."""
    total, reach = 0.0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def totals(intervals: list[tuple[float, float]]) -> KernelTotals:
    return KernelTotals(len(intervals), busy_us(intervals))


def trace_kernels(path: Path) -> list[tuple[float, float]]:
    """The kernels' ``(start, end)`` (µs) in a Chrome-trace JSON file (gzipped or not), as torch.profiler
    writes them: events of category ``kernel`` (what CUPTI recorded, CUDA-graph replays included)."""
    return _kernels(_events(path))


def _events(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as handle:
        trace = json.load(handle)
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    return [e for e in events if isinstance(e, dict)]


def _kernels(events: list[dict[str, Any]]) -> list[tuple[float, float]]:
    return sorted(
        (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0)))
        for e in events
        if e.get("cat") == "kernel" and "ts" in e
    )


def annotated_kernels(path: Path, iteration: re.Pattern[str]) -> list[list[tuple[float, float]]]:
    """The kernels of a Chrome-trace file grouped by the iteration they belong to, for the iterations whose
    annotation matches ``iteration``. An engine that annotates each iteration (vLLM's worker: a
    ``record_function`` per step, which the trace also draws on the GPU's timeline as ``gpu_user_annotation``)
    runs an iteration's kernels, and the sampling after it, before the next iteration's first kernel on its
    stream: a kernel belongs to the last annotation that began on the GPU before it."""
    events = _events(path)
    marks = sorted((float(e["ts"]), str(e.get("name", ""))) for e in events if e.get("cat") == "gpu_user_annotation")
    groups: list[list[tuple[float, float]]] = [[] for _ in marks]
    starts = [ts for ts, _ in marks]
    for kernel in _kernels(events):
        index = bisect.bisect_right(starts, kernel[0]) - 1
        if index >= 0:
            groups[index].append(kernel)
    return [group for (_, name), group in zip(marks, groups, strict=True) if iteration.fullmatch(name)]


def profiled_kernels(
    work: Callable[[], Any], synchronize: Callable[[], None], trace: Path
) -> list[tuple[float, float]]:
    """The ``(start, end)`` (µs) of every kernel this process ran during ``work`` (synchronised before the
    profiler stops, so that the last kernels are in); the trace is written to ``trace`` and read back as
    another process's would be (``trace_kernels``): one reading for both sources."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        work()
        synchronize()
    prof.export_chrome_trace(str(trace))
    return trace_kernels(trace)
