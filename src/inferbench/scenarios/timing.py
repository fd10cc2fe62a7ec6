"""The timing loop: warm up, then measure until both a minimum time and a minimum count are reached.

Calls run one after another (single-stream semantics: a call starts only after the previous result
exists). Host-clock timers read ``perf_counter_ns`` after the engine's ``synchronize``, one call at a
time. CUDA-event timers record events around the call on the stream the engine computes on, and queue
the next call while the device runs this one, as trtexec's "GPU compute time" does: on the device each
call still starts only when the previous one has ended, but the host's time to issue it no longer falls
inside its window unless the host is slower than the device (``CudaEventTimer``). Which timer a
boundary uses is the scenario's choice (inferbench.scenarios.single.measure), never the engine's.

Besides the timer's sample, every call's host time is split in two: until ``call()`` returns (the
host issuing the work) and until the next call begins (the host's whole cycle, waiting included).
Where an engine's ``run`` returns before the device has finished (measured: inferbench.trackers.bound),
the first part's share says who sets the pace: near 1, the device waits for the host's launches; well
below, the host waits for the device.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from inferbench.machine.watchdog import beat


class Timer(Protocol):
    def begin(self) -> None:
        """Just before a call is issued."""
        ...

    def end(self) -> float | None:
        """Just after it was issued: its seconds, or None while it is still in flight (its sample then
        comes with a later ``end`` or with ``flush``, in the order of the calls)."""
        ...

    def flush(self) -> list[float]:
        """Wait for the calls still in flight and return their seconds."""
        ...


class HostTimer:
    """Host clock around one call and its synchronisation: the caller's wait, one call at a time."""

    def __init__(self, synchronize: Callable[[], None]) -> None:
        self._synchronize = synchronize
        self._start = 0

    def begin(self) -> None:
        self._start = time.perf_counter_ns()

    def end(self) -> float:
        self._synchronize()
        return (time.perf_counter_ns() - self._start) * 1e-9

    def flush(self) -> list[float]:
        return []


class CudaEventTimer:
    """Device time between two CUDA events recorded on ``stream``, the stream the engine queues its work
    on (its ``stream()``), so the events bracket exactly that work, whichever library issues it.

    The next call is queued while the device runs this one (one call in flight): its start event fires
    when this call's work has ended, so each window holds the device's time for its call. Timed one call
    at a time, the window also held the host issuing the call, from the start event to its last launch,
    which depends on the process's vCPU: a device-bound cell then moved from one process to the next by
    its host's issuing time (docs/results/h100/default_leases).
    Where the host is slower than the device (a host-bound call), the device idles before each start
    event and the window is the host's issuing again, as it should be."""

    def __init__(self, stream: Any, synchronize: Callable[[], None], event: Callable[[], Any] | None = None) -> None:
        if event is None:
            import torch

            def event() -> Any:
                return torch.cuda.Event(enable_timing=True)

        self._stream = stream
        # two pairs: the call being issued and the one in flight before it
        self._events = [(event(), event()) for _ in range(2)]
        self._calls = 0
        self._in_flight: tuple[Any, Any] | None = None
        self._synchronize = synchronize

    def begin(self) -> None:
        self._events[self._calls % 2][0].record(self._stream)

    def end(self) -> float | None:
        start, stop = self._events[self._calls % 2]
        stop.record(self._stream)
        self._calls += 1
        previous, self._in_flight = self._in_flight, (start, stop)
        return None if previous is None else _elapsed_s(*previous)

    def flush(self) -> list[float]:
        if self._in_flight is None:
            return []
        last, self._in_flight = self._in_flight, None
        sample = _elapsed_s(*last)
        self._synchronize()
        return [sample]


def _elapsed_s(start: Any, stop: Any) -> float:
    stop.synchronize()
    return start.elapsed_time(stop) * 1e-3


@dataclass
class Measurement:
    samples_s: np.ndarray
    warmup_iters: int
    warmup_s: float
    measured_s: float
    #: per timed call, host seconds until ``call()`` returned, and until the next call began
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


def warm_up(call: Callable[[int], Any], warmup_s: float) -> int:
    """Every scenario's warm-up: ``call(round)`` again until ``warmup_s`` seconds have passed, once at least;
    returns how many rounds ran. Each round tells the watchdog the process is alive."""
    start = time.perf_counter()
    rounds = 0
    while rounds == 0 or time.perf_counter() - start < warmup_s:
        call(rounds)
        rounds += 1
        beat()
    return rounds


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

    def warm_call(_: int) -> None:
        timer.begin()
        call()
        timer.end()

    start = time.perf_counter()
    warmup_iters = warm_up(warm_call, warmup_s)
    timer.flush()
    warmup_elapsed = time.perf_counter() - start

    samples: list[float] = []
    began: list[int] = []  # host clock as each call began
    launched: list[int] = []
    clock = time.perf_counter_ns
    start = time.perf_counter()
    while len(began) < min_iters or time.perf_counter() - start < min_time_s:
        t0 = clock()
        timer.begin()
        call()
        t1 = clock()
        sample = timer.end()
        if sample is not None:
            samples.append(sample)
        began.append(t0)
        launched.append(t1 - t0)
        beat()  # progress for the watchdog: a store to shared memory, outside the timed span
    samples.extend(timer.flush())
    began.append(clock())
    return Measurement(
        np.asarray(samples),
        warmup_iters,
        warmup_elapsed,
        time.perf_counter() - start,
        np.asarray(launched, dtype=np.float64) * 1e-9,
        np.diff(np.asarray(began, dtype=np.float64)) * 1e-9,
    )
