"""Serving scenarios through MLPerf LoadGen: how many queries per second an engine serves, and at what
latency, when queries arrive on their own rather than one call after another.

LoadGen (``mlcommons-loadgen``) generates the queries of a scenario, times each from issue to
completion and judges the run: ``server`` sends single-sample queries with Poisson arrivals at a
target QPS and is valid only if the p99 latency stays within the bound (with its early-stopping
estimate where the run is short), its minimum duration and query count are met; ``offline`` sends
every query at once and reports the samples per second. The system under test here is a dynamic
batcher in front of one engine: a server thread takes the waiting queries, up to ``max_batch``,
waiting at most ``max_queue_delay_ms`` after the first for more (0, the default: none, so a batch runs
as soon as the engine is free with every query waiting then, as vLLM's and TensorRT-LLM's schedulers
do; more: Triton's dynamic batcher, which waits even with the engine idle), gathers their samples from
the query sample library (the workload's seeded inputs), runs them end to end (host arrays in, host
array out) and completes the queries. An engine that takes any batch runs the batch as it is; one fixed
to its prepared shapes, or slower at others (a CUDA graph, a compiled or built engine, ONNX Runtime's
CUDA provider: ``Engine.takes_any_batch`` says which, and why) is
prepared at a ladder of batch sizes (1, 2, 4, ... and the largest, as TensorRT's optimisation profiles
and vLLM's captured graph sizes) and the batch is padded to the next rung, not to the largest. On a GPU
the batch is gathered into pinned (page-locked) host buffers, so that its copy in is a direct DMA; and
where the engine can stage apart from its run (``Engine.stages_apart``) and ``serving.overlap_copies``
is on, two server threads take turns, staging on a CUDA stream apart from the compute: batch N+1's copy in
overlaps batch N's compute, as a server's input pipeline does (Triton's, with pinned buffers and a copy
stream).

The harness's own share: after the cell's answer, the no-op engine is served through the same path
(batcher, padding, the gather from the library, LoadGen's callbacks) at the answer's target, and its
latencies are kept beside the engine's (``harness``).

The cell's boundary: each query timed by LoadGen from its issue to its completion (waiting in the
batcher's queue, then its batch staged from host arrays, run and brought back to the host).

The latency bound search: a server cell without a fixed target QPS searches the target on a log scale
below the engine's capacity at ``max_batch`` (batch over the end-to-end time of one call): half of it
first, a quarter as much after each invalid run until one is valid, then geometric bisection, one
LoadGen run per step; the result is the highest target whose run was valid.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import queue
import shutil
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from inferbench.core.queueing import md1_rate_within
from inferbench.core.stats import reported_percentiles
from inferbench.engines.registry import harness_engine, load_engine_class
from inferbench.machine.host_partition import measuring
from inferbench.machine.watchdog import beat
from inferbench.models.registry import make_inputs
from inferbench.scenarios.prepare import Measured, PreparedCell, prepare_engine
from inferbench.scenarios.serving import SECTION
from inferbench.scenarios.serving.settings import ServingSettings, serving_settings
from inferbench.trackers.host_telemetry import HostWindow

#: a server run's latency percentile that the bound applies to (MLPerf's default for most models)
BOUND_PERCENTILE = 0.99
#: an offline run is sized for this multiple of the back-to-back capacity (LoadGen: queries = expected
#: QPS x minimum duration; finishing early makes the run invalid)
OFFLINE_OVERSIZE = 2.0
#: the server search steps down by this factor per invalid run until a run is valid (a log-scale
#: bracket: a Python batcher's or a slow tail's QPS within the bound can be far below the capacity)
BRACKET_STEP = 4.0
#: Python's GIL hand-over interval while LoadGen runs (default 5 ms): LoadGen's issuing thread, the
#: batcher and the completions take turns with the GIL, and each wait would otherwise add up to 5 ms
SWITCH_INTERVAL_S = 0.0002
#: the server search ends once its highest valid and lowest invalid targets are this close (ratio)
BRACKET_RESOLUTION = 1.25
#: below serving.min_load_share of the capacity, a server search runs no target whose run lasts longer
LIGHT_RUN_S = 30.0
#: LoadGen's log files kept beside the record (the trace and accuracy logs stay off or empty)
KEPT_LOGS = ("mlperf_log_summary.txt", "mlperf_log_detail.txt")


def batch_ladder(max_batch: int) -> list[int]:
    """The batch sizes an engine fixed to its prepared shapes is prepared at for serving: 1, 2, 4, ...
    below the largest batch, and the largest."""
    rungs = [1]
    while rungs[-1] * 2 < max_batch:
        rungs.append(rungs[-1] * 2)
    return [*rungs, max_batch] if max_batch > 1 else rungs


def padded_size(queries: int, rungs: Sequence[int] | None) -> int:
    """The batch size ``queries`` run as: as many where the engine takes any batch (``rungs`` None),
    else the smallest rung that holds them."""
    if rungs is None:
        return queries
    fitting = [rung for rung in rungs if rung >= queries]
    if not fitting:
        raise ValueError(f"a batch of {queries} queries is larger than the largest prepared batch {max(rungs)}")
    return min(fitting)


@dataclass(frozen=True)
class BatchPath:
    """How a batch of sample rows is served: ``stage(rows)`` (gather and copy in), ``run(staged)`` (the
    engine's call: queueing the work on the device, or all of it for an engine that waits) and
    ``fetch(ran)`` (the output to the host, waiting for the device; None: ``run`` does it), timed apart
    so that a slow batch says which of the two it was. ``overlapped``: the batcher stages the next batch
    on a second thread while this one runs; called directly, a path does it all in series."""

    stage: Callable[[np.ndarray], Any]
    run: Callable[[Any], Any]
    overlapped: bool = False
    fetch: Callable[[Any], None] | None = None

    def __call__(self, rows: np.ndarray) -> None:
        ran = self.run(self.stage(rows))
        if self.fetch is not None:
            self.fetch(ran)

    @classmethod
    def serial(cls, run_batch: Callable[[np.ndarray], None]) -> BatchPath:
        """A path that stages nothing apart: ``run_batch(rows)`` does it all."""
        return cls(stage=lambda rows: rows, run=run_batch)


class Gather:
    """The rows of a batch gathered from the query sample library into one reused host buffer per
    input and batch size; ``pinned`` (a GPU cell): page-locked buffers, whose copy to the device is a
    direct DMA instead of a copy through the driver's staging buffer. A buffer is reused once the
    batch's ``stage`` has returned (its copy in has finished)."""

    def __init__(self, library: dict[str, np.ndarray], pinned: bool) -> None:
        self.library, self.pinned = library, pinned
        self.buffers: dict[tuple[str, int], np.ndarray] = {}

    def _buffer(self, name: str, rows: int) -> np.ndarray:
        if (name, rows) not in self.buffers:
            array = self.library[name]
            shape = (rows, *array.shape[1:])
            if self.pinned:
                import torch

                dtype = torch.from_numpy(array[:0]).dtype
                self.buffers[name, rows] = torch.empty(shape, dtype=dtype, pin_memory=True).numpy()
            else:
                self.buffers[name, rows] = np.empty(shape, dtype=array.dtype)
        return self.buffers[name, rows]

    def __call__(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        return {
            name: np.take(array, rows, axis=0, out=self._buffer(name, len(rows)))
            for name, array in self.library.items()
        }


def engine_path(pick: Callable[[int], Any], library: dict[str, np.ndarray], device: str, overlapped: bool) -> BatchPath:
    """How a serving cell's batches reach an engine, ``pick(batch size)``: the rows gathered into reused
    host buffers (page-locked on a GPU), staged by the engine, run, and the output brought back to the host.
    ``overlapped`` on a GPU: staged on a CUDA stream of its own, so that the copy in overlaps the compute
    of the batch before. The harness floor takes the same path through the no-op engine."""
    gather = Gather(library, pinned=device == "cuda")
    copy_stream = None
    if overlapped and device == "cuda":
        import torch

        copy_stream = torch.cuda.Stream()

    def stage(rows: np.ndarray) -> tuple[Any, Any]:
        chosen = pick(len(rows))
        with torch.cuda.stream(copy_stream) if copy_stream is not None else contextlib.nullcontext():
            return chosen, chosen.stage(gather(rows))

    def run(staged: tuple[Any, Any]) -> tuple[Any, Any]:
        chosen, inputs = staged
        return chosen, chosen.run(inputs)

    def fetch(ran: tuple[Any, Any]) -> None:
        chosen, output = ran
        chosen.to_numpy(output)

    return BatchPath(stage, run, overlapped, fetch)


def harness_baseline(device: str, specs: Sequence[Any], example: dict[str, np.ndarray]) -> Any:
    """The harness's baseline engine (the no-op one), prepared: what the harness floor serves."""
    impl = harness_engine()
    harness = load_engine_class(impl)(device, "fp32", 0, {"engine": impl})
    harness.prepare(None, tuple(specs), example)
    return harness


class DynamicBatcher:
    """The system under test: queries wait in a queue; a server thread forms a batch of up to
    ``max_batch`` (waiting at most ``max_queue_delay_s`` after its first query, blocked on the queue or
    spinning on it: ``wait``), pads it to its rung (``rungs``; None: no padding), serves it through
    ``path`` (the sample indices of its rows) and completes every query of the batch with LoadGen.

    An overlapped path has two such threads, passing two locks hand over hand: a thread forms and stages
    a batch holding the ``forming`` lock, takes the ``running`` lock before it lets ``forming`` go, and
    runs. So while one thread runs batch N the other forms and stages batch N+1 and waits to run it; at
    most one staged batch waits, batches run one at a time in the order they were formed, and the thread
    that formed a batch also runs and completes it: a query that finds the engine idle passes no thread
    but the one that took it (a worker handing batches to a runner thread added a wake-up per query, and
    its harness p99 grew with the load). The price of
    overlapping: batch N+1 is formed when batch N starts, not when it ends, so under heavy load batches
    are smaller than in series (``serving.overlap_copies: false`` measures the other side of that trade)."""

    def __init__(
        self,
        path: BatchPath | Callable[[np.ndarray], None],
        max_batch: int,
        max_queue_delay_s: float,
        complete: Callable[[list[int]], None],
        rungs: Sequence[int] | None = None,
        wait: str = "block",
    ) -> None:
        if wait not in ("block", "spin"):
            raise ValueError(f"serving.batcher_wait is {wait!r}: block or spin")
        self.path = path if isinstance(path, BatchPath) else BatchPath.serial(path)
        self.max_batch, self.max_queue_delay_s = max_batch, max_queue_delay_s
        self.complete, self.rungs, self.wait = complete, rungs, wait
        self.waiting: queue.SimpleQueue[tuple[int, int, float] | None] = queue.SimpleQueue()
        self.batch_sizes: list[int] = []  # queries per batch
        self.run_sizes: list[int] = []  # rows per batch run, padding included
        # per batch, seconds: where a slow query's time went (BATCH_PHASES)
        self.phases: list[tuple[float, ...]] = []
        # per query, seconds from the issue callback's arrival to the call that completes it: LoadGen's
        # latency less what LoadGen's issuing thread lost before the callback ran (e.g. waiting for the GIL)
        self.query_latencies: list[float] = []
        self.error: BaseException | None = None
        self.forming, self.running = threading.Lock(), threading.Lock()
        self.stopping = False  # the stop sentinel was taken: the other thread ends too
        servers = 2 if self.path.overlapped else 1
        self.threads = [
            threading.Thread(target=self._serve, name=f"inferbench-server-{n}", daemon=True) for n in range(servers)
        ]
        for thread in self.threads:
            thread.start()

    def issue(self, query_samples: list[Any]) -> None:
        """LoadGen's issue callback: queue each query (its id, its sample's index, when it arrived)."""
        now = time.perf_counter()
        for sample in query_samples:
            self.waiting.put((sample.id, sample.index, now))

    def stop(self) -> None:
        self.waiting.put(None)
        for thread in self.threads:
            thread.join()

    def _served(self, step: Callable[[Any], Any], argument: Any) -> Any:
        """``step(argument)``, unless an earlier step failed; a failure is kept for run_loadgen to raise once
        LoadGen has ended (queries are then completed unserved: LoadGen must end)."""
        if self.error is None:
            try:
                return step(argument)
            except BaseException as error:
                self.error = error
        return None

    def _take(self, deadline: float | None) -> tuple[int, int, float] | None:
        """The next waiting query (None: stop), waiting until ``deadline`` (None: for ever) blocked on
        the queue or spinning on it; queue.Empty once the deadline has passed."""
        if self.wait == "block":
            return self.waiting.get(timeout=None if deadline is None else max(0.0, deadline - time.perf_counter()))
        while True:
            try:
                return self.waiting.get_nowait()
            except queue.Empty:
                if deadline is not None and time.perf_counter() >= deadline:
                    raise
                time.sleep(0)  # hand the GIL to LoadGen's issuing thread

    def _form(self) -> list[tuple[int, int, float]] | None:
        """The next batch's queries (None: stop): the first waited for, then those arriving until the
        first's deadline, up to ``max_batch``."""
        if self.stopping or (first := self._take(None)) is None:
            self.stopping = True
            return None
        batch = [first]
        deadline = first[2] + self.max_queue_delay_s
        while len(batch) < self.max_batch:
            try:
                item = self._take(deadline)
            except queue.Empty:
                break
            if item is None:
                self.stopping = True  # this batch is served, then both threads end
                break
            batch.append(item)
        return batch

    def _serve(self) -> None:
        while True:
            with self.forming:
                batch = self._form()
                if batch is None:
                    return
                formed = time.perf_counter()
                rows = np.resize(np.array([index for _, index, _ in batch]), padded_size(len(batch), self.rungs))
                self.batch_sizes.append(len(batch))
                self.run_sizes.append(len(rows))
                staged = self._served(self.path.stage, rows)  # padded with the batch's own rows
                self.running.acquire()  # before forming is let go: batches run in the order they were formed
            started = called = time.perf_counter()
            try:
                output = self._served(self.path.run, staged)
                called = time.perf_counter()
                if self.path.fetch is not None:
                    self._served(self.path.fetch, output)
            finally:
                self.running.release()
            fetched = time.perf_counter()
            # up to the completion call: LoadGen stamps a query inside it, so this never exceeds LoadGen's
            self.query_latencies.extend(fetched - arrived for _, _, arrived in batch)
            self.complete([query_id for query_id, _, _ in batch])
            done = time.perf_counter()
            moments = (batch[0][2], formed, started, called, fetched, done)  # BATCH_PHASES lie between these
            self.phases.append(tuple(end - begin for begin, end in itertools.pairwise(moments)))
            beat()

    def batch_summary(self) -> dict[str, Any]:
        sizes, run = np.asarray(self.batch_sizes or [0]), np.asarray(self.run_sizes or [0])
        return {
            "count": len(self.batch_sizes),
            "mean_size": float(sizes.mean()),
            "max_size": int(sizes.max()),
            "fill": float(sizes.mean() / self.max_batch),
            "rungs": None if self.rungs is None else list(self.rungs),
            "mean_run_size": float(run.mean()),
            "padded_share": float(1 - sizes.sum() / run.sum()) if run.sum() else 0.0,
            **phase_summary(self.phases),
            "query_ms": latency_summary(self.query_latencies),
        }


#: a batch's phases, from its first query's arrival to its completion with LoadGen: ``wait``, its first
#: query in the queue until the batch is formed (queueing behind other batches, the queue delay, and the
#: server thread's wake-up); ``stage``, gathering and copying in (and, overlapped, waiting to run);
#: ``call``, the engine's call (queueing work on the GPU for a CUDA graph or eager PyTorch; all of it for
#: ONNX Runtime, which waits); ``fetch``, the output to the host, waiting for the device; ``complete``,
#: LoadGen's callback
BATCH_PHASES = ("wait", "stage", "call", "fetch", "complete")
#: the share of batches, slowest first by their first query's time, whose phases ``slowest`` averages
SLOWEST_SHARE = 0.01


def phase_summary(phases: Sequence[tuple[float, ...]]) -> dict[str, Any]:
    """Each phase's p50 and p99 over the batches (ms; a percentile from as many batches as the latency
    percentiles need, else None), and ``slowest``: the mean of each phase over the slowest 1% of batches
    (at least one) by their first query's time, and the ``longest`` of them: where a tail's time went."""
    if not phases:
        return {"phases_ms": None, "slowest": None}
    times = np.asarray(phases) * 1e3
    totals = times.sum(axis=1)
    count = max(1, int(len(times) * SLOWEST_SHARE))
    slowest = times[np.argsort(totals)[-count:]].mean(axis=0)
    return {
        "phases_ms": {name: reported_percentiles(times[:, i], ("p50", "p99")) for i, name in enumerate(BATCH_PHASES)},
        "slowest": {"batches": count, "total_ms": float(slowest.sum()), "longest": BATCH_PHASES[int(slowest.argmax())]}
        | {f"{name}_ms": float(slowest[i]) for i, name in enumerate(BATCH_PHASES)},
    }


def latency_summary(latencies_s: Sequence[float]) -> dict[str, float | None] | None:
    """p50, p99 and max of ``latencies_s`` in ms (a percentile only from as many samples as it needs)."""
    if not latencies_s:
        return None
    times = np.asarray(latencies_s) * 1e3
    return reported_percentiles(times, ("p50", "p99")) | {"max": float(times.max())}


def read_loadgen_log(log_dir: Path) -> dict[str, Any]:
    """LoadGen's result from its detail log (``:::MLLOG`` JSON lines): QPS, latency percentiles (ms),
    validity and each of its conditions, the early-stopping verdict, the query count."""
    values: dict[str, Any] = {}
    for line in (log_dir / "mlperf_log_detail.txt").read_text().splitlines():
        if line.startswith(":::MLLOG "):
            entry = json.loads(line.removeprefix(":::MLLOG "))
            values[entry["key"]] = entry["value"]
    percentiles = ("50.00", "90.00", "95.00", "99.00", "99.90")
    latency_ns = {f"p{float(q):g}": f"result_{q}_percentile_latency_ns" for q in percentiles}
    latency_ns |= {k: f"result_{k}_latency_ns" for k in ("mean", "min", "max")}
    latency = {name: values[key] / 1e6 for name, key in latency_ns.items() if key in values}
    scenario = values.get("effective_scenario")
    completed = values.get("result_completed_samples_per_sec", values.get("result_samples_per_second"))
    return {
        "scenario": scenario,
        "valid": values.get("result_validity") == "VALID",
        "validity": values.get("result_validity"),
        "conditions": {
            "latency_within_bound": values.get("result_perf_constraints_met"),
            "min_duration": values.get("result_min_duration_met"),
            "min_queries": values.get("result_min_queries_met"),
            "early_stopping": values.get("early_stopping_met"),
        },
        "early_stopping_met": values.get("early_stopping_met"),
        "early_stopping": (values.get("early_stopping_result") or "").strip() or None,
        "target_qps": values.get("effective_target_qps"),
        "completed_qps": completed,
        "scheduled_qps": values.get("result_scheduled_samples_per_sec"),
        "query_count": values.get("result_query_count", values.get("generated_query_count")),
        "overlatency_query_count": values.get("result_overlatency_query_count"),
        "latency_ms": latency,
        "loadgen": values.get("loadgen_version"),
    }


def why_invalid(result: dict[str, Any]) -> str:
    """LoadGen's conditions that a run did not meet, in words."""
    names = {
        "latency_within_bound": "the p99 latency exceeded the bound",
        "min_duration": "the minimum duration was not reached",
        "min_queries": f"the minimum query count was not reached ({result.get('query_count')} queries)",
        "early_stopping": "early stopping could not confirm the p99 within the bound",
    }
    failed = [text for key, text in names.items() if result["conditions"].get(key) is False]
    return "; ".join(failed) or f"LoadGen's result is {result.get('validity')}"


def run_loadgen(
    scenario: str,
    batcher_factory: Callable[[Callable[[list[int]], None]], DynamicBatcher],
    sample_count: int,
    settings: ServingSettings,
    log_dir: Path,
    target_qps: float,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One LoadGen run of ``scenario`` (``server`` at ``target_qps``, or ``offline`` expecting it),
    logs into ``log_dir``; returns LoadGen's result, with ``host`` (what the host did meanwhile: steal and
    busy shares of its CPU time, this process's context switches), and the batcher's batches."""
    import mlperf_loadgen as lg

    def complete(query_ids: list[int]) -> None:
        lg.QuerySamplesComplete([lg.QuerySampleResponse(query_id, 0, 0) for query_id in query_ids])

    batcher = batcher_factory(complete)
    sut = lg.ConstructSUT(batcher.issue, lambda: None)
    # the samples are in memory already: nothing to load or unload
    qsl = lg.ConstructQSL(sample_count, sample_count, lambda _: None, lambda _: None)
    test = lg.TestSettings()
    test.scenario = lg.TestScenario.Server if scenario == "server" else lg.TestScenario.Offline
    test.mode = lg.TestMode.PerformanceOnly
    test.server_target_qps = test.offline_expected_qps = float(target_qps)
    test.server_target_latency_ns = int(settings.latency_bound_ms * 1e6)
    test.server_target_latency_percentile = BOUND_PERCENTILE
    test.min_duration_ms = int(settings.min_duration_s * 1e3)
    test.max_duration_ms = int(settings.max_duration_s * 1e3)
    test.min_query_count = settings.min_query_count
    log_dir.mkdir(parents=True, exist_ok=True)
    log = lg.LogSettings()
    log.log_output.outdir = str(log_dir)
    log.log_output.copy_summary_to_stdout = False
    log.enable_trace = False
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    # what is alive now (torch, transformers, timm: ~400,000 objects) is left out of the collector's full
    # passes: one would stall every thread for tens of milliseconds in the middle of
    # the run; vLLM freezes after start-up for the same reason. New garbage is still collected
    gc.collect()
    gc.freeze()
    host = HostWindow()
    try:
        with host:
            lg.StartTestWithLogSettings(sut, qsl, test, log)
    finally:
        gc.unfreeze()
        sys.setswitchinterval(switch_interval)
        batcher.stop()
        lg.DestroyQSL(qsl)
        lg.DestroySUT(sut)
    for extra in log_dir.iterdir():
        if extra.name not in KEPT_LOGS:
            extra.unlink()
    if batcher.error is not None:
        raise batcher.error
    return read_loadgen_log(log_dir) | {"host": host.summary}, batcher.batch_summary()


def capacity_qps(
    run_batch: Callable[[np.ndarray], None], max_batch: int, sample_count: int, min_calls: int = 10, min_s: float = 0.2
) -> float:
    """The engine's capacity at ``max_batch``: samples per second of back-to-back batches, end to end
    (the median call of at least ``min_calls`` and ``min_s`` seconds of calls, after one untimed)."""
    indices = np.arange(max_batch) % sample_count
    run_batch(indices)
    times: list[float] = []
    started = time.perf_counter()
    while len(times) < min_calls or time.perf_counter() - started < min_s:
        start = time.perf_counter()
        run_batch(indices)
        times.append(time.perf_counter() - start)
    return max_batch / float(np.median(times))


def next_target(capacity: float, valid: float | None, invalid: float | None) -> float:
    """The server search's next target QPS from the highest valid and the lowest invalid target so far
    (None: no such run yet): half the capacity first; BRACKET_STEP lower after each invalid run until one
    is valid; then the geometric mean of the bracket (the capacity standing in for a missing top)."""
    if valid is None:
        return capacity / 2 if invalid is None else invalid / BRACKET_STEP
    return (valid * (capacity if invalid is None else invalid)) ** 0.5


def measure_serving(
    scenario: str,
    run_batch: BatchPath | Callable[[np.ndarray], None],
    max_batch: int,
    sample_count: int,
    settings: ServingSettings,
    log_dir: Path,
    rungs: Sequence[int] | None = None,
    harness_batch: BatchPath | Callable[[np.ndarray], None] | None = None,
) -> dict[str, Any]:
    """A server or offline cell's LoadGen runs; ``run_batch(indices)`` serves the samples at those
    indices end to end (a batch padded to its rung where ``rungs`` is given; a BatchPath may overlap
    one batch's staging with the previous one's run). Returns what the record keeps under ``serving``:
    ``result`` (the run that answers the cell: the highest valid server QPS, or the offline run),
    ``search`` (every server run), the batches, the capacity, the settings and, with ``harness_batch``
    (the no-op engine's, through the same kind of path), ``harness``: the same path at the answer's target."""
    if log_dir.exists():
        shutil.rmtree(log_dir)  # one cell's logs: a re-run replaces them
    runs = LoadGenRuns(scenario, max_batch, sample_count, settings, log_dir, rungs, harness_batch)
    # back to back, one batch at a time: an overlapped path may serve more (the offline run is sized above it)
    capacity = capacity_qps(run_batch, max_batch, sample_count)
    out: dict[str, Any] = {
        "scenario": scenario,
        "max_batch": max_batch,
        "overlapped": isinstance(run_batch, BatchPath) and run_batch.overlapped,
        "max_queue_delay_ms": settings.max_queue_delay_ms,
        "latency_bound_ms": settings.latency_bound_ms if scenario == "server" else None,
        "bound_percentile": BOUND_PERCENTILE if scenario == "server" else None,
        "capacity_qps": capacity,
        "settings": asdict(settings),
        "logs": log_dir.name,
    }
    if scenario == "offline":
        # LoadGen sizes an offline run from the expected QPS: a run that ends before its minimum duration
        # is invalid, so it is asked for more than the capacity (the batcher may beat single calls)
        expected = OFFLINE_OVERSIZE * capacity
        result, batches = runs.run("offline", run_batch, expected, "offline")
        return out | {"result": result, "batches": batches, "search": None, "harness": runs.harness(expected)}
    # no query can be faster than one batch: a bound below it needs no LoadGen run to be out of reach
    batch_ms = max_batch / capacity * 1e3
    if settings.target_qps is None and batch_ms > settings.latency_bound_ms:
        bound = settings.latency_bound_ms
        why = f"one batch of {max_batch} takes {batch_ms:.3g} ms end to end, above the {bound:g} ms bound"
        return out | {"result": None, "batches": None, "search": [], "qps_at_bound": None, "unreachable": why}
    searched = runs.server_search(run_batch, capacity)
    result, batches = searched.pop("answer")
    return (
        out
        | searched
        | {
            "result": result,
            "batches": batches,
            "harness": runs.harness(result["target_qps"]) if result else None,
            "queueing": queueing_limit(batches, max_batch, settings.latency_bound_ms, out["overlapped"]),
        }
    )


@dataclass
class LoadGenRuns:
    """The LoadGen runs of one serving cell, each through a dynamic batcher of the serving path given, with its
    logs in a folder of the cell's ``log_dir``."""

    scenario: str
    max_batch: int
    sample_count: int
    settings: ServingSettings
    log_dir: Path
    rungs: Sequence[int] | None
    harness_batch: BatchPath | Callable[[np.ndarray], None] | None

    def run(
        self, scenario: str, serve: BatchPath | Callable[[np.ndarray], None], target: float, logs: str
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """One LoadGen run of ``scenario`` at ``target`` QPS through ``serve``, batched dynamically."""
        settings = self.settings

        def batcher(complete: Callable[[list[int]], None]) -> DynamicBatcher:
            delay_s = settings.max_queue_delay_ms / 1e3
            return DynamicBatcher(serve, self.max_batch, delay_s, complete, self.rungs, settings.batcher_wait)

        return run_loadgen(scenario, batcher, self.sample_count, settings, self.log_dir / logs, target)

    def harness(self, target: float) -> dict[str, Any] | None:
        """The no-op engine through the same path at ``target``: what the harness alone costs a query."""
        if self.harness_batch is None:
            return None
        alone, _ = self.run(self.scenario, self.harness_batch, target, "harness")
        kept = ("target_qps", "completed_qps", "valid", "query_count", "latency_ms", "host")
        return {key: alone[key] for key in kept} | {"logs": f"{self.log_dir.name}/harness"}

    def server_search(self, serve: BatchPath | Callable[[np.ndarray], None], capacity: float) -> dict[str, Any]:
        """A fixed target, or a search on a log scale (the QPS within a bound can be far below the capacity):
        from half the capacity down by BRACKET_STEP until a run is valid, then geometric bisection between the
        highest valid and the lowest invalid target, until the two are within BRACKET_RESOLUTION. Every run
        (``search``), the bracket (``qps_at_bound``, ``lowest_invalid_qps``), why it stopped early where it did
        (``stopped``), and the run that answers (``answer``: result and batches, or Nones)."""
        settings, fixed = self.settings, self.settings.target_qps
        low: float | None = None
        high: float | None = None
        search: list[dict[str, Any]] = []
        best: tuple[dict[str, Any], dict[str, Any]] | None = None
        last: tuple[dict[str, Any], dict[str, Any]] | None = None
        stopped = None
        for step in range(1 if fixed is not None else settings.search_runs):
            if low is not None and high is not None and high / low <= BRACKET_RESOLUTION:
                break
            target = fixed if fixed is not None else next_target(capacity, low, high)
            if fixed is None and (stopped := self.too_light(target, capacity)) is not None:
                break
            last = self.run("server", serve, target, f"server-{step}")
            search.append(self.search_entry(target, *last, f"{self.log_dir.name}/server-{step}"))
            if last[0]["valid"]:
                low, best = target, last
            else:
                high = target
        answer = best or last or (None, None)
        found = {"search": search, "qps_at_bound": low, "lowest_invalid_qps": high, "answer": answer}
        return found | ({"stopped": stopped} if stopped is not None else {})

    def too_light(self, target: float, capacity: float) -> str | None:
        """Why the search goes no lower than ``target``, or None: below it a run could not issue its minimum
        query count within the longest duration, or it lies below min_load_share of the capacity where a run
        would last over LIGHT_RUN_S. A bound missed at so light a load is a tail of the engine's or the host's,
        not queueing, and each run there lasts minutes (2,000 queries at 15 QPS: 135 s). Short runs go on below
        it: a cell held by the Python harness (a CPU MLP serves a fraction of its engine's back-to-back rate) is
        not at light load there."""
        settings = self.settings
        slowest = settings.min_query_count / settings.max_duration_s
        lightest = min(settings.min_load_share * capacity, settings.min_query_count / LIGHT_RUN_S)
        if target >= max(slowest, lightest):
            return None
        if slowest >= lightest:
            return (
                f"below {slowest:.3g} QPS a run cannot issue {settings.min_query_count} queries within "
                f"{settings.max_duration_s:g} s"
            )
        return (
            f"the search goes no lower than {settings.min_load_share:g} of the capacity in runs over "
            f"{LIGHT_RUN_S:g} s ({lightest:.3g} QPS): a bound missed at so light a load is not queueing"
        )

    @staticmethod
    def search_entry(target: float, result: dict[str, Any], batches: dict[str, Any], logs: str) -> dict[str, Any]:
        """What the record keeps of one server run of the search."""
        return {
            "target_qps": target,
            "completed_qps": result["completed_qps"],
            "p99_ms": result["latency_ms"].get("p99"),
            "batcher_p99_ms": (batches.get("query_ms") or {}).get("p99"),
            "valid": result["valid"],
            "why_invalid": None if result["valid"] else why_invalid(result),
            "mean_batch": batches["mean_size"],
            "slowest": batches.get("slowest"),
            "host": result.get("host"),
            "logs": logs,
        }


def queueing_limit(
    batches: dict[str, Any] | None, max_batch: int, bound_ms: float, overlapped: bool = False
) -> dict[str, float] | None:
    """At largest batch 1, what queueing alone allows (inferbench.core.queueing): the QPS within the
    bound of an M/D/1 queue whose constant service is this run's median batch through the serving path
    (staged, run, fetched, completed; overlapped: run and fetched, the part one batch at a time holds),
    beside that service time; None at larger batches (batching changes the service with the load) or
    without batch phases. A steady-state limit: a short run far below the bound may pass above it."""
    phases = (batches or {}).get("phases_ms")
    if max_batch != 1 or not phases:
        return None
    serial = ("call", "fetch") if overlapped else tuple(name for name in BATCH_PHASES if name != "wait")
    service_ms = sum(phases[name]["p50"] for name in serial)
    return {"service_ms": service_ms, "md1_qps": md1_rate_within(service_ms, bound_ms, BOUND_PERCENTILE)}


#: what a serving cell's latencies time
SERVING_BOUNDARY = (
    "each query timed by MLPerf LoadGen from its issue to its completion: waiting in the dynamic batcher's "
    "queue, then its batch staged from host arrays, run and brought back to the host"
)


def measure(cell: PreparedCell) -> Measured:
    """A server or offline cell: LoadGen drives the prepared, parity-checked engine through the dynamic
    batcher, under the exclusive machine lock. Valid when the run that answers the cell is valid by
    LoadGen's rules, invalid (with LoadGen's reasons) otherwise."""
    key, engine, settings, serving = cell.key, cell.engine, cell.settings, serving_settings(cell)
    if cell.logs is None:
        raise ValueError(f"a {key.scenario} cell needs a folder for LoadGen's logs")
    # the query sample library: the workload's seeded inputs, one row per sample
    library = make_inputs(cell.specs, serving.samples, key.seq_len, settings.seed)
    # an engine fixed to its prepared shapes serves from one prepared engine per rung of the ladder
    rungs = None if engine.takes_any_batch else batch_ladder(key.batch_size)
    engines = {key.batch_size: engine}
    for rung in (rungs or [])[:-1]:
        engines[rung] = prepare_engine(replace(cell.request, key=replace(key, batch_size=rung)))[0]
    harness = harness_baseline(key.device, cell.specs, cell.batches[0])
    overlapped = serving.overlap_copies and engine.stages_apart
    # the batcher's and LoadGen's threads, started in the block, launch the work: the calling thread stays unpinned
    with measuring(cell.lock, key.device, settings.cpu_affinity, launches_here=False) as held:
        window_start = time.time()
        result = measure_serving(
            key.scenario, engine_path(lambda size: engines.get(size, engine), library, key.device, overlapped),
            key.batch_size, serving.samples, serving, cell.logs, rungs,
            harness_batch=engine_path(lambda size: harness, library, key.device, overlapped),
        )  # fmt: skip
        window = [window_start, time.time()]
    answer = result["result"] or {}
    fields = {
        "timing": f"loadgen_{key.scenario}",
        "timing_description": SERVING_BOUNDARY,
        "clock": "loadgen",
        "items_per_call": key.batch_size,
        "n_iters": answer.get("query_count"),
        "measured_windows_unix": [window],
        "measuring": held,
        "sections": {SECTION: result},
        "environment": {"loadgen": answer.get("loadgen")},
    }
    return Measured(fields, invalid=_why_not_valid(result, serving))


def _why_not_valid(result: dict[str, Any], serving: ServingSettings) -> str | None:
    answer = result["result"]
    if not answer:  # no LoadGen run could meet the bound (measure_serving says why)
        return f"no server run can meet p99 <= {serving.latency_bound_ms:g} ms: " + (
            result.get("unreachable") or result.get("stopped") or "no run"
        )
    if answer["valid"]:
        return None
    searched = result.get("search") or []
    return (
        f"LoadGen: {why_invalid(answer)}"
        + (
            f" (no target QPS of the {len(searched)}-run search met p99 <= {serving.latency_bound_ms:g} ms)"
            if len(searched) > 1
            else ""
        )
        + (f"; {result['stopped']}" if result.get("stopped") else "")
    )


def unavailable_reason(engine_class: type, device: str | None = None, precision: str | None = None) -> str | None:
    """Why no engine can be served here: LoadGen is not installed (every engine runs behind the batcher)."""
    import importlib.util

    if importlib.util.find_spec("mlperf_loadgen") is None:
        return "MLPerf LoadGen is not installed (pip install mlcommons-loadgen, declared by pyproject.toml)"
    return None
