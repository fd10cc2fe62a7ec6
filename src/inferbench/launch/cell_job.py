"""A cell's job as the workflow runs it (verb ``run-cell``): the libraries its engine needs imported
here, once and timed, then the cell measured in fresh processes (inferbench.launch.processes), each
running inferbench.scenarios.run.run_cell, merged into one record.

A cell that compiles is primed first, in a job of its own (verb ``prime-cell``, ``prime_cell``): one
fresh process compiles it from nothing into the caches its measuring processes then load, and times
nothing. That job needs no GPU slot of its own, so on one GPU it runs beside other cells' jobs rather
than in their queue; it holds the machine lock shared, as all preparation does, so no timed loop runs
while it compiles."""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import os
import time
from collections.abc import Sequence
from pathlib import Path

from inferbench.catalog.scenarios import scenario_info
from inferbench.catalog.workloads import workload_info
from inferbench.core.cells import CellKey, CellRecord
from inferbench.core.environment import package_source_hash
from inferbench.core.errors import UserError
from inferbench.core.fsutil import read_json
from inferbench.core.storage import load_samples, loadgen_dir, save_cell
from inferbench.engines.registry import engine_info
from inferbench.launch.processes import (
    CellProcesses,
    end_on_sigterm,
    import_libraries,
    primed_caches,
    run_cells_in_turn,
    run_one_process,
    start_method,
)
from inferbench.launch.warm import PRELOADED, preloaded_import_s
from inferbench.machine.host_partition import gpus_not_measuring
from inferbench.machine.lock import MachineLock
from inferbench.scenarios.prepare import CellInputs, CellRequest, seeded_batches
from inferbench.scenarios.run import failed_record, run_cell

#: imported before the processes fork, outside every import time a record counts: the statistics of
#: every process's samples (scipy takes seconds to import on a small machine)
HARNESS_LIBRARIES = ("scipy.stats",)


def measure_cell(
    request: CellRequest,
    out: Path,
    lock: MachineLock,
    imports_started: float | None = None,
    job_code: str | None = None,
    primed: Path | None = None,
) -> CellRecord:
    """The cell as the workflow measures it: the libraries its engine needs imported here, once and
    timed (``cold_start_s.import``: from ``imports_started``, a ``time.perf_counter()`` the verb took as
    it started, so that everything the job imported counts), then ``run_cell`` in
    ``settings.repeats`` fresh processes forked from this one (``host_bound_repeats`` for a GPU cell
    found host-bound), merged into one record at ``out``, which names the code that made it (``job_code``:
    the job's code identity, as the workflow computed it; and the package source's hash). ``lock`` is
    held shared except while a process runs (each takes its own). A server or offline cell runs in one
    fresh process (its LoadGen runs are many seconds each); LoadGen's logs go to ``loadgen_dir(out)``.
    ``primed``: the record of the cell's priming job (``prime_cell``), where it has one."""
    return measure_in_turn([(request, out, primed)], lock, imports_started, job_code)[0]


def measure_in_turn(
    cells: Sequence[tuple[CellRequest, Path, Path | None]],
    lock: MachineLock,
    imports_started: float | None = None,
    job_code: str | None = None,
) -> list[CellRecord]:
    """Cells as ``measure_cell`` measures one, each ``(request, out, primed)``, one process of each in turn
    (inferbench.launch.processes.run_in_turn): a job of cells interleaved (a study's ``interleave``) meets
    what moves the host over minutes in every cell alike. Their libraries are imported once, before the
    first process: every record's ``cold_start_s.import`` is the time all of them took."""
    end_on_sigterm()  # a cancelled job leaves no process, scratch folder or lock behind
    imported = [_import_engine_libraries(request, imports_started) for request, _, _ in cells]
    job_import_s = max((s for s in imported if s is not None), default=None)
    makers = [
        (functools.partial(_cell_processes, request, out, lock.path), out, primed) for request, out, primed in cells
    ]
    merged = run_cells_in_turn(makers, lock)
    others = [request.key.cell_id for request, _, _ in cells]
    records = []
    for (request, out, _), (record, samples), import_s in zip(cells, merged, imported, strict=True):
        if import_s is not None:  # None: a library of its engine is missing (the record says which)
            record.cold_start_s = {"import": job_import_s, **record.cold_start_s}
        record.launcher = "warm" if PRELOADED else "cold"
        record.code = {"job": job_code, "package": package_source_hash()}
        if PRELOADED:
            record.environment["imports_preloaded_s"] = dict(PRELOADED)
        if len(cells) > 1 and record.repeats is not None:
            record.repeats["interleaved_with"] = [cell for cell in others if cell != request.key.cell_id]
        save_cell(out, record, samples)
        if scenario_info(request.key.scenario).serves:
            keep_loadgen_dir(loadgen_dir(out), record)
        records.append(record)
    return records


def interleaved_record(folder: Path, key: CellKey) -> Path:
    """Where a job of cells measured in turn (``measure_in_turn``) keeps one cell's record: under ``folder``, at
    the cell's own path (``CellKey.relpath``)."""
    return folder / key.relpath


def take_interleaved(folder: Path, key: CellKey, out: Path) -> CellRecord:
    """The record a job of cells measured in turn wrote for ``key`` in ``folder``, and its samples, saved at
    ``out``: the cell's own job measures nothing."""
    source = interleaved_record(folder, key)
    if not source.is_file():
        raise UserError(f"{source} is missing: the job that measures {key.cell_id} in turn with others wrote no "
                        f"record for it (see its log under logs/interleaved_cells/); re-run the workflow")  # fmt: skip
    record = CellRecord.load(source)  # at the cell's own path: a ValueError unless the record is that cell's
    save_cell(out, record, load_samples(source))
    return record


def _cell_processes(request: CellRequest, out: Path, lock_path: Path, scratch: Path) -> CellProcesses:
    """The fresh processes that measure one cell: ``settings.repeats`` of them (``host_bound_repeats`` for a GPU
    cell found host-bound), more while their p50s part (``parted``); one for a server or offline cell."""
    key, inputs, settings = request.key, request.inputs, request.settings
    # drawn here, once: the processes fork from this one and share them (spawned ones draw their own)
    with contextlib.suppress(Exception):  # a broken model meta is the processes' to record
        seeded_batches(key, inputs, settings)
    serves = scenario_info(key.scenario).serves
    logs = loadgen_dir(out) if serves else None
    return CellProcesses(
        # a module-level function and picklable arguments: the processes may have to be spawned
        functools.partial(_measure_in_own_process, request, lock_path, logs, out),
        scratch,
        repeats=1 if serves else settings.repeats,
        host_bound_repeats=settings.host_bound_repeats if key.device == "cuda" and not serves else 0,
        stall_timeout_s=settings.stall_timeout_s,
        failed=functools.partial(failed_record, request),
        # calls timed one at a time (inference or training steps), where a p50 is a call's: a request under
        # load or a generated sequence has figures of its own to part by
        parted=(settings.unstable_spread_pct, settings.max_repeats) if key.scenario == "single" else None,
    )


def prime_cell(request: CellRequest, out: Path, lock: MachineLock, job_code: str | None = None) -> CellRecord:
    """A compiling cell's first process, in a job of its own: the libraries imported here, then one fresh
    process that prepares the engine (its compile from nothing, into ``primed_caches(out)``) and times
    nothing; its record at ``out`` says how long that took, or why it failed. Where the run gives each
    GPU cores of its own, no GPU times its calls meanwhile either (``gpus_not_measuring``): the compile
    runs the model on a GPU."""
    end_on_sigterm()
    _import_engine_libraries(request)
    one_process = functools.partial(_prime_in_own_process, request, lock.path)
    context = multiprocessing.get_context(start_method())
    record, _ = run_one_process(
        context,
        one_process,
        out,
        0,
        primed_caches(out),
        lock,
        request.settings.stall_timeout_s,
        functools.partial(failed_record, request),
    )
    record.code = {"job": job_code, "package": package_source_hash()}
    save_cell(out, record, {})
    return record


def _import_engine_libraries(request: CellRequest, imports_started: float | None = None) -> float | None:
    """Import what the cell's engine needs, once, before its processes fork; the seconds that took
    (``cold_start_s.import``: from ``imports_started`` where given), or None where a library is missing (the
    processes record the cell ``unavailable`` and why)."""
    key, inputs = request.key, request.inputs
    info = engine_info(request.variant["engine"])
    if key.device == "cpu":
        # a CPU cell's processes see no GPU: nothing they import initialises CUDA in this process (which
        # would make them spawned, importing everything again), and no library picks the GPU up
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    modules = [*info.libraries, *(["torch"] if key.device == "cuda" else []), info.module]
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
    import_libraries(HARNESS_LIBRARIES)
    return import_s


def _prime_in_own_process(request: CellRequest, lock_path: Path, path: Path, index: int) -> CellRecord:
    """The priming process: ``run_cell`` timing nothing, under a machine lock of its own held shared and,
    after it (the order every GPU cell takes them in), the GPUs' measuring locks."""
    own_lock = MachineLock(lock_path)
    own_lock.shared()
    try:
        with gpus_not_measuring(own_lock):
            return run_cell(request, path, own_lock, timed=False)
    finally:
        own_lock.close()


def keep_loadgen_dir(logs: Path, record: CellRecord) -> None:
    """A serving cell's rule declares the folder of LoadGen's logs: a cell that ended before any LoadGen
    run (its bound out of reach, its search stopped, its engine unavailable) leaves one that says why, so
    that Snakemake does not stop the run over a missing output."""
    logs.mkdir(parents=True, exist_ok=True)
    if not any(logs.iterdir()):
        (logs / "no_loadgen_run.txt").write_text(f"status: {record.status}\nreason: {record.reason or '-'}\n")


def _measure_in_own_process(
    request: CellRequest, lock_path: Path, logs: Path | None, cell_path: Path, path: Path, index: int
) -> CellRecord:
    """The cell's fresh process number ``index`` (0: the first): ``run_cell`` under a machine lock of its
    own, its record at ``path`` (a scratch folder's) for the cell's at ``cell_path``."""
    own_lock = MachineLock(lock_path)
    own_lock.shared()
    try:
        return run_cell(request, path, own_lock, logs, cell_path, first_process=index == 0)
    finally:
        own_lock.close()


def _import_model_code(key: CellKey, artifact_kind: str, inputs: CellInputs) -> None:
    """Build the cell's model on the meta device (no weights are allocated): the model code that is
    imported lazily (timm's, transformers') is then loaded before the processes fork.

    Not transformers' for a GPU cell: its modeling code imports torchao (through its quantizers), whose
    import asks torch whether Triton can run, which initialises CUDA, and a process forked after that
    cannot use the GPU. There the measuring processes load it themselves (in ``load_model``). A CPU
    cell's job sees no GPU (``measure_cell``), so there the import initialises nothing."""
    meta = read_json(inputs.model_meta) if inputs.model_meta is not None else {}
    if artifact_kind != "checkpoint" or "name" not in meta:
        return
    if key.device == "cuda" and workload_info(key.workload).kind == "text":
        return
    import torch

    from inferbench.models.registry import create_model

    with torch.device("meta"):
        create_model(meta["name"], **meta.get("arch", {}))
