"""Profiling a cell's engine in a job of its own (config ``profile.cells``), never inside a timed loop:
after the same preparation and a warm-up, ``n_calls`` calls under the engine's profiler (torch.profiler,
or ONNX Runtime's own), a trace written beside the table of the top operators. The profiled calls hold
what a cell's timed loop holds (inferbench.machine.host_partition.measuring): on a partitioned machine a
GPU profile runs on its GPU's cores under the GPUs' measuring lock (its own GPU's where the GPUs time at
once), the other GPUs' jobs setting up meanwhile; elsewhere the machine lock exclusively."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inferbench.core.errors import failure_reason
from inferbench.core.fsutil import write_json
from inferbench.machine.host_partition import measuring
from inferbench.machine.lock import MachineLock
from inferbench.scenarios.prepare import CellRequest, prepare_engine, unavailable


def profile_cell(
    request: CellRequest, out: Path, lock: MachineLock, n_calls: int = 10, top: int = 12
) -> dict[str, Any]:
    """Profile a cell's engine and write ``out``: the top operators by time and the name of the trace
    written beside it. Like a record, it is written whatever happens, with a status and reason."""
    key = request.key
    out_dir = Path(out).parent
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in [*out_dir.glob("*.pt.trace.json"), *out_dir.glob("ort_profile*.json")]:
        old.unlink()  # one trace per profile: a re-run replaces, never piles up
    result: dict[str, Any] = {"cell_id": key.cell_id, "n_calls": n_calls}
    try:
        reason = unavailable(request)
        if reason:
            result |= {"status": "unavailable", "reason": reason}
        else:
            engine, _, batches, _ = prepare_engine(request)
            staged = engine.stage(batches[0])
            for _ in range(3):
                engine.run(staged)
            engine.synchronize()
            with measuring(lock, key.device, request.settings.cpu_affinity) as held:
                result |= {"status": "ok", **engine.profile(batches[0], n_calls, out_dir, top), "measuring": held}
    except Exception as error:
        result |= {"status": "failed", "reason": failure_reason(error)}
    write_json(out, result)
    return result
