"""What every scenario starts from: the cell's engine made and prepared (cold start timed), its seeded
input batches, and the parity gate against FP32 eager. A scenario gets a ``PreparedCell`` and returns
what it ``Measured``; inferbench.scenarios.run turns that into the cell's record."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from inferbench.catalog.engines import EngineInfo
from inferbench.catalog.scenarios import scenario_info
from inferbench.catalog.targets import load_target
from inferbench.core.cells import CellKey
from inferbench.core.fsutil import read_json
from inferbench.core.settings import MeasureSettings
from inferbench.engines.base import Engine
from inferbench.engines.registry import engine_info, load_engine_class
from inferbench.machine.lock import MachineLock
from inferbench.models.parity import (
    centred,
    compare,
    heldout_batches,
    load_heldout,
    load_reference,
    roc_auc,
    violations,
)
from inferbench.models.registry import InputSpec, input_specs, make_inputs


@dataclass
class CellInputs:
    """Files a cell is prepared from (each optional: not every engine needs each)."""

    model_meta: Path | None = None
    artifact: Path | None = None
    reference: Path | None = None
    dataset: Path | None = None


@dataclass(frozen=True)
class CellRequest:
    """What a cell's job is asked to measure: the cell, its engine variant (as configured), the files it
    is prepared from, how its calls are timed (a scenario's own settings among them) and its parity tolerances.
    Picklable: a cell's processes may be spawned."""

    key: CellKey
    variant: dict[str, Any]
    inputs: CellInputs = field(default_factory=CellInputs)
    settings: MeasureSettings = field(default_factory=MeasureSettings)
    tolerance: dict[str, float] = field(default_factory=dict)


@dataclass
class PreparedCell:
    """A cell ready to be measured: its engine prepared and warm (one call made), the seeded batches its
    timed calls rotate through, the machine lock a scenario takes exclusively while it measures, and the
    folder for the logs a scenario's own outputs declare (ScenarioInfo.outputs), where it has one."""

    request: CellRequest
    info: EngineInfo
    engine: Engine
    specs: tuple[InputSpec, ...]
    batches: list[dict[str, np.ndarray]]
    lock: MachineLock
    logs: Path | None = None
    #: False in a cell's later processes, which may leave out what the first found for all (the engine's own
    #: kernel trace where it builds a second engine for it)
    first_process: bool = True
    #: a folder the cell's processes share (their scratch folder), where the first leaves what the later ones
    #: follow (the rates of a decoder's cell under load); None where the process measures the cell alone
    shared: Path | None = None

    @property
    def key(self) -> CellKey:
        return self.request.key

    @property
    def settings(self) -> MeasureSettings:
        return self.request.settings

    @property
    def inputs(self) -> CellInputs:
        return self.request.inputs


@dataclass
class Measured:
    """What a scenario measured: the record's measurement fields (``memory_mb`` and ``environment``
    entries are added to the runner's own), the raw samples per boundary, and why the measurement is
    invalid by the scenario's own rules (None: valid)."""

    fields: dict[str, Any]
    samples: dict[str, np.ndarray] = field(default_factory=dict)
    invalid: str | None = None


def unavailable(request: CellRequest) -> str | None:
    """Why this cell cannot run here (engine missing, device or precision unsupported), or None."""
    key, variant, inputs = request.key, request.variant, request.inputs
    try:
        engine_cls = load_engine_class(variant["engine"])
    except ImportError as error:
        return f"engine {variant['engine']!r} cannot be imported here: {error}"
    # a scenario says what it cannot drive here: an engine without its path, a library it needs missing
    own = scenario_info(key.scenario, engine_info(variant["engine"]).mode).unavailable
    if own is not None and (reason := load_target(own)(engine_cls, key.device, key.precision)):
        return reason
    if key.device == "cpu" and (reason := threads_unavailable_reason(key.threads)):
        return reason
    if engine_info(variant["engine"]).needs_dataset and inputs.dataset is None:
        return f"engine {variant['engine']!r} trains on the workload's dataset; {key.workload} has none"
    return engine_cls.unavailable_reason(key.device, key.precision)


def threads_unavailable_reason(threads: int) -> str | None:
    """More engine threads than CPUs this process may use: they would take turns on the cores, and the
    cell would time the oversubscription, not the engine at that many threads."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if threads > cpus:
        return (
            f"{threads} threads but this process may use {cpus} CPUs on this machine: the threads would share "
            f"cores; list threads up to {cpus} for it (studies' `threads`)"
        )
    return None


#: (shape, model meta, seed, batches) -> the seeded batches: drawn once per cell job, before its measuring
#: processes fork, which share them (four batches of 1,024 images are 2.4 GB and take seconds to draw)
_BATCHES: dict[tuple[Any, ...], tuple[tuple[InputSpec, ...], list[dict[str, np.ndarray]]]] = {}


def seeded_batches(
    key: CellKey, inputs: CellInputs, settings: MeasureSettings
) -> tuple[tuple[InputSpec, ...], list[dict[str, np.ndarray]]]:
    """The cell's input specs and the ``settings.input_batches`` seeded batches its timed calls rotate
    through (the same for every engine of the workload and shape)."""
    cache_key = (key.batch_size, key.seq_len, str(inputs.model_meta), settings.seed, settings.input_batches)
    if cache_key not in _BATCHES:
        specs = input_specs(read_json(inputs.model_meta)) if inputs.model_meta else ()
        seeds = range(settings.seed, settings.seed + settings.input_batches)
        _BATCHES.clear()  # one cell per job: never hold two cells' batches
        _BATCHES[cache_key] = specs, [make_inputs(specs, key.batch_size, key.seq_len, seed) for seed in seeds]
    return _BATCHES[cache_key]


def prepare_engine(
    request: CellRequest,
) -> tuple[Engine, tuple[InputSpec, ...], list[dict[str, np.ndarray]], dict[str, float]]:
    """Make the engine, prepare it and make one first call: returns it, the input specs, the seeded
    batches the timed calls rotate through, and the cold-start seconds (prepare, first call, the
    engine's own)."""
    key, variant = request.key, request.variant
    engine = load_engine_class(variant["engine"])(key.device, key.precision, key.threads, variant)
    engine.dataset = request.inputs.dataset
    specs, batches = seeded_batches(key, request.inputs, request.settings)
    cold: dict[str, float] = {}
    try:
        start = time.perf_counter()
        engine.prepare(request.inputs.artifact, specs, batches[0])
        cold["prepare"] = time.perf_counter() - start
        batches = engine.host_batches(batches)  # as the engine's caller holds them: what end-to-end calls start from
        staged = engine.stage(batches[0])
        start = time.perf_counter()
        engine.run(staged)
        engine.synchronize()
        cold["first_call"] = time.perf_counter() - start
    except BaseException:
        engine.close()  # what it started before it failed (a server) ends with it
        raise
    if share := variant.get("planted_slowdown"):
        plant_slowdown(engine, float(share), staged)
    return engine, specs, batches, cold | engine.cold_start_s


def plant_slowdown(engine: Engine, share: float, staged: Any) -> None:
    """Calibration only (a variant's ``planted_slowdown``): each call of ``engine.run`` does (1 + share)x its
    twin's work on each side that works, so that the cell is a known (1 + share)x slower whichever side sets
    its pace. On a GPU, a sleep kernel queued right after the call's work holds the device for ``share`` of a
    call's device time (``staged``: an input to time one on); then the host spins for ``share`` of the time
    ``run`` took to return. The two overlap, as a call's host and device work do: a sleep queued after the
    spin would leave the device idle during it, and a host-bound call would then read 1 + 2 x share. Nothing
    waits for the device: the host still queues the next call while this one runs, as the twin does."""
    run = engine.run
    stream = engine.stream()
    sleep_device = device_sleep(stream, share * device_seconds(engine, staged)) if stream is not None else None

    def slower(staged: Any) -> Any:
        start = time.perf_counter()
        output = run(staged)
        until = time.perf_counter() + share * (time.perf_counter() - start)
        if sleep_device is not None:
            sleep_device()
        while time.perf_counter() < until:
            pass
        return output

    engine.run = slower  # type: ignore[method-assign]


def device_seconds(engine: Engine, staged: Any, calls: int = 5, untimed: int = 3) -> float:
    """The median device time of one call of ``engine.run``, by CUDA events on its stream, timed alone after
    ``untimed`` calls (the first calls of a process are slower)."""
    import torch

    stream, times = engine.stream(), []
    for _ in range(untimed):
        engine.run(staged)
    for _ in range(calls):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        engine.synchronize()
        start.record(stream)
        engine.run(staged)
        stop.record(stream)
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e-3)
    return float(np.median(times))


def device_sleep(stream: Any, seconds: float) -> Any:
    """A function that queues a kernel on ``stream`` holding the device for about ``seconds``: PyTorch's
    ``torch.cuda._sleep`` spins a number of GPU clock cycles, converted here at the rate it runs now."""
    import torch

    def cycles_per_second(cycles: int = 1_000_000) -> float:
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(stream):
            start.record()
            torch.cuda._sleep(cycles)
            stop.record()
        stop.synchronize()
        return cycles / (start.elapsed_time(stop) * 1e-3)

    rate = float(np.median([cycles_per_second() for _ in range(3)]))
    cycles = max(int(seconds * rate), 1)

    def sleep() -> None:
        with torch.cuda.stream(stream):
            torch.cuda._sleep(cycles)

    return sleep


def check_parity(engine: Engine, request: CellRequest) -> tuple[dict[str, Any] | None, list[str]]:
    """The engine's output on the reference inputs against FP32 eager's, and the tolerances it violates. None
    without a reference, for an engine that computes nothing, and for one whose ``run`` gives tokens (a
    server's): the generation scenarios check the tokens it generates."""
    if not engine.computes or engine.run_gives_tokens or request.inputs.reference is None:
        return None, []
    ref_inputs, ref_output = load_reference(request.inputs.reference, request.key.batch_size)
    output = engine.run(engine.stage(ref_inputs))
    engine.synchronize()
    output = engine.to_numpy(output)
    if engine.run_gives_log_probabilities:  # the logits up to a constant per row: both compared centred
        output, ref_output = centred(output), centred(ref_output)
    metrics = compare(output, ref_output)
    # a cell whose output has the wrong shape is invalid already: nothing to score
    auc = heldout_auc(engine, request, next(iter(ref_inputs))) if "shape" not in metrics else None
    metrics |= {"auc": auc} if auc is not None else {}
    return metrics | {"tolerance": request.tolerance}, violations(metrics, request.tolerance)


def heldout_auc(engine: Engine, request: CellRequest, name: str) -> float | None:
    """The held-out AUC of a trained model as this engine runs it (its precision, its graph), from the rows
    training held out, fed as the model's one input ``name`` (None for a model that was not trained)."""
    heldout = load_heldout(request.inputs.reference) if request.inputs.reference is not None else None
    if heldout is None or engine.run_gives_log_probabilities:
        return None
    rows, labels = heldout
    scores = []
    for batch in heldout_batches(rows, request.key.batch_size):
        output = engine.run(engine.stage({name: batch}))
        engine.synchronize()
        logits = engine.to_numpy(output).astype(np.float64)
        if logits.ndim != 2 or logits.shape[1] != 2:
            return None  # not two classes' logits: no AUC to give
        scores.append(logits[: len(batch), 1] - logits[: len(batch), 0])  # the positive class's log-odds
    return roc_auc(labels, np.concatenate(scores)[: len(rows)])
