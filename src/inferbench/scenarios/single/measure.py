"""The single-call scenario: calls timed one at a time, at two boundaries, under the exclusive machine lock.

- ``device``: one ``run()`` on inputs already staged where the engine computes, output left there.
  On a GPU it is the time between two CUDA events recorded on the stream the engine computes on (its
  ``stream()``: PyTorch's current stream, ONNX Runtime's user compute stream, TensorRT's), for every
  GPU engine alike, with the next call queued while the device runs this one (the device's time
  for the call; inferbench.scenarios.timing.CudaEventTimer); on the CPU, and for an engine that
  queues no GPU work (no stream: the no-op engine), the host clock after ``synchronize()``.
- ``end_to_end``: host arrays in, a host float32 array out: ``stage``, ``run`` and ``to_numpy``,
  on the host clock after synchronising. What a caller holding host data waits for.

The two boundaries' calls alternate in rounds (``ROUNDS`` of each, ordered ABBA), so both see the same
host: timed one after the other, a host-bound cell's drift could put its end-to-end p50 below its
device p50.

An engine whose ``stage`` leaves the inputs on the host (ONNX Runtime without IO binding, a training
epoch reading its dataset) has no device boundary of its own: its cell times ``end_to_end`` only, and
its record says so (``timing``). On a GPU the scenario also measures whether ``run`` returns before the
device is done (inferbench.trackers.bound; a call that returns host arrays has waited by construction)
and, from that and NVML, who set the pace.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from inferbench.core.stats import latency_stats, with_fast_phase_p50
from inferbench.machine.host_partition import measuring
from inferbench.scenarios.prepare import Measured, PreparedCell
from inferbench.scenarios.timing import CudaEventTimer, HostTimer, Measurement, measure_calls
from inferbench.trackers import memory
from inferbench.trackers.bound import classify, probe_launches_async
from inferbench.trackers.gpu_telemetry import GpuTelemetry
from inferbench.trackers.host_telemetry import HostWindow

#: what the device boundary times, by its clock; ``{run}`` is the engine's own account of one run()
DEVICE_BOUNDARY = {
    "cuda_events": "GPU time between CUDA events recorded on the stream the engine computes on, around one "
    "run() on inputs already on the device, the next call queued while the device runs this one (the host's "
    "issuing enters only where it is slower than the device): {run}",
    "host": "host clock around one run() and its synchronisation, on inputs already staged: {run}",
}
#: rounds of each boundary's calls, alternating device, end to end, end to end, device, ...
ROUNDS = 4
END_TO_END = (
    "host arrays in, a host float32 array out: staging, one run() ({run}) and the copy back, timed on the "
    "host clock after synchronising"
)
#: the end-to-end boundary of an engine that overlaps its copies (``Engine.overlaps_copies``)
PIPELINED_END_TO_END = (
    "host arrays in, a host float32 array out, as a server's pipelined loop: each call runs the batch staged "
    "during the call before ({run}), stages the next batch on a CUDA stream of its own while this one "
    "computes, and copies the output back; timed on the host clock per call, so the time per call of the "
    "loop, with the copy in hidden behind the compute where it is shorter (not one request's latency)"
)


def pipelined(
    run: Callable[[Any], Any], stage_next: Callable[[], Any], to_numpy: Callable[[Any], Any]
) -> Callable[[], Any]:
    """End-to-end calls as a server's pipelined loop: a call runs what the call before staged, then stages
    the next batch (``stage_next``: on a stream of its own, so the copy in overlaps the compute just
    queued), then brings its output back. The first batch is staged here, before any timed call."""
    staged = [stage_next()]

    def call() -> Any:
        current = staged[0]  # held until the output is back: its memory is not reused while it is read
        output = run(current)
        staged[0] = stage_next()
        return to_numpy(output)

    return call


def copy_stream_staging(engine: Any, host_batches: Iterator[dict[str, Any]]) -> Callable[[], Any]:
    """``engine.stage`` of the next host batch on a CUDA stream of the scenario's own (same thread)."""
    import torch

    copy_stream = torch.cuda.Stream()

    def stage_next() -> Any:
        with torch.cuda.stream(copy_stream):
            return engine.stage(next(host_batches))  # it waits for its own stream's copies only

    return stage_next


def measure(cell: PreparedCell) -> Measured:
    """One cell of calls timed one at a time; a call processes the cell's batch."""
    return time_calls(cell, items_per_call=cell.key.batch_size)


@dataclass(frozen=True)
class Boundaries:
    """What a cell times: its own boundary's call, timer and clock (the device where the engine stages its
    inputs there, else end to end), and the end-to-end call from host arrays to host arrays."""

    own_call: Callable[[], Any]
    own_timer: Any
    boundary: str  # device or end_to_end
    clock: str  # cuda_events or host
    description: str
    #: whether run() only queues work (then its launches tell who sets the pace); None on the CPU
    launches_async: bool | None
    end_to_end_call: Callable[[], Any]
    end_to_end_description: str
    host_clock: HostTimer


def boundaries(cell: PreparedCell) -> Boundaries:
    """The cell's calls at its boundaries (see the module's docstring)."""
    engine, gpu = cell.engine, cell.key.device == "cuda"
    host_batches = itertools.cycle(cell.batches)
    host_clock = HostTimer(engine.synchronize)
    if gpu and engine.overlaps_copies:
        end_to_end_description = PIPELINED_END_TO_END.format(run=engine.run_description)
        end_to_end_call = pipelined(engine.run, copy_stream_staging(engine, host_batches), engine.to_numpy)
    else:
        end_to_end_description = END_TO_END.format(run=engine.run_description)

        def end_to_end_call() -> Any:
            return engine.to_numpy(engine.run(engine.stage(next(host_batches))))

    if not engine.staged_on_device:
        # a call that returns host arrays has waited for the device by construction: nothing to probe
        launches = False if gpu else None
        e2e = (end_to_end_call, end_to_end_description, host_clock)
        return Boundaries(end_to_end_call, host_clock, "end_to_end", "host", end_to_end_description, launches, *e2e)
    staged = itertools.cycle([engine.stage(batch) for batch in cell.batches])

    def device_call() -> Any:
        return engine.run(next(staged))

    # events bracket the work an engine queues on its stream; one that queues none (no stream: the no-op
    # engine) is timed on the host clock
    stream = engine.stream() if gpu else None
    clock = "cuda_events" if stream is not None else "host"
    own_timer = CudaEventTimer(stream, engine.synchronize) if stream is not None else host_clock
    launches_async = probe_launches_async(device_call, stream, engine.synchronize) if gpu else None
    description = DEVICE_BOUNDARY[clock].format(run=engine.run_description)
    e2e = (end_to_end_call, end_to_end_description, host_clock)
    return Boundaries(device_call, own_timer, "device", clock, description, launches_async, *e2e)


def timed_rounds(
    cell: PreparedCell, calls: Boundaries, telemetry: GpuTelemetry | None, host: HostWindow
) -> tuple[Measurement, Measurement | None, list[float], dict[str, Any]]:
    """Both boundaries timed in rounds ordered device, end to end, end to end, device, ... (ABBA), so that
    the host's drift (a host-bound cell moves by tens of percent within seconds) reaches both alike and
    cancels where it is steady; the GPU's telemetry covers the own boundary's rounds only. Returns the own
    boundary's calls, the end-to-end ones (None where the own boundary is end to end), the window and what
    the loop held while timing."""
    settings = cell.settings
    rounds = ROUNDS if calls.boundary == "device" else 1
    per_round_s, per_round_calls = settings.min_time_s / rounds, -(-settings.min_iters_per_process // rounds)
    own_rounds: list[Measurement] = []
    e2e_rounds: list[Measurement] = []

    def own_round() -> None:
        warmup_s = 0.0 if own_rounds else settings.warmup_s  # later rounds: one untimed call each
        with telemetry or contextlib.nullcontext():
            own_rounds.append(measure_calls(calls.own_call, calls.own_timer, warmup_s, per_round_s, per_round_calls))

    def end_to_end_round() -> None:  # the engine is warm: one untimed call warms the staging path
        e2e_rounds.append(measure_calls(calls.end_to_end_call, calls.host_clock, 0.0, per_round_s, per_round_calls))

    in_order = (own_round, end_to_end_round) if calls.boundary == "device" else (own_round,)
    with measuring(cell.lock, cell.key.device, settings.cpu_affinity) as held, host:
        window_start = time.time()
        for index in range(rounds):
            for timed_round in in_order if index % 2 == 0 else reversed(in_order):
                timed_round()
        window = [window_start, time.time()]
    return Measurement.joined(own_rounds), Measurement.joined(e2e_rounds) if e2e_rounds else None, window, held


def time_calls(cell: PreparedCell, items_per_call: int) -> Measured:
    """Time the engine's calls at its boundaries (see the module's docstring); a call processes
    ``items_per_call`` items (throughput counts them)."""
    gpu = cell.key.device == "cuda"
    calls = boundaries(cell)
    telemetry = GpuTelemetry.for_cuda_device() if gpu else None
    if gpu:
        memory.reset_gpu_peak()
    host = HostWindow()
    result, end_to_end, window, held = timed_rounds(cell, calls, telemetry, host)

    # the p50 of the calls the host ran at its fast pace (core.stats.fast_phase), the tail every call's
    stats = with_fast_phase_p50(latency_stats(result.samples_s, items_per_call), result.samples_s)
    e2e_samples = end_to_end.samples_s if end_to_end else result.samples_s
    e2e_stats = with_fast_phase_p50(latency_stats(e2e_samples, items_per_call), e2e_samples) if end_to_end else stats
    # the telemetry window holds the warm-up calls too: energy is shared among all their items
    gpu_summary = telemetry.summary(items_per_call * (result.warmup_iters + stats["n_iters"])) if telemetry else None
    fields = {
        "timing": calls.boundary,
        "timing_description": calls.description,
        "clock": calls.clock,
        "items_per_call": items_per_call,
        "input_batches": cell.settings.input_batches,
        **{k: stats[k] for k in ("latency_ms", "latency_ci95_ms", "cv", "throughput_per_s", "n_iters")},
        "warmup_iters": result.warmup_iters,
        "measured_s": result.measured_s,
        "measured_windows_unix": [window],
        "measuring": held,
        "memory_mb": {"gpu_process_peak_nvml": gpu_summary["process_peak_mb"] if gpu_summary else None},
        "gpu_telemetry": gpu_summary,
        "host_telemetry": {**host.summary, "fast_phase_share": stats["fast_phase_share"]},
        "bound": pace(result, gpu_summary, calls.launches_async) if gpu else None,
        "end_to_end": {
            "description": calls.end_to_end_description,
            "clock": "host",
            **{k: e2e_stats[k] for k in ("latency_ms", "latency_ci95_ms", "cv", "n_iters", "throughput_per_s")},
        },
    }
    return Measured(fields, {"device": result.samples_s, "end_to_end": e2e_samples})


def pace(result: Measurement, gpu_summary: dict[str, Any] | None, launches_async: bool | None) -> dict[str, Any]:
    """Who set a GPU cell's pace: the host launching its kernels, or the device (inferbench.trackers.bound)."""
    busy = gpu_summary["gpu_busy_pct"] if gpu_summary else None
    bound_class, signal = classify(result.launch_share, busy, bool(launches_async))
    return {
        "class": bound_class,
        "signal": signal,
        "launch_share": result.launch_share,
        "gpu_busy_pct": busy,
        "launches_async": launches_async,
    }
