"""Native TensorRT: a serialized engine built from the fp32 ONNX export, cached, and run on device buffers.

The plan is built by its own workflow rule (``build-trt-engine``), once per workload x precision x
shape profile, under a folder named after the GPU model and the TensorRT version
(``results/engines/tensorrt/<gpu>-trt<version>/``): a plan is only valid for the GPU and TensorRT
that built it. Builds share a timing cache in that folder, so later builds skip kernel timing.

The profile is static at the cell's shape (min = opt = max): each cell gets the engine TensorRT
would choose for exactly that shape. FP16 lets TensorRT pick fp16 kernels; INT8 calibrates with
the entropy calibrator on real inputs where the workload has them (the tabular datasets), seeded
synthetic inputs otherwise (random-weight models have no data distribution to calibrate on).

``tensorrt`` is imported only inside the functions that need it, so everything else here (paths,
profiles, availability) works and is tested on machines without it.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import logging
import re
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from inferbench.core.fsutil import atomic_path
from inferbench.engines.base import Engine, cuda_unavailable_reason
from inferbench.models.registry import InputSpec, make_inputs

log = logging.getLogger(__name__)

ENGINE_ROOT = Path("results/engines/tensorrt")
PRECISIONS = ("fp32", "fp16", "int8")
Shape = tuple[int, ...]


def tensorrt_unavailable_reason() -> str | None:
    """TensorRT itself (libnvinfer), which ONNX Runtime's provider and the native engine both need."""
    if importlib.util.find_spec("tensorrt") is not None:
        return None
    for name in ("libnvinfer.so.10", "libnvinfer.so.8", "libnvinfer.so"):
        try:
            ctypes.CDLL(name)
            return None
        except OSError:
            continue
    return "TensorRT is not installed here (no `tensorrt` Python package and no libnvinfer shared library)"


def native_unavailable_reason(device: str, precision: str) -> str | None:
    """Why the native engine cannot run a cell here, or None."""
    if device != "cuda":
        return "TensorRT runs on NVIDIA GPUs only"
    if precision not in PRECISIONS:
        return f"TensorRT engines here are built for {', '.join(PRECISIONS)}, not {precision}"
    if importlib.util.find_spec("tensorrt") is None:
        return "the `tensorrt` Python package is not installed (pip install tensorrt, on a machine with an NVIDIA GPU)"
    return cuda_unavailable_reason()


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-")


def target_name(gpu_name: str, trt_version: str) -> str:
    """The cache folder of one GPU model and TensorRT version, e.g. ``nvidia-h100-80gb-hbm3-trt10.9.0``."""
    return f"{_slug(gpu_name)}-trt{_slug(trt_version)}"


def current_target() -> str | None:
    """The cache folder for this machine's first GPU and installed TensorRT, or None where either is missing."""
    if importlib.util.find_spec("tensorrt") is None:
        return None
    from importlib.metadata import PackageNotFoundError, version

    try:
        trt_version = version("tensorrt")
    except PackageNotFoundError:
        import tensorrt

        trt_version = tensorrt.__version__
    import torch

    if not torch.cuda.is_available():
        return None
    return target_name(torch.cuda.get_device_name(0), trt_version)


def plan_path(
    target: str, variant: str, workload: str, precision: str, batch: int, seq: int, root: Path = ENGINE_ROOT
) -> Path:
    """Where one engine is cached: per GPU and TensorRT version, engine variant (its build options),
    workload, precision and shape."""
    return root / target / variant / f"{workload}.{precision}.b{batch}-s{seq}.plan"


def timing_cache_path(plan: str | Path) -> Path:
    """One timing cache per target folder (GPU x TensorRT version), shared by all its builds."""
    return Path(plan).parent.parent / "timing.cache"


def build_report_path(plan: str | Path) -> Path:
    return Path(plan).with_suffix(".json")


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


def _trt_logger() -> Any:
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
    logger = _trt_logger()
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


class TensorRTEngine(Engine):
    """Runs a serialized plan with ``execute_async_v3`` on PyTorch's current stream; inputs and
    outputs are device tensors bound by address (boundary ``device``)."""

    impl = "tensorrt"
    graph = "tensorrt"
    timer = "cuda_events"
    launches_async = True

    @classmethod
    def unavailable_reason(cls, device: str, precision: str) -> str | None:
        return native_unavailable_reason(device, precision)

    def prepare(self, artifact: Path | None, inputs: tuple[InputSpec, ...], example: dict[str, np.ndarray]) -> None:
        import tensorrt as trt
        import torch

        if artifact is None or Path(artifact).suffix != ".plan":
            raise ValueError(f"the tensorrt engine runs a serialized .plan built by the workflow, got {artifact}")
        self._torch = torch
        report = build_report_path(artifact)
        if report.exists():  # the build ran in its own job; its cost belongs to this cell's cold start
            self.cold_start_s["build"] = json.loads(report.read_text())["build_s"]
        with self.cold_start("deserialize"):
            self.runtime = trt.Runtime(_trt_logger())
            self.engine = self.runtime.deserialize_cuda_engine(Path(artifact).read_bytes())
            if self.engine is None:
                raise RuntimeError(f"{artifact} does not deserialize (built for another GPU or TensorRT version?)")
            self.context = self.engine.create_execution_context()
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        self.input_names = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self.output_names = [n for n in names if n not in self.input_names]
        self.input_dtypes = {n: trt.nptype(self.engine.get_tensor_dtype(n)) for n in self.input_names}
        for name in self.input_names:
            self.context.set_input_shape(name, example[name].shape)
        self.outputs = {}
        for name in self.output_names:
            dtype = torch.from_numpy(np.empty(0, trt.nptype(self.engine.get_tensor_dtype(name)))).dtype
            shape = tuple(self.context.get_tensor_shape(name))
            self.outputs[name] = torch.empty(shape, dtype=dtype, device="cuda")
            self.context.set_tensor_address(name, self.outputs[name].data_ptr())
        self.version = trt.__version__

    def stage(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        staged = {}
        for name in self.input_names:
            array = np.ascontiguousarray(batch[name], dtype=self.input_dtypes[name])
            staged[name] = self._torch.from_numpy(array).cuda()
        self.synchronize()
        return staged

    def run(self, staged: dict[str, Any]) -> Any:
        for name, tensor in staged.items():  # timed calls rotate among staged batches: bind this one's
            self.context.set_tensor_address(name, tensor.data_ptr())
        if not self.context.execute_async_v3(self._torch.cuda.current_stream().cuda_stream):
            raise RuntimeError("TensorRT execute_async_v3 failed")
        return self.outputs[self.output_names[0]]

    def synchronize(self) -> None:
        self._torch.cuda.synchronize()

    def to_numpy(self, output: Any) -> np.ndarray:
        return output.detach().float().cpu().numpy()

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "tensorrt": self.version}
