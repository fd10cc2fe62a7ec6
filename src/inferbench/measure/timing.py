"""The timing loop: warm up, then measure until both a minimum time and a minimum count are reached.

Each timed call is followed by synchronisation (single-stream semantics: the next call starts only
after the previous result exists). Host-clock timers read ``perf_counter_ns`` after the engine's
``synchronize``; CUDA-event timers record events around the call on the current stream.
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
    """Device time between two events on the current CUDA stream."""

    def __init__(self, synchronize: Callable[[], None]) -> None:
        import torch

        self._start = torch.cuda.Event(enable_timing=True)
        self._stop = torch.cuda.Event(enable_timing=True)
        self._synchronize = synchronize

    def begin(self) -> None:
        self._start.record()

    def end(self) -> float:
        self._stop.record()
        self._stop.synchronize()
        self._synchronize()
        return self._start.elapsed_time(self._stop) * 1e-3


def make_timer(kind: str, synchronize: Callable[[], None]) -> Timer:
    if kind == "cuda_events":
        return CudaEventTimer(synchronize)
    if kind == "host":
        return HostTimer(synchronize)
    raise ValueError(f"unknown timer {kind!r}")


@dataclass
class Measurement:
    samples_s: np.ndarray
    warmup_iters: int
    warmup_s: float
    measured_s: float


def measure(
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
    start = time.perf_counter()
    while len(samples) < min_iters or time.perf_counter() - start < min_time_s:
        timer.begin()
        call()
        samples.append(timer.end())
    return Measurement(np.asarray(samples), warmup_iters, warmup_elapsed, time.perf_counter() - start)
