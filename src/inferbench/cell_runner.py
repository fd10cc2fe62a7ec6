"""Run one cell: prepare the engine, stage inputs, measure under the exclusive machine lock, and
write exactly one record, whatever happens (ok, unavailable, oom or failed)."""

from __future__ import annotations

import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inferbench.cells import CellKey, CellRecord
from inferbench.engines.registry import engine_info, load_engine_class
from inferbench.environment import fingerprint
from inferbench.fsutil import atomic_path, read_json
from inferbench.lock import MachineLock
from inferbench.measure import memory
from inferbench.measure.stats import latency_stats
from inferbench.measure.timing import make_timer, measure
from inferbench.models.registry import InputSpec, make_inputs
from inferbench.parity import compare, load_reference, violations

END_TO_END = (
    "stage host arrays where the engine computes, run, and bring the output back as a host float32 "
    "array, timed on the host clock after synchronising"
)


@dataclass(frozen=True)
class MeasureSettings:
    warmup_s: float = 0.3
    min_time_s: float = 1.0
    min_iters: int = 5
    seed: int = 0


def samples_path(record_path: str | Path) -> Path:
    """Raw per-call latencies (seconds, float32) live beside the record."""
    return Path(record_path).with_suffix(".samples.npy")


def input_specs(model_meta: dict[str, Any]) -> tuple[InputSpec, ...]:
    return tuple(InputSpec(**{**i, "shape": tuple(i["shape"])}) for i in model_meta["inputs"])


def is_oom(error: BaseException) -> bool:
    text = f"{type(error).__name__}: {error}".lower()
    return "outofmemory" in text.replace(" ", "") or "out of memory" in text or "failed to allocate" in text


def run_cell(
    key: CellKey,
    variant: dict[str, Any],
    model_meta_path: Path | None,
    artifact: Path | None,
    settings: MeasureSettings,
    out: Path,
    lock: MachineLock,
    reference: Path | None = None,
    tolerance: dict[str, float] | None = None,
) -> CellRecord:
    impl = variant["engine"]
    info = engine_info(impl)
    base = {"key": key, "engine_impl": impl, "options": dict(variant)}
    samples = np.empty(0)
    try:
        record, samples = _measure_cell(
            key, variant, model_meta_path, artifact, settings, lock, base, reference, tolerance or {}
        )
    except Exception as error:  # a cell that breaks is data, not a crash of the sweep
        traceback.print_exc(file=sys.stderr)
        status = "oom" if is_oom(error) else "failed"
        record = CellRecord(
            **base,
            status=status,
            reason=f"{type(error).__name__}: {error}"[:2000],
            environment=fingerprint(include_gpu=key.device == "cuda"),
        )
    record.engine.setdefault("description", info.description)
    with atomic_path(samples_path(out)) as tmp, tmp.open("wb") as fh:
        np.save(fh, samples.astype(np.float32))  # 7 significant digits: 0.1 µs at 1 s, half the bytes
    record.save(out)
    return record


def _measure_cell(
    key: CellKey,
    variant: dict[str, Any],
    model_meta_path: Path | None,
    artifact: Path | None,
    settings: MeasureSettings,
    lock: MachineLock,
    base: dict[str, Any],
    reference: Path | None,
    tolerance: dict[str, float],
) -> tuple[CellRecord, np.ndarray]:
    try:
        engine_cls = load_engine_class(variant["engine"])
    except ImportError as error:
        reason = f"engine {variant['engine']!r} cannot be imported here: {error}"
        return CellRecord(**base, status="unavailable", reason=reason, environment=fingerprint(False)), np.empty(0)
    reason = engine_cls.unavailable_reason(key.device, key.precision)
    if reason:
        return CellRecord(
            **base, status="unavailable", reason=reason, environment=fingerprint(include_gpu=False)
        ), np.empty(0)

    engine = engine_cls(key.device, key.precision, key.threads, variant)
    specs = input_specs(read_json(model_meta_path)) if model_meta_path else ()
    cold: dict[str, float] = {}
    batch = make_inputs(specs, key.batch_size, key.seq_len, settings.seed)
    start = time.perf_counter()
    engine.prepare(artifact, specs, batch)
    cold["prepare"] = time.perf_counter() - start
    staged = engine.stage(batch)
    start = time.perf_counter()
    engine.run(staged)
    engine.synchronize()
    cold["first_call"] = time.perf_counter() - start
    cold |= engine.cold_start_s

    parity_metrics, problems = None, []
    if engine.computes and reference is not None:
        ref_inputs, ref_output = load_reference(reference, key.batch_size)
        output = engine.run(engine.stage(ref_inputs))
        engine.synchronize()
        parity_metrics = compare(engine.to_numpy(output), ref_output)
        problems = violations(parity_metrics, tolerance)
        parity_metrics["tolerance"] = tolerance
        staged = engine.stage(batch)  # engines with static buffers (CUDA graphs) take the timed batch again

    timer = make_timer(engine.timer, engine.synchronize)
    if key.device == "cuda":
        memory.reset_gpu_peak()
    with lock.exclusively():
        result = measure(lambda: engine.run(staged), timer, settings.warmup_s, settings.min_time_s, settings.min_iters)
        # the second boundary: host arrays in, a host array out, host clock; engines whose run is
        # already host to host have only this one
        end_to_end = None
        if engine.timing != "end_to_end":
            end_to_end = measure(
                lambda: engine.to_numpy(engine.run(engine.stage(batch))),
                make_timer("host", engine.synchronize),
                0.0,  # the engine is warm: one untimed call warms the staging and fetching path
                settings.min_time_s,
                settings.min_iters,
            )
    stats = latency_stats(result.samples_s, key.batch_size)
    e2e_stats = latency_stats(end_to_end.samples_s, key.batch_size) if end_to_end else stats
    record = CellRecord(
        **base,
        status="invalid" if problems else "ok",
        reason=f"output differs from FP32 eager: {'; '.join(problems)}" if problems else None,
        parity=parity_metrics,
        timing=engine.timing,
        timing_description=engine.timing_description,
        latency_ms=stats["latency_ms"],
        latency_ci95_ms=stats["latency_ci95_ms"],
        cv=stats["cv"],
        throughput_per_s=stats["throughput_per_s"],
        n_iters=stats["n_iters"],
        warmup_iters=result.warmup_iters,
        measured_s=result.measured_s,
        memory_mb={
            "host_peak_rss": memory.host_peak_rss_mb(),
            "gpu_peak_allocated": memory.gpu_peak_allocated_mb() if key.device == "cuda" else None,
        },
        end_to_end={
            "description": END_TO_END,
            **{k: e2e_stats[k] for k in ("latency_ms", "latency_ci95_ms", "cv", "n_iters", "throughput_per_s")},
        },
        cold_start_s=cold,
        engine=engine.describe(),
        environment=fingerprint(include_gpu=key.device == "cuda" or "torch" in sys.modules),
    )
    return record, result.samples_s
