"""Building a TensorRT plan for one precision and static shape (rule ``build_tensorrt_engine``).

The profile is static at the cell's shape (min = opt = max): each cell gets the engine TensorRT
would choose for exactly that shape. FP16 lets TensorRT pick fp16 kernels; INT8 calibrates with
the entropy calibrator on real inputs where the workload has them (the tabular datasets), seeded
synthetic inputs otherwise (random-weight models have no data distribution to calibrate on).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from inferbench.core.fsutil import atomic_path
from inferbench.engines.tensorrt.plans import native_unavailable_reason, timing_cache_path
from inferbench.models.registry import InputSpec, make_inputs

log = logging.getLogger(__name__)

Shape = tuple[int, ...]


def profile_shapes(inputs: Iterable[InputSpec], batch: int, seq: int) -> dict[str, tuple[Shape, Shape, Shape]]:
    """min, opt, max shape per input: all three the cell's shape (a static profile)."""
    shapes = {}
    for spec in inputs:
        shape = spec.concrete_shape(batch, seq)
        shapes[spec.name] = (shape, shape, shape)
    return shapes


def calibration_batches(
    inputs: tuple[InputSpec, ...],
    batch: int,
    seq: int,
    n_batches: int,
    features: np.ndarray | None = None,
    seed: int = 1,
) -> list[dict[str, np.ndarray]]:
    """INT8 calibration inputs of the engine's shape: consecutive rows of ``features`` (real, encoded
    data) where given, else seeded synthetic batches (seeds other than the parity check's)."""
    if features is not None:
        if len(inputs) != 1:
            raise ValueError("real calibration features apply to single-input (tabular) models")
        rows = np.asarray(features, dtype=inputs[0].dtype)
        if len(rows) < batch:
            raise ValueError(f"INT8 calibration needs at least {batch} rows of data, the dataset has {len(rows)}")
        n_batches = min(n_batches, len(rows) // batch)
        return [{inputs[0].name: rows[i * batch : (i + 1) * batch]} for i in range(n_batches)]
    return [make_inputs(inputs, batch, seq, seed + i) for i in range(n_batches)]


def trt_logger() -> Any:
    import tensorrt as trt

    return trt.Logger(trt.Logger.WARNING)


def _make_calibrator(batches: list[dict[str, np.ndarray]], cache: Path) -> Any:
    """An entropy calibrator feeding ``batches`` from device memory; its table is cached beside the plan."""
    import tensorrt as trt
    import torch

    class Calibrator(trt.IInt8EntropyCalibrator2):
        def __init__(self) -> None:
            trt.IInt8EntropyCalibrator2.__init__(self)
            self._batches: Iterator[dict[str, np.ndarray]] = iter(batches)
            self._alive: list[torch.Tensor] = []  # device copies must outlive the call that returned them

        def get_batch_size(self) -> int:
            return len(next(iter(batches[0].values())))

        def get_batch(self, names: list[str]) -> list[int] | None:
            batch = next(self._batches, None)
            if batch is None:
                return None
            self._alive = [torch.from_numpy(np.ascontiguousarray(batch[name])).cuda() for name in names]
            return [tensor.data_ptr() for tensor in self._alive]

        def read_calibration_cache(self) -> bytes | None:
            return cache.read_bytes() if cache.exists() else None

        def write_calibration_cache(self, table: bytes) -> None:
            with atomic_path(cache) as tmp:
                tmp.write_bytes(bytes(table))

    return Calibrator()


def build_engine(
    onnx: str | Path,
    inputs: tuple[InputSpec, ...],
    precision: str,
    batch: int,
    seq: int,
    out: str | Path,
    calibration: list[dict[str, np.ndarray]] | None = None,
    workspace_gib: float = 8.0,
) -> dict[str, Any]:
    """Build and serialize a TensorRT engine for one precision and static shape; returns build facts."""
    reason = native_unavailable_reason("cuda", precision)
    if reason:
        raise RuntimeError(f"cannot build a TensorRT engine here: {reason}")
    import tensorrt as trt

    out = Path(out)
    logger = trt_logger()
    builder = trt.Builder(logger)
    network = builder.create_network(0)  # explicit batch is the only mode in TensorRT 10
    log.info("building a %s TensorRT engine from %s (batch %d, sequence %d)", precision, onnx, batch, seq)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise RuntimeError(f"TensorRT could not parse {onnx}: {errors}")

    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(workspace_gib * (1 << 30)))
    timing_file = timing_cache_path(out)
    timing_cache = config.create_timing_cache(timing_file.read_bytes() if timing_file.exists() else b"")
    config.set_timing_cache(timing_cache, ignore_mismatch=False)

    profile = builder.create_optimization_profile()
    for name, (low, opt, high) in profile_shapes(inputs, batch, seq).items():
        profile.set_shape(name, low, opt, high)
    config.add_optimization_profile(profile)
    if precision in ("fp16", "int8"):
        config.set_flag(trt.BuilderFlag.FP16)  # int8 engines fall back to fp16, not fp32, where int8 is slower
    if precision == "int8":
        if not calibration:
            raise ValueError("an INT8 engine needs calibration batches")
        config.set_flag(trt.BuilderFlag.INT8)
        config.int8_calibrator = _make_calibrator(calibration, out.with_suffix(".calib"))
        config.set_calibration_profile(profile)

    start = time.perf_counter()
    serialized = builder.build_serialized_network(network, config)
    build_s = time.perf_counter() - start
    if serialized is None:
        raise RuntimeError(f"TensorRT failed to build {out.name}; see the TensorRT log above")
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp:
        tmp.write_bytes(bytes(serialized))
    with atomic_path(timing_file) as tmp:
        tmp.write_bytes(bytes(config.get_timing_cache().serialize()))
    return {"tensorrt": trt.__version__, "build_s": build_s, "plan_bytes": out.stat().st_size}
