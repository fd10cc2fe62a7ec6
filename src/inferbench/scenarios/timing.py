"""The timing loop: warm up, then measure until both a minimum time and a minimum count are reached.

Each timed call is followed by synchronisation (single-stream semantics: the next call starts only
after the previous result exists). Host-clock timers read ``perf_counter_ns`` after the engine's
``synchronize``; CUDA-event timers record events around the call on the stream the engine computes on.
Which timer a boundary uses is the scenario's choice (inferbench.scenarios.single), never the engine's.

Besides the timer's sample, every call's host time is split in two: until ``call()`` returns (the
host issuing the work) and until the timer has synchronised. Where an engine's ``run`` returns before
the device has finished (measured: inferbench.trackers.bound), the first part's share says who sets
the pace: near 1, the device waits for the host's launches; well below, the host waits for the device.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np


class Timer(Protocol):
    def begin(self) -> None: ...
    def end(self) -> float:
        """Synchronise and return the seconds since ``begin``."""
        ...


class HostTimer:
    def __init__(self, synchronize: Callable[[], None]) -> None:
        self._synchronize = synchronize
        self._start = 0

    def begin(self) -> None:
        self._start = time.perf_counter_ns()

    def end(self) -> float:
        self._synchronize()
        return (time.perf_counter_ns() - self._start) * 1e-9


class CudaEventTimer:
    """Device time between two CUDA events recorded on ``stream``: the stream the engine queues its
    work on (its ``stream()``), so the events bracket exactly that work, whichever library issues it."""

    def __init__(self, stream: Any, synchronize: Callable[[], None]) -> None:
        import torch

        self._stream = stream
        self._start = torch.cuda.Event(enable_timing=True)
        self._stop = torch.cuda.Event(enable_timing=True)
        self._synchronize = synchronize

    def begin(self) -> None:
        self._start.record(self._stream)

    def end(self) -> float:
        self._stop.record(self._stream)
        self._stop.synchronize()
        self._synchronize()
        return self._start.elapsed_time(self._stop) * 1e-3


@dataclass
class Measurement:
    samples_s: np.ndarray
    warmup_iters: int
    warmup_s: float
    measured_s: float
    #: per timed call, host seconds until ``call()`` returned, and until the timer had synchronised
    launch_s: np.ndarray | None = None
    host_call_s: np.ndarray | None = None

    @classmethod
    def joined(cls, parts: list[Measurement]) -> Measurement:
        """One measurement of several rounds of the same calls: their samples in order, their counts summed."""

        def concatenated(name: str) -> np.ndarray | None:
            arrays = [getattr(p, name) for p in parts]
            return None if any(a is None for a in arrays) else np.concatenate(arrays)

        return cls(
            np.concatenate([p.samples_s for p in parts]),
            sum(p.warmup_iters for p in parts),
            sum(p.warmup_s for p in parts),
            sum(p.measured_s for p in parts),
            concatenated("launch_s"),
            concatenated("host_call_s"),
        )

    @property
    def launch_share(self) -> float | None:
        """Median share of a call's host time spent before ``call()`` returned (None without samples)."""
        if self.launch_s is None or self.host_call_s is None or not self.launch_s.size:
            return None
        return float(np.median(self.launch_s / np.maximum(self.host_call_s, 1e-12)))


def measure_calls(
    call: Callable[[], Any],
    timer: Timer,
    warmup_s: float,
    min_time_s: float,
    min_iters: int,
) -> Measurement:
    """Run ``call`` for at least one warm-up iteration and ``warmup_s`` seconds, then time calls until
    at least ``min_iters`` calls and ``min_time_s`` seconds of measuring have passed."""
    if min_iters < 1:
        raise ValueError("min_iters must be >= 1")
    start = time.perf_counter()
    warmup_iters = 0
    while warmup_iters == 0 or time.perf_counter() - start < warmup_s:
        timer.begin()
        call()
        timer.end()
        warmup_iters += 1
    warmup_elapsed = time.perf_counter() - start

    samples: list[float] = []
    launched: list[int] = []
    host: list[int] = []
    clock = time.perf_counter_ns
    start = time.perf_counter()
    while len(samples) < min_iters or time.perf_counter() - start < min_time_s:
        t0 = clock()
        timer.begin()
        call()
        t1 = clock()
        samples.append(timer.end())
        host.append(clock() - t0)
        launched.append(t1 - t0)
    return Measurement(
        np.asarray(samples),
        warmup_iters,
        warmup_elapsed,
        time.perf_counter() - start,
        np.asarray(launched, dtype=np.float64) * 1e-9,
        np.asarray(host, dtype=np.float64) * 1e-9,
    )
