"""Operator profiles of a cell: a torch.profiler trace (viewable in TensorBoard or Perfetto) or ONNX
Runtime's profiling JSON, and from either the top operators by time.

Profiling runs in its own job after a warm-up, never inside a timed loop: the profiler's own cost
would otherwise be in the cell's numbers. Times are per profiled call: on CUDA, the self time of
device kernels (what the GPU spent); on the CPU, operators' self time on the host.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any


def top_ops(totals_us: dict[str, tuple[int, float]], n_calls: int, top: int) -> list[dict[str, Any]]:
    """Rows of the ``top`` operators by total time; ``totals_us`` maps name -> (count, microseconds)."""
    everything = sum(us for _, us in totals_us.values())
    ranked = sorted(totals_us.items(), key=lambda item: item[1][1], reverse=True)[:top]
    return [
        {
            "name": name,
            "calls_per_run": count / n_calls,
            "ms_per_run": us / 1e3 / n_calls,
            "share": us / everything if everything > 0 else None,
        }
        for name, (count, us) in ranked
    ]


def per_call(totals_us: dict[str, tuple[int, float]], n_calls: int, unit: str) -> dict[str, Any]:
    """All of a profile's events per profiled call, not only the top ones: how many (``unit``: kernels on a
    GPU, operators or nodes on the CPU), their time, and the mean time of one. A launch-bound call shows as
    many short kernels: BERT-base at batch 1 is hundreds of kernels of a few µs each."""
    count = sum(c for c, _ in totals_us.values())
    us = sum(t for _, t in totals_us.values())
    return {
        "unit": unit,
        "count": count / n_calls if n_calls else None,
        "ms": us / 1e3 / n_calls if n_calls else None,
        "mean_us": us / count if count else None,
    }


def torch_profile(
    call: Callable[[], Any], synchronize: Callable[[], None], n_calls: int, out_dir: Path, device: str, top: int
) -> dict[str, Any]:
    """Profile ``n_calls`` calls with torch.profiler; the trace goes to ``out_dir`` in TensorBoard's
    layout (``tensorboard --logdir <out_dir>``)."""
    from torch.profiler import ProfilerActivity, profile, tensorboard_trace_handler

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    handler = tensorboard_trace_handler(str(out_dir), worker_name="cell")
    with profile(activities=activities, on_trace_ready=handler) as prof:
        for _ in range(n_calls):
            call()
            synchronize()
    totals = event_totals(prof.key_averages(), device)
    return {
        "tool": "torch.profiler",
        "trace": _newest(out_dir, "*.pt.trace.json"),
        "time": "self time of CUDA kernels (device)" if device == "cuda" else "self time of operators (host)",
        "top_ops": top_ops(totals, n_calls, top),
        "per_call": per_call(totals, n_calls, "kernels" if device == "cuda" else "operators"),
    }


def event_totals(events: Any, device: str) -> dict[str, tuple[int, float]]:
    """name -> (count, microseconds) from torch.profiler's averaged events. On CUDA only the kernels
    (device events) count: an operator's self device time is its kernels' time again, and kernels
    replayed from a CUDA graph have no operator at all. On the CPU, operators' self time."""
    from torch.autograd import DeviceType

    totals: dict[str, tuple[int, float]] = {}
    for event in events:
        if device == "cuda":
            if event.device_type != DeviceType.CUDA:
                continue
            us = event.self_device_time_total
        else:
            us = event.self_cpu_time_total
        if us > 0:
            totals[event.key] = (event.count, float(us))
    return totals


def _newest(folder: Path, pattern: str) -> str | None:
    files = sorted(Path(folder).glob(pattern), key=lambda p: p.stat().st_mtime)
    return files[-1].name if files else None


def ort_top_ops(profile_json: Path, n_calls: int, top: int) -> dict[str, Any]:
    """Top operators from ONNX Runtime's profiling JSON (Chrome trace events) over its last
    ``n_calls`` runs: node kernel times grouped by operator type."""
    events = json.loads(Path(profile_json).read_text())
    # only the last n_calls runs: the session's first runs (warm-up) allocate and tune
    runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == "model_run")[-n_calls:]
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for event in events:
        if event.get("cat") != "Node" or not str(event.get("name", "")).endswith("_kernel_time"):
            continue
        if not any(begin <= event["ts"] <= end for begin, end in runs):
            continue
        op = event.get("args", {}).get("op_name", "?")
        totals[op][0] += 1
        totals[op][1] += float(event.get("dur", 0))
    return {
        "tool": "onnxruntime",
        "trace": Path(profile_json).name,
        "time": "node kernel time, host clock, grouped by operator type",
        "top_ops": top_ops({k: (int(c), us) for k, (c, us) in totals.items()}, len(runs) or 1, top),
        "per_call": per_call({k: (int(c), us) for k, (c, us) in totals.items()}, len(runs) or 1, "nodes"),
    }
