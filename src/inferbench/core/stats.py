"""Latency statistics from per-call samples.

A tail percentile from too few samples is noise: p90, p95 and p99 are reported only when at least
10, 20 and 100 samples exist (the spirit of MLPerf's minimum query counts), else ``None``.
Each reported percentile carries a 95% confidence interval from a seeded percentile bootstrap
(scipy.stats.bootstrap, 1,000 resamples; beyond 20,000 samples, e.g. the no-op engine's millions of
calls, the exact order-statistic interval), and the coefficient of variation says how steady the
calls were.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from inferbench.core.percentiles import MIN_SAMPLES, PERCENTILES

BOOTSTRAP_RESAMPLES = 1000


#: above this many samples the bootstrap's cost (time and memory grow with n x resamples) buys
#: nothing: the distribution-free order-statistic interval is exact there and costs one partition
BOOTSTRAP_MAX_SAMPLES = 20_000


def percentile_ci(
    samples: np.ndarray, names: list[str], confidence: float = 0.95, seed: int = 0
) -> dict[str, tuple[float, float]]:
    """Confidence intervals of the named percentiles (same unit as ``samples``): a seeded percentile
    bootstrap up to ``BOOTSTRAP_MAX_SAMPLES`` samples, the binomial order-statistic interval above."""
    if samples.size < 2 or not names:
        return {}
    qs = [PERCENTILES[name] for name in names]
    if np.ptp(samples) == 0:  # every call took the same time: nothing to resample
        return {name: (float(samples[0]), float(samples[0])) for name in names}
    from scipy import stats as scipy_stats  # seconds to import: only where intervals are computed

    if samples.size > BOOTSTRAP_MAX_SAMPLES:
        return {name: _order_statistic_ci(samples, q / 100, confidence) for name, q in zip(names, qs, strict=True)}
    result = scipy_stats.bootstrap(
        (samples,),
        lambda x, axis: np.percentile(x, qs, axis=axis),
        n_resamples=BOOTSTRAP_RESAMPLES,
        confidence_level=confidence,
        method="percentile",
        vectorized=True,
        batch=100,
        rng=np.random.default_rng(seed),
    )
    low, high = np.atleast_1d(result.confidence_interval.low), np.atleast_1d(result.confidence_interval.high)
    return {name: (float(lo), float(hi)) for name, lo, hi in zip(names, low, high, strict=True)}


def order_statistic_ranks(n: int, quantile: float, confidence: float) -> tuple[int, int]:
    """The 0-based ranks of ``n`` sorted samples that bound ``quantile`` with at least ``confidence``:
    the k-th smallest sample exceeds the true quantile with a Binomial(n, quantile) probability, so
    ranks at that distribution's tails. Below 0 or above n - 1 where ``n`` samples are too few for it
    (at 95%: fewer than six for the median)."""
    from scipy import stats as scipy_stats  # seconds to import: only where intervals are computed

    tail = (1 - confidence) / 2
    return int(scipy_stats.binom.ppf(tail, n, quantile)) - 1, int(scipy_stats.binom.ppf(1 - tail, n, quantile))


def _order_statistic_ci(samples: np.ndarray, quantile: float, confidence: float) -> tuple[float, float]:
    """The order-statistic interval of ``quantile``, its ranks kept within the samples."""
    n = samples.size
    low_rank, high_rank = order_statistic_ranks(n, quantile, confidence)
    low_rank, high_rank = max(low_rank, 0), min(high_rank, n - 1)
    ordered = np.partition(samples, [low_rank, high_rank])
    return float(ordered[low_rank]), float(ordered[high_rank])


def reported_percentiles(values: np.ndarray, names: Iterable[str] = PERCENTILES) -> dict[str, float | None]:
    """Each of the percentiles ``names`` of ``values``, None where there are fewer values than it needs."""
    return {name: float(np.percentile(values, PERCENTILES[name])) if values.size >= MIN_SAMPLES[name] else None
            for name in names}  # fmt: skip


def latency_stats(samples_s: np.ndarray, batch_size: int) -> dict[str, Any]:
    """Percentiles, mean, std, min, max in milliseconds, and throughput in items per second."""
    samples = np.asarray(samples_s, dtype=np.float64)
    if samples.size == 0 or not np.all(np.isfinite(samples)) or np.any(samples < 0):
        raise ValueError("latency samples must be a non-empty array of finite, non-negative seconds")
    ms = samples * 1e3
    latency = reported_percentiles(ms) | {
        "mean": float(ms.mean()),
        "std": float(ms.std(ddof=1)) if ms.size > 1 else 0.0,
        "min": float(ms.min()),
        "max": float(ms.max()),
    }
    reported = [name for name in PERCENTILES if latency[name] is not None]
    total_s = float(samples.sum())
    return {
        "latency_ms": latency,
        "latency_ci95_ms": {name: list(ci) for name, ci in percentile_ci(ms, reported).items()},
        "cv": latency["std"] / latency["mean"] if latency["mean"] > 0 else None,
        "n_iters": int(samples.size),
        "throughput_per_s": batch_size * samples.size / total_s if total_s > 0 else None,
    }


#: consecutive calls judged together: a window holds at least this many seconds of calls, and this many calls
PHASE_WINDOW_S = 0.01
PHASE_WINDOW_CALLS = 10
#: a window whose p50 lies within this share of the fastest window's ran in the host's fast phase
FAST_PHASE_PCT = 10.0


def phase_windows(samples_s: np.ndarray) -> list[slice]:
    """The timed calls (seconds, in the order they ran) cut into consecutive windows of at least
    ``PHASE_WINDOW_S`` of calls and ``PHASE_WINDOW_CALLS`` calls; a short tail joins the last window."""
    samples = np.asarray(samples_s, dtype=np.float64)
    elapsed = np.cumsum(samples)
    windows: list[slice] = []
    start = 0
    while start < samples.size:
        before = elapsed[start - 1] if start else 0.0
        end = max(int(np.searchsorted(elapsed, before + PHASE_WINDOW_S)) + 1, start + PHASE_WINDOW_CALLS)
        if (
            samples.size - end < PHASE_WINDOW_CALLS
            or elapsed[-1] - elapsed[min(end, samples.size) - 1] < PHASE_WINDOW_S
        ):
            end = samples.size  # too little left for a window of its own
        windows.append(slice(start, end))
        start = end
    return windows


def fast_phase(samples_s: np.ndarray) -> tuple[np.ndarray, float]:
    """Which calls ran in the host's fast phase, and the share of windows that did. On a shared host the
    same call takes one time for a while and 1.5-2x that for the next while (work on the host the guest cannot
    see; the windows of one process flip between the two: docs/measuring.md), so that a process's p50 over all its calls
    is a mix weighted by how long the host was slow. The calls are cut into windows (``phase_windows``);
    those whose p50 lies within ``FAST_PHASE_PCT`` of the fastest window's are kept. Where the host was steady,
    every window is."""
    samples = np.asarray(samples_s, dtype=np.float64)
    windows = phase_windows(samples)
    p50s = np.array([np.median(samples[w]) for w in windows])
    fast = p50s <= p50s.min() * (1 + FAST_PHASE_PCT / 100)
    mask = np.zeros(samples.size, dtype=bool)
    for window, kept in zip(windows, fast, strict=True):
        mask[window] = kept
    return mask, float(fast.mean())


def with_fast_phase_p50(stats: dict[str, Any], samples_s: np.ndarray) -> dict[str, Any]:
    """``latency_stats``'s figures of one process with its p50 (and the p50's interval) made of the calls of
    the host's fast phase (``fast_phase``); the p50 of all its calls kept as ``p50_pooled``, and the share of
    windows in the fast phase as ``fast_phase_share``. The tail and the mean stay every call's."""
    mask, share = fast_phase(samples_s)
    kept = np.asarray(samples_s, dtype=np.float64)[mask] * 1e3
    latency = stats["latency_ms"]
    intervals = dict(stats["latency_ci95_ms"])
    if "p50" in intervals and not mask.all():  # every window kept: the interval is every call's already
        intervals["p50"] = list(percentile_ci(kept, ["p50"]).get("p50", (latency["p50"], latency["p50"])))
    fast = {"p50": float(np.median(kept)), "p50_pooled": latency["p50"]}
    return {**stats, "latency_ci95_ms": intervals, "latency_ms": {**latency, **fast}, "fast_phase_share": share}


#: a process whose p50 lies within this share of its cell's fastest process's ran in the cell's fast mode
FAST_MODE_PCT = 10.0


def fast_mode(p50s: np.ndarray) -> np.ndarray:
    """Which processes of each cell (a row of process p50s, NaN past its last) ran in its fast mode: a p50 above
    0 within ``FAST_MODE_PCT`` of the row's lowest. A process that met its host slow throughout its loop
    (``fast_phase`` found no fast window) reads 1.5-2x the others: the cell's figure is the fast mode's,
    which the next processes find again, not a mix weighted by how many met the host slow
    (docs/measuring.md)."""
    p50s = np.asarray(p50s, dtype=float)
    with np.errstate(invalid="ignore"):
        valid = np.isfinite(p50s) & (p50s > 0)
        fastest = np.min(np.where(valid, p50s, np.inf), axis=-1, keepdims=True)
        return valid & (p50s <= fastest * (1 + FAST_MODE_PCT / 100))


def fast_mode_p50s(p50s: np.ndarray) -> np.ndarray:
    """Each cell's p50 from its processes' p50s (a row per cell, NaN past its last process): the geometric mean
    of those in its fast mode (``fast_mode``), each process weighing the same however many calls it timed; NaN
    where a row has none."""
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a row without a p50: NaN, said by the caller
        return np.exp(np.nanmean(np.log(np.where(fast_mode(p50s), p50s, np.nan)), axis=-1))


def fast_mode_p50(p50s: Sequence[float]) -> float:
    """One cell's p50 from its processes' p50s (``fast_mode_p50s``)."""
    return float(fast_mode_p50s(np.asarray(p50s, dtype=float)))
