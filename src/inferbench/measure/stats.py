"""Latency statistics from per-call samples.

A tail percentile from too few samples is noise: p90, p95 and p99 are reported only when at least
10, 20 and 100 samples exist (the spirit of MLPerf's minimum query counts), else ``None``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

PERCENTILES = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0}
MIN_SAMPLES = {"p50": 1, "p90": 10, "p95": 20, "p99": 100}


def latency_stats(samples_s: np.ndarray, batch_size: int) -> dict[str, Any]:
    """Percentiles, mean, std, min, max in milliseconds, and throughput in items per second."""
    samples = np.asarray(samples_s, dtype=np.float64)
    if samples.size == 0 or not np.all(np.isfinite(samples)) or np.any(samples < 0):
        raise ValueError("latency samples must be a non-empty array of finite, non-negative seconds")
    ms = samples * 1e3
    latency: dict[str, float | None] = {
        name: float(np.percentile(ms, q)) if ms.size >= MIN_SAMPLES[name] else None for name, q in PERCENTILES.items()
    }
    latency |= {
        "mean": float(ms.mean()),
        "std": float(ms.std(ddof=1)) if ms.size > 1 else 0.0,
        "min": float(ms.min()),
        "max": float(ms.max()),
    }
    total_s = float(samples.sum())
    return {
        "latency_ms": latency,
        "n_iters": int(samples.size),
        "throughput_per_s": batch_size * samples.size / total_s if total_s > 0 else None,
    }
