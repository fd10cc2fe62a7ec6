"""One cell measured in this process, whatever happens: availability checked, the engine prepared and
parity-gated, the cell's scenario measuring it (inferbench.scenarios: the function its entry names),
and exactly one record written (ok, invalid, unavailable, oom or failed).

The workflow runs this in fresh processes of the cell's job (inferbench.launch.cell_job); a test or a
user can call ``run_cell`` directly.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import numpy as np

from inferbench.catalog.engines import EngineInfo
from inferbench.catalog.scenarios import scenario_info
from inferbench.catalog.targets import load_target
from inferbench.catalog.workloads import workload_info
from inferbench.core.cells import CellRecord, Status
from inferbench.core.environment import engine_libraries, fingerprint
from inferbench.core.errors import failure_reason, is_oom
from inferbench.core.storage import save_cell
from inferbench.engines.registry import engine_info, load_engine_class
from inferbench.machine.cores import auto_cores
from inferbench.machine.host_partition import pin_process
from inferbench.machine.lock import MachineLock
from inferbench.machine.watchdog import beat
from inferbench.scenarios.prepare import CellRequest, Measured, PreparedCell, check_parity, prepare_engine, unavailable
from inferbench.trackers import memory


def run_cell(
    request: CellRequest,
    out: Path,
    lock: MachineLock,
    logs: Path | None = None,
    cell_path: Path | None = None,
    first_process: bool = True,
    timed: bool = True,
) -> CellRecord:
    """Measure one cell in this process and write its record at ``out`` (whatever happens). A cell
    whose scenario declares logs of its own (ScenarioInfo.outputs: LoadGen's) needs their folder, ``logs``.
    ``cell_path``: the cell's own record, where ``out`` is this process's record in a scratch folder.
    ``first_process``: False in a cell's later processes, which leave out what the first one found for
    all of them (the attention kernel: a profiled call; the merged record keeps the first's).
    ``timed``: False for a priming process (inferbench.launch.cell_job.prime_cell): the engine prepared
    (compiled into the caches the measuring processes load) and described, no parity check, no timed call."""
    key = request.key
    info = engine_info(request.variant["engine"])
    base = _record_base(request)
    samples: dict[str, np.ndarray] = {}
    # a caller that measures a cell in its own process (a test, a user) gets its CPUs back after
    before = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    try:
        # a priming process times nothing: its compile keeps every core the job has
        pinning = pin_cpus(request.settings.cpu_affinity, key.threads, key.device) if timed else None
        shared = out.parent if cell_path is not None and cell_path != out else None
        record, samples = _measure(request, info, lock, base, logs, first_process, pinning, shared, timed)
    except Exception as error:  # a cell that breaks is data, not a crash of the sweep
        record = failed_record(request, failure_reason(error), "oom" if is_oom(error) else "failed", base)
    finally:
        if before is not None and os.sched_getaffinity(0) != before:
            pin_process(before)
    record.engine.setdefault("description", info.description)
    save_cell(out, record, samples, cell_path)
    return record


def _record_base(request: CellRequest) -> dict[str, Any]:
    """What every record of the cell says, known before anything is prepared."""
    key, variant = request.key, request.variant
    impl = variant["engine"]
    info = engine_info(impl)
    # the variant as configured, with its engine's defaults filled in: what the cell ran with
    options = {**variant, **info.typed_options(variant).as_dict()}
    base: dict[str, Any] = {"key": key, "engine_impl": impl, "options": options, "mode": info.mode}
    try:  # what the variant computes with (summary columns)
        engine_cls = load_engine_class(impl)
        base["computation"] = engine_cls(key.device, key.precision, key.threads, variant).computation(
            workload_info(key.workload).kind
        )
    except ImportError:  # the engine cannot load here: its record says so
        pass
    return base


def _fingerprint(info: EngineInfo, include_gpu: bool) -> dict[str, Any]:
    """The environment of a cell's record, with the versions of the libraries its engine uses."""
    return fingerprint(include_gpu, libraries=engine_libraries(info))


def failed_record(
    request: CellRequest, reason: str, status: Status = "failed", base: dict[str, Any] | None = None
) -> CellRecord:
    """The record of a cell that broke (or was ended: inferbench.machine.watchdog) before its measurement;
    ``base``: ``_record_base(request)``, where already made."""
    record = CellRecord(
        **(base if base is not None else _record_base(request)),
        status=status,
        reason=reason,
        environment=_fingerprint(engine_info(request.variant["engine"]), include_gpu=request.key.device == "cuda"),
    )
    record.engine.setdefault("description", engine_info(request.variant["engine"]).description)
    return record


def _measure(
    request: CellRequest,
    info: EngineInfo,
    lock: MachineLock,
    base: dict[str, Any],
    logs: Path | None,
    first_process: bool,
    pinning: str | None,
    shared: Path | None = None,
    timed: bool = True,
) -> tuple[CellRecord, dict[str, np.ndarray]]:
    key = request.key
    beat("checking whether the cell can run here")
    reason = unavailable(request)
    if reason:
        return CellRecord(**base, status="unavailable", reason=reason, environment=_fingerprint(info, False)), {}
    beat("preparing the engine (load, build or compile, first call)")
    engine, specs, batches, cold = prepare_engine(request)
    with contextlib.closing(engine):  # what it started outside this process (a server) ends with the cell
        if not timed:
            return _primed_record(request, info, engine, batches, cold, base), {}
        beat("checking parity against FP32 eager")
        parity, problems = check_parity(engine, request) if info.mode != "train" else (None, [])
        cell = PreparedCell(request, info, engine, specs, batches, lock, logs, first_process, shared)
        calls = {"train": "training steps", "generate": "requests"}.get(info.mode, f"{key.scenario} scenario calls")
        beat(f"measuring (warm-up, then {calls})")
        measured: Measured = _scenario_function(key.scenario, info.mode)(cell)
        attention = None
        if first_process:
            beat("finding the attention kernel")
            # after the timed calls: finding the attention kernel runs a profiler, whose hooks stay in the
            # process and slowed later calls (a CUDA graph's replay among them)
            attention = engine.attention_kernel(engine.stage(batches[0]))
        described = engine.describe() | {"attention": attention}
    invalid = f"output differs from FP32 eager: {'; '.join(problems)}" if problems else measured.invalid
    record = _measured_record(info, measured, base, pinning, parity, cold, described, invalid)
    return record, measured.samples


def _measured_record(
    info: EngineInfo,
    measured: Measured,
    base: dict[str, Any],
    pinning: str | None,
    parity: dict[str, Any] | None,
    cold: dict[str, float],
    described: dict[str, Any],
    invalid: str | None,
) -> CellRecord:
    """A measuring process's record: the scenario's fields, what pinned its timed loop, parity, cold start,
    memory, the engine as it described itself, and the environment with the cores the timed calls ran on."""
    cuda = base["key"].device == "cuda"
    fields = dict(measured.fields)
    if fields.get("measuring") is not None:  # what pinned the timed loop, or why nothing did
        fields["measuring"] = {**fields["measuring"], "pinning": fields["measuring"].get("pinning", pinning)}
    scenario_memory, scenario_environment = fields.pop("memory_mb", {}), fields.pop("environment", {})
    environment = _fingerprint(info, include_gpu=cuda) | scenario_environment
    measured_on = (fields.get("measuring") or {}).get("cpus")
    if measured_on:  # the cores the timed calls ran on (a GPU's slot), not those the set-up ran on
        environment |= {"affinity": measured_on, "affinity_cpus": len(measured_on)}
    return CellRecord(
        **base,
        **fields,
        status="invalid" if invalid else "ok",
        reason=invalid,
        parity=parity,
        cold_start_s=cold,
        memory_mb={
            "host_peak_rss": memory.host_peak_rss_mb(),
            # a forked process's RSS at its start: the libraries it shares with its parent
            "host_rss_at_start": memory.host_rss_at_start_mb(),
            "gpu_peak_allocated": memory.gpu_peak_allocated_mb() if cuda else None,
            **scenario_memory,
        },
        engine=described,
        environment=environment,
    )


def _primed_record(
    request: CellRequest, info: EngineInfo, engine: Any, batches: Any, cold: dict[str, float], base: dict[str, Any]
) -> CellRecord:
    """A priming process's record: its cold start (the compile from nothing), the engine's description with
    the attention kernel (found here, where no timed call follows the profiler's hooks), memory, environment."""
    beat("finding the attention kernel")
    attention = engine.attention_kernel(engine.stage(batches[0]))
    cuda = request.key.device == "cuda"
    return CellRecord(
        **base,
        status="ok",
        cold_start_s=cold,
        memory_mb={
            "host_peak_rss": memory.host_peak_rss_mb(),
            "gpu_peak_allocated": memory.gpu_peak_allocated_mb() if cuda else None,
        },
        engine=engine.describe() | {"attention": attention},
        environment=_fingerprint(info, include_gpu=cuda),
    )


def _scenario_function(scenario: str, mode: str) -> Any:
    return load_target(scenario_info(scenario, mode).target)


def pin_cpus(cpus: str | tuple[int, ...] | list[int] | None, threads: int, device: str = "cpu") -> str | None:
    """Pin this process (and the threads it starts from now on) to ``cpus`` (``measure.cpu_affinity``)
    before any engine loads; return what was pinned, or why nothing, for the record. ``auto`` puts a CPU
    cell on ``threads`` physical cores (inferbench.machine.cores), the same ones in every process of the
    run, so that where the OS places its threads stops adding to the spread between processes; a GPU
    cell's ``auto`` pins only its launching thread, for its timed loop (None here:
    inferbench.machine.host_partition.measuring)."""
    if cpus is None:
        return "unpinned: measure.cpu_affinity is null"
    if cpus == "auto":
        if device != "cpu":
            return None
        chosen = auto_cores(threads)
        if chosen.cpus:
            pin_process(chosen.cpus)
        return chosen.note
    if isinstance(cpus, str):
        raise ValueError(f"measure.cpu_affinity is {cpus!r}: auto, null or a list of CPU ids")
    if not hasattr(os, "sched_setaffinity"):
        raise ValueError("measure.cpu_affinity needs Linux (os.sched_setaffinity); set it to null here")
    available = os.sched_getaffinity(0)
    if not set(cpus) <= available:
        raise ValueError(
            f"measure.cpu_affinity {sorted(cpus)} names CPUs this process may not use; allowed: {sorted(available)}"
        )
    if threads > len(cpus):
        raise ValueError(
            f"measure.cpu_affinity gives {len(cpus)} CPUs to a cell with {threads} threads: "
            "list at least as many CPUs as the largest `threads` of the studies"
        )
    os.sched_setaffinity(0, set(cpus))
    return "listed: measure.cpu_affinity's CPUs"
