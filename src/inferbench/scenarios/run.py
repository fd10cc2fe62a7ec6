"""Run one cell: prepare the engine, stage inputs, measure under the exclusive machine lock, and
write exactly one record, whatever happens (ok, unavailable, oom or failed).

``measure_cell`` is what the workflow runs: the engine's libraries imported once (timed on their
own), then ``run_cell`` in fresh forked processes (inferbench.launch.processes), merged into one record.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import itertools
import json
import os
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inferbench.core.cells import CellKey, CellRecord
from inferbench.core.environment import fingerprint
from inferbench.core.errors import UserError
from inferbench.core.fsutil import atomic_path, read_json, write_json
from inferbench.core.stats import latency_stats
from inferbench.core.workloads import workload_info
from inferbench.engines.base import Engine
from inferbench.engines.registry import engine_info, load_engine_class
from inferbench.launch.lock import MachineLock
from inferbench.launch.warm import PRELOADED, preloaded_import_s
from inferbench.models.parity import compare, load_reference, violations
from inferbench.models.registry import InputSpec, make_inputs
from inferbench.scenarios.serving import ServingSettings, loadgen_unavailable_reason, measure_serving, why_invalid
from inferbench.scenarios.timing import make_timer, measure
from inferbench.trackers import memory
from inferbench.trackers.bound import classify
from inferbench.trackers.gpu_telemetry import GpuTelemetry
from inferbench.trackers.host_telemetry import HostWindow

END_TO_END = (
    "stage host arrays where the engine computes, run, and bring the output back as a host float32 "
    "array, timed on the host clock after synchronising"
)
BOUNDARIES = ("device", "end_to_end")
SERVING_BOUNDARY = (
    "each query timed by MLPerf LoadGen from its issue to its completion: waiting in the dynamic batcher's "
    "queue, then its batch staged from host arrays, run and brought back to the host"
)


@dataclass(frozen=True)
class MeasureSettings:
    warmup_s: float = 0.3
    #: per process: a cell measured in two processes times at least twice this
    min_time_s: float = 0.5
    #: per process (inferbench.plan.grid sizes it so that the processes together reach the count the
    #: cell's studies' percentiles need)
    min_iters: int = 5
    seed: int = 0
    #: timed calls cycle through this many seeded batches, so no cache sees the same input twice in a row
    input_batches: int = 4
    #: fresh processes that measure the cell (see inferbench.launch.processes; the workflow's default is 2)
    repeats: int = 1
    #: fresh processes in all for a GPU cell that one of its processes found host-bound (default 3)
    host_bound_repeats: int = 1

    @property
    def min_iters_per_process(self) -> int:
        """Each of the ``repeats`` processes times this many calls at least: together ``min_iters``."""
        return -(-self.min_iters // self.repeats)

    #: pin the measuring process to these CPUs (None: wherever the OS schedules it)
    cpu_affinity: tuple[int, ...] | None = None


@dataclass
class CellInputs:
    """Files a cell is prepared from (each optional: not every engine needs each)."""

    model_meta: Path | None = None
    artifact: Path | None = None
    reference: Path | None = None
    dataset: Path | None = None


def samples_path(record_path: str | Path, boundary: str = "device") -> Path:
    """Raw per-call latencies (seconds, float32) live beside the record, one file per boundary."""
    if boundary not in BOUNDARIES:
        raise ValueError(f"boundary must be one of {BOUNDARIES}")
    suffix = ".samples.npy" if boundary == "device" else ".e2e_samples.npy"
    return Path(record_path).with_suffix(suffix)


def save_samples(record_path: str | Path, samples: dict[str, np.ndarray]) -> None:
    for boundary in BOUNDARIES:
        with atomic_path(samples_path(record_path, boundary)) as tmp, tmp.open("wb") as fh:
            # 7 significant digits: 0.1 µs at 1 s, half the bytes
            np.save(fh, np.asarray(samples.get(boundary, np.empty(0)), dtype=np.float32))


def save_cell(out: str | Path, record: CellRecord, samples: dict[str, np.ndarray]) -> None:
    """Write a cell's record and samples. If that fails (a full disk, a read-only folder), the
    measurement is not thrown away: it goes to the temp directory (or, failing that, into the job's
    log) and the error names the path, the reason and where the measurement is."""
    try:
        save_samples(out, samples)
        record.save(out)
        return
    except OSError as error:
        reason = f"cannot write {out}: {error.strerror or error}"
    kept = Path(tempfile.gettempdir()) / "inferbench-unsaved" / Path(out).relative_to(Path(out).anchor)
    try:
        save_samples(kept, samples)
        record.save(kept)
        where = f"kept in {kept} (copy it to {out} once there is room, or re-run the cell)"
    except OSError:
        print(json.dumps(record.to_dict()), file=sys.stderr)
        where = "printed above in this job's log"
    raise UserError(f"{reason}; the measurement ({record.status}) is {where}")


def input_specs(model_meta: dict[str, Any]) -> tuple[InputSpec, ...]:
    return tuple(InputSpec(**{**i, "shape": tuple(i["shape"])}) for i in model_meta["inputs"])


def error_text(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def failure_reason(error: BaseException) -> str:
    """Log the traceback of a cell that broke and return the reason its record keeps."""
    traceback.print_exc(file=sys.stderr)
    return error_text(error)[:2000]


#: how libraries say that memory ran out: CUDA (torch, ORT), the host (ENOMEM, C++ std::bad_alloc)
OOM_MESSAGES = ("out of memory", "failed to allocate", "cannot allocate memory", "can't allocate memory", "bad_alloc")


def is_oom(error: BaseException) -> bool:
    if isinstance(error, MemoryError) or (isinstance(error, OSError) and error.errno == errno.ENOMEM):
        return True
    text = error_text(error).lower()
    return "outofmemory" in text.replace(" ", "") or any(m in text for m in OOM_MESSAGES)


def run_cell(
    key: CellKey,
    variant: dict[str, Any],
    inputs: CellInputs,
    settings: MeasureSettings,
    out: Path,
    lock: MachineLock,
    tolerance: dict[str, float] | None = None,
    serving: ServingSettings | None = None,
    serving_logs: Path | None = None,
) -> CellRecord:
    """Measure one cell in this process and write its record at ``out`` (whatever happens). A server
    or offline cell needs ``serving`` and the folder for LoadGen's logs, ``serving_logs``."""
    impl = variant["engine"]
    info = engine_info(impl)
    # the variant as configured, with its engine's defaults filled in: what the cell ran with
    options = {**variant, **info.effective_options(variant)}
    base: dict[str, Any] = {"key": key, "engine_impl": impl, "options": options, "mode": info.mode}
    try:  # what the variant computes with (summary columns), known before anything is prepared
        engine_cls = load_engine_class(impl)
        base["computation"] = engine_cls(key.device, key.precision, key.threads, variant).computation(
            workload_info(key.workload).kind
        )
    except ImportError:  # the engine cannot load here: its record says so
        pass
    samples: dict[str, np.ndarray] = {}
    try:
        pin_cpus(settings.cpu_affinity, key.threads)
        record, samples = _measure_cell(
            key, variant, inputs, settings, lock, base, tolerance or {}, serving, serving_logs
        )
    except Exception as error:  # a cell that breaks is data, not a crash of the sweep
        record = CellRecord(
            **base,
            status="oom" if is_oom(error) else "failed",
            reason=failure_reason(error),
            environment=fingerprint(include_gpu=key.device == "cuda"),
        )
    record.engine.setdefault("description", info.description)
    save_cell(out, record, samples)
    return record


def measure_cell(
    key: CellKey,
    variant: dict[str, Any],
    inputs: CellInputs,
    settings: MeasureSettings,
    out: Path,
    lock: MachineLock,
    tolerance: dict[str, float] | None = None,
    imports_started: float | None = None,
    serving: ServingSettings | None = None,
) -> CellRecord:
    """The cell as the workflow measures it: the libraries its engine needs imported here, once and
    timed (``cold_start_s.import``, from ``imports_started``, a ``time.perf_counter()`` taken before
    this module was imported, since importing it already loads torch), then ``run_cell`` in
    ``settings.repeats`` fresh processes forked from this one (``host_bound_repeats`` for a GPU cell
    found host-bound), merged into one record at ``out``. ``lock`` is held shared except while a
    process runs (each takes its own). A server or offline cell runs in one fresh process (its LoadGen
    runs are many seconds each), with ``serving``; LoadGen's logs go to ``loadgen_dir(out)``."""
    from inferbench.launch.processes import import_libraries, run_in_fresh_processes

    info = engine_info(variant["engine"])
    modules = [*info.libraries, *(["torch"] if key.device == "cuda" else []), info.target.split(":")[0]]
    try:
        import_s: float | None = import_libraries(modules, lambda: _import_model_code(key, info.artifact, inputs))
        if imports_started is not None:
            import_s = time.perf_counter() - imports_started
        # forked from the warm-start server: the libraries were imported there, once, and timed
        preloaded = preloaded_import_s(modules)
        if preloaded is not None and import_s is not None:
            import_s += preloaded
    except Exception:  # a missing library: the processes record the cell `unavailable` and why
        import_s = None

    # drawn here, once: the processes fork from this one and share them (spawned ones draw their own)
    with contextlib.suppress(Exception):  # a broken model meta is the processes' to record
        seeded_batches(key, inputs, settings)
    # a module-level function and picklable arguments: the processes may have to be spawned
    logs = loadgen_dir(out) if key.scenario != "single" else None
    one_process = functools.partial(
        _measure_in_own_process, key, variant, inputs, settings, lock.path, tolerance, serving, logs
    )
    host_bound = settings.host_bound_repeats if key.device == "cuda" and key.scenario == "single" else 0
    repeats = settings.repeats if key.scenario == "single" else 1
    record, samples = run_in_fresh_processes(one_process, out, repeats, host_bound, lock)
    if import_s is not None:
        record.cold_start_s = {"import": import_s, **record.cold_start_s}
    if PRELOADED:
        record.environment["imports_preloaded_s"] = dict(PRELOADED)
    save_cell(out, record, samples)
    return record


def _measure_in_own_process(
    key: CellKey,
    variant: dict[str, Any],
    inputs: CellInputs,
    settings: MeasureSettings,
    lock_path: Path,
    tolerance: dict[str, float] | None,
    serving: ServingSettings | None,
    serving_logs: Path | None,
    path: Path,
) -> CellRecord:
    """One of the cell's fresh processes: ``run_cell`` under a machine lock of its own."""
    own_lock = MachineLock(lock_path)
    own_lock.shared()
    try:
        return run_cell(key, variant, inputs, settings, path, own_lock, tolerance, serving, serving_logs)
    finally:
        own_lock.close()


def _import_model_code(key: CellKey, artifact_kind: str, inputs: CellInputs) -> None:
    """Build the cell's model on the meta device (no weights are allocated): the model code that is
    imported lazily (timm's, transformers') is then loaded before the processes fork.

    Not transformers' on the GPU: its modeling code imports torchao (through its quantizers), whose
    import asks torch whether Triton can run, which initialises CUDA, and a process forked after that
    cannot use the GPU. There the measuring processes load it themselves (in ``load_model``)."""
    meta = read_json(inputs.model_meta) if inputs.model_meta is not None else {}
    if artifact_kind != "checkpoint" or "name" not in meta:
        return
    if key.device == "cuda" and workload_info(key.workload).kind == "text":
        return
    import torch

    from inferbench.models.registry import create_model

    with torch.device("meta"):
        create_model(meta["name"], **meta.get("arch", {}))


def pin_cpus(cpus: tuple[int, ...] | list[int] | None, threads: int) -> None:
    """Pin this process (and the threads it starts from now on) to ``cpus``, before any engine loads.
    A launch-bound GPU cell is as fast as the one host thread issuing kernels; pinning takes the
    OS's choice of vCPU out of the spread between runs."""
    if not cpus:
        return
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


def unavailable(key: CellKey, variant: dict[str, Any], inputs: CellInputs) -> str | None:
    """Why this cell cannot run here (engine missing, device or precision unsupported), or None."""
    try:
        engine_cls = load_engine_class(variant["engine"])
    except ImportError as error:
        return f"engine {variant['engine']!r} cannot be imported here: {error}"
    if key.scenario != "single" and (reason := loadgen_unavailable_reason()):
        return reason
    if engine_info(variant["engine"]).needs_dataset and inputs.dataset is None:
        return f"engine {variant['engine']!r} trains on the workload's dataset; {key.workload} has none"
    return engine_cls.unavailable_reason(key.device, key.precision)


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
    key: CellKey, variant: dict[str, Any], inputs: CellInputs, settings: MeasureSettings
) -> tuple[Engine, list[dict[str, np.ndarray]], dict[str, float]]:
    """Make the engine, prepare it and make one first call: returns it, the seeded input batches the
    timed calls rotate through, and the cold-start seconds (prepare, first call, the engine's own)."""
    engine = load_engine_class(variant["engine"])(key.device, key.precision, key.threads, variant)
    engine.dataset = inputs.dataset
    specs, batches = seeded_batches(key, inputs, settings)
    cold: dict[str, float] = {}
    start = time.perf_counter()
    engine.prepare(inputs.artifact, specs, batches[0])
    cold["prepare"] = time.perf_counter() - start
    staged = engine.stage(batches[0])
    start = time.perf_counter()
    engine.run(staged)
    engine.synchronize()
    cold["first_call"] = time.perf_counter() - start
    engine.attention = engine.attention_kernel(staged)
    return engine, batches, cold | engine.cold_start_s


def _measure_cell(
    key: CellKey,
    variant: dict[str, Any],
    inputs: CellInputs,
    settings: MeasureSettings,
    lock: MachineLock,
    base: dict[str, Any],
    tolerance: dict[str, float],
    serving: ServingSettings | None = None,
    serving_logs: Path | None = None,
) -> tuple[CellRecord, dict[str, np.ndarray]]:
    reason = unavailable(key, variant, inputs)
    if reason:
        return CellRecord(**base, status="unavailable", reason=reason, environment=fingerprint(False)), {}
    engine, batches, cold = prepare_engine(key, variant, inputs, settings)

    parity_metrics, problems = None, []
    if engine.computes and base["mode"] == "inference" and inputs.reference is not None:
        ref_inputs, ref_output = load_reference(inputs.reference, key.batch_size)
        output = engine.run(engine.stage(ref_inputs))
        engine.synchronize()
        parity_metrics = compare(engine.to_numpy(output), ref_output)
        problems = violations(parity_metrics, tolerance)
        parity_metrics["tolerance"] = tolerance
    if key.scenario != "single":
        if serving is None or serving_logs is None:
            raise ValueError(f"a {key.scenario} cell needs its serving settings and a folder for LoadGen's logs")
        check = {"parity": parity_metrics, "problems": problems, "cold": cold}
        return _serve_cell(key, engine, inputs, settings, serving, serving_logs, lock, base, check), {}

    staged = itertools.cycle([engine.stage(batch) for batch in batches])
    host_batches = itertools.cycle(batches)
    items = engine.items_per_call or key.batch_size
    timer = make_timer(engine.timer, engine.synchronize)
    telemetry = GpuTelemetry.for_cuda_device() if key.device == "cuda" else None
    if key.device == "cuda":
        memory.reset_gpu_peak()
    host = HostWindow()
    with lock.exclusively():
        window_start = time.time()
        with telemetry or contextlib.nullcontext(), host:
            result = measure(
                lambda: engine.run(next(staged)),
                timer,
                settings.warmup_s,
                settings.min_time_s,
                settings.min_iters_per_process,
            )
        # the second boundary: host arrays in, a host array out, host clock; engines whose run is
        # already host to host have only this one
        end_to_end = None
        if engine.timing != "end_to_end":
            end_to_end = measure(
                lambda: engine.to_numpy(engine.run(engine.stage(next(host_batches)))),
                make_timer("host", engine.synchronize),
                0.0,  # the engine is warm: one untimed call warms the staging and fetching path
                settings.min_time_s,
                settings.min_iters_per_process,
            )
        window = [window_start, time.time()]
    stats = latency_stats(result.samples_s, items)
    # the telemetry window holds the warm-up calls too: energy is shared among all their items
    gpu = telemetry.summary(items * (result.warmup_iters + stats["n_iters"])) if telemetry else None
    bound = None
    if key.device == "cuda":
        busy = gpu["gpu_busy_pct"] if gpu else None
        bound_class, signal = classify(result.launch_share, busy, engine.launches_async)
        bound = {
            "class": bound_class,
            "signal": signal,
            "launch_share": result.launch_share,
            "gpu_busy_pct": busy,
            "launches_async": engine.launches_async,
        }
    e2e_samples = end_to_end.samples_s if end_to_end else result.samples_s
    e2e_stats = latency_stats(e2e_samples, items) if end_to_end else stats
    record = CellRecord(
        **base,
        status="invalid" if problems else "ok",
        reason=f"output differs from FP32 eager: {'; '.join(problems)}" if problems else None,
        parity=parity_metrics,
        timing=engine.timing,
        timing_description=engine.timing_description,
        items_per_call=items,
        input_batches=settings.input_batches,
        latency_ms=stats["latency_ms"],
        latency_ci95_ms=stats["latency_ci95_ms"],
        cv=stats["cv"],
        throughput_per_s=stats["throughput_per_s"],
        n_iters=stats["n_iters"],
        warmup_iters=result.warmup_iters,
        measured_s=result.measured_s,
        measured_windows_unix=[window],
        memory_mb={
            "host_peak_rss": memory.host_peak_rss_mb(),
            # a forked process's RSS at its start: the libraries it shares with its parent
            "host_rss_at_start": memory.host_rss_at_start_mb(),
            "gpu_peak_allocated": memory.gpu_peak_allocated_mb() if key.device == "cuda" else None,
            "gpu_process_peak_nvml": gpu["process_peak_mb"] if gpu else None,
        },
        gpu_telemetry=gpu,
        host_telemetry=host.summary,
        bound=bound,
        end_to_end={
            "description": END_TO_END,
            **{k: e2e_stats[k] for k in ("latency_ms", "latency_ci95_ms", "cv", "n_iters", "throughput_per_s")},
        },
        cold_start_s=cold,
        engine=engine.describe() | {"attention": engine.attention},
        environment=fingerprint(include_gpu=key.device == "cuda"),
    )
    return record, {"device": result.samples_s, "end_to_end": e2e_samples}


def loadgen_dir(record_path: str | Path) -> Path:
    """LoadGen's logs of a serving cell live beside its record: ``<record>.loadgen/<run>/``."""
    return Path(record_path).with_suffix(".loadgen")


def _serve_cell(
    key: CellKey,
    engine: Engine,
    inputs: CellInputs,
    settings: MeasureSettings,
    serving: ServingSettings,
    logs: Path,
    lock: MachineLock,
    base: dict[str, Any],
    check: dict[str, Any],
) -> CellRecord:
    """A server or offline cell: LoadGen drives the prepared, parity-checked engine through the dynamic
    batcher (inferbench.scenarios.serving), under the exclusive machine lock. Its record is ok when the run that
    answers the cell is valid by LoadGen's rules, invalid (with LoadGen's reasons) otherwise."""
    specs, _ = seeded_batches(key, inputs, settings)  # drawn by the job already: the specs come with them
    # the query sample library: the workload's seeded inputs, one row per sample
    library = make_inputs(specs, serving.samples, key.seq_len, settings.seed)

    def run_batch(indices: np.ndarray) -> None:
        rows = np.resize(indices, key.batch_size)  # padded to the prepared batch with the batch's own rows
        engine.to_numpy(engine.run(engine.stage({name: array[rows] for name, array in library.items()})))

    with lock.exclusively():
        window_start = time.time()
        result = measure_serving(key.scenario, run_batch, key.batch_size, serving.samples, serving, logs)
        window = [window_start, time.time()]
    answer = result["result"] or {}
    if check["problems"]:
        reason = f"output differs from FP32 eager: {'; '.join(check['problems'])}"
    elif not answer:  # no LoadGen run could meet the bound (inferbench.scenarios.serving.measure_serving says why)
        reason = f"no server run can meet p99 <= {serving.latency_bound_ms:g} ms: " + (
            result.get("unreachable") or result.get("stopped") or "no run"
        )
    elif not answer["valid"]:
        reason = (
            f"LoadGen: {why_invalid(answer)}"
            + (
                f" (no target QPS of the {len(result['search'])}-run search met p99 <= {serving.latency_bound_ms:g} ms)"
                if result.get("search") and len(result["search"]) > 1
                else ""
            )
            + (f"; {result['stopped']}" if result.get("stopped") else "")
        )
    else:
        reason = None
    return CellRecord(
        **base,
        status="ok" if reason is None else "invalid",
        reason=reason,
        parity=check["parity"],
        timing=f"loadgen_{key.scenario}",
        timing_description=SERVING_BOUNDARY,
        items_per_call=key.batch_size,
        n_iters=answer.get("query_count"),
        measured_windows_unix=[window],
        serving=result,
        memory_mb={
            "host_peak_rss": memory.host_peak_rss_mb(),
            "host_rss_at_start": memory.host_rss_at_start_mb(),
            "gpu_peak_allocated": memory.gpu_peak_allocated_mb() if key.device == "cuda" else None,
        },
        cold_start_s=check["cold"],
        engine=engine.describe() | {"attention": engine.attention},
        environment=fingerprint(include_gpu=key.device == "cuda") | {"loadgen": answer.get("loadgen")},
    )


def profile_cell(
    key: CellKey,
    variant: dict[str, Any],
    inputs: CellInputs,
    settings: MeasureSettings,
    out: Path,
    lock: MachineLock,
    n_calls: int = 10,
    top: int = 12,
) -> dict[str, Any]:
    """Profile a cell's engine (after the same preparation and a warm-up) and write ``out``: the top
    operators by time and the name of the trace written beside it. Like a record, it is written
    whatever happens, with a status and reason."""
    out_dir = Path(out).parent
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in [*out_dir.glob("*.pt.trace.json"), *out_dir.glob("ort_profile*.json")]:
        old.unlink()  # one trace per profile: a re-run replaces, never piles up
    result: dict[str, Any] = {"cell_id": key.cell_id, "n_calls": n_calls}
    try:
        reason = unavailable(key, variant, inputs)
        if reason:
            result |= {"status": "unavailable", "reason": reason}
        else:
            engine, batches, _ = prepare_engine(key, variant, inputs, settings)
            staged = engine.stage(batches[0])
            for _ in range(3):
                engine.run(staged)
            engine.synchronize()
            with lock.exclusively():
                result |= {"status": "ok", **engine.profile(batches[0], n_calls, out_dir, top)}
    except Exception as error:
        result |= {"status": "failed", "reason": failure_reason(error)}
    write_json(out, result)
    return result
