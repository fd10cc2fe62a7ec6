"""Engine implementations by name, with what they can run, without importing any of them.

Heavy libraries (torch, onnxruntime, tensorrt) are imported only when an engine class is loaded,
so the grid and the Snakefile can reason about engines in milliseconds.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from inferbench.engines.base import Engine


#: what ``Engine.computation`` says of a cell, one summary column each: options that change what it computes
COMPUTATION_KEYS = ("graph", "precision_mode", "channels_last", "compile_mode", "cuda_graph", "io_binding", "tf32")


@dataclass(frozen=True)
class EngineInfo:
    target: str  # "module:Class"
    devices: tuple[str, ...]
    precisions: tuple[str, ...]
    #: what the engine is prepared from; trt_plan: a TensorRT engine built by the workflow from the fp32 ONNX
    artifact: Literal["checkpoint", "onnx", "trt_plan", "none"]
    description: str
    #: ONNX file variant per precision (results/onnx/<workload>.<variant>.onnx); absent: the fp32 export
    onnx_variants: dict[str, str] = field(default_factory=dict)
    #: inference, or train: a timed call is one training step or epoch
    mode: Literal["inference", "train"] = "inference"
    #: workload kinds (see inferbench.workloads) the engine can run
    workload_kinds: tuple[str, ...] = ("tabular", "vision", "text")
    #: the engine reads the workload's processed dataset (given to the cell as an input)
    needs_dataset: bool = False
    #: libraries its cells import, imported (and timed) once before the cell's fresh processes start
    libraries: tuple[str, ...] = ("torch",)


ALL_PRECISIONS = ("fp32", "fp16", "bf16")
ENGINES: dict[str, EngineInfo] = {
    "noop": EngineInfo(
        "inferbench.engines.noop:NoopEngine",
        ("cpu", "cuda"),
        ALL_PRECISIONS,
        "none",
        "returns a constant: measures the harness's own overhead",
        libraries=(),
    ),
    "torch_eager": EngineInfo(
        "inferbench.engines.torch_eager:TorchEager",
        ("cpu", "cuda"),
        ALL_PRECISIONS,
        "checkpoint",
        "PyTorch eager; fp16/bf16 through autocast (or cast weights)",
    ),
    "torchscript": EngineInfo(
        "inferbench.engines.torchscript:TorchScript",
        ("cpu", "cuda"),
        ALL_PRECISIONS,
        "checkpoint",
        "TorchScript: trace, freeze, optimize_for_inference; fp16/bf16 weights",
    ),
    "torch_compile": EngineInfo(
        "inferbench.engines.torch_compile:TorchCompile",
        ("cpu", "cuda"),
        ALL_PRECISIONS,
        "checkpoint",
        "torch.compile (Inductor), mode configurable; compile time recorded",
    ),
    "torch_cudagraph": EngineInfo(
        "inferbench.engines.torch_cudagraph:TorchCudaGraph",
        ("cuda",),
        ALL_PRECISIONS,
        "checkpoint",
        "the eager kernels captured once in a CUDA graph and replayed (static shapes)",
    ),
    "ort_cpu": EngineInfo(
        "inferbench.engines.ort:OrtCpu",
        ("cpu",),
        ("fp32", "int8"),
        "onnx",
        "ONNX Runtime, CPU execution provider; int8 through dynamic quantization",
        {"int8": "int8"},
        libraries=("onnxruntime",),
    ),
    "ort_cuda": EngineInfo(
        "inferbench.engines.ort:OrtCuda",
        ("cuda",),
        ("fp32", "fp16"),
        "onnx",
        "ONNX Runtime, CUDA execution provider, IO binding (or host-to-host)",
        {"fp16": "fp16"},
        libraries=("torch", "onnxruntime"),  # torch first: it loads the CUDA libraries ORT links to
    ),
    "ort_trt": EngineInfo(
        "inferbench.engines.ort:OrtTensorRT",
        ("cuda",),
        ("fp32", "fp16"),
        "onnx",
        "ONNX Runtime, TensorRT execution provider, engine cache under results/engines/ort_trt",
        libraries=("torch", "onnxruntime"),
    ),
    "tensorrt": EngineInfo(
        "inferbench.engines.tensorrt:TensorRTEngine",
        ("cuda",),
        ("fp32", "fp16", "int8"),
        "trt_plan",
        "native TensorRT engine (static shape profile, cached per GPU and TensorRT version), device buffers",
        libraries=("torch", "tensorrt"),
    ),
    "torch_train": EngineInfo(
        "inferbench.engines.torch_train:TorchTrainStep",
        ("cpu", "cuda"),
        ALL_PRECISIONS,
        "checkpoint",
        "training iterations: forward, loss, backward, SGD step on a staged batch; AMP, channels-last, "
        "torch.compile as options",
        mode="train",
    ),
    "torch_train_epoch": EngineInfo(
        "inferbench.engines.torch_train:TorchTrainEpoch",
        ("cpu", "cuda"),
        ALL_PRECISIONS,
        "checkpoint",
        "one training epoch over the workload's dataset through a DataLoader (workers, pinned memory, "
        "non_blocking copies as options)",
        mode="train",
        workload_kinds=("tabular",),
        needs_dataset=True,
    ),
}


def onnx_path(impl: str, workload: str, precision: str) -> str:
    variant = engine_info(impl).onnx_variants.get(precision)
    return f"results/onnx/{workload}.{variant}.onnx" if variant else f"results/onnx/{workload}.onnx"


def engine_info(impl: str) -> EngineInfo:
    try:
        return ENGINES[impl]
    except KeyError:
        raise KeyError(f"unknown engine implementation {impl!r}; known: {sorted(ENGINES)}") from None


def load_engine_class(impl: str) -> type[Engine]:
    module_name, class_name = engine_info(impl).target.split(":")
    return getattr(importlib.import_module(module_name), class_name)


def _engine_modules(module_name: str, seen: set[str] | None = None) -> set[str]:
    """The module and the inferbench.engines modules it imports (read from the source, not imported)."""
    seen = set() if seen is None else seen
    if module_name in seen:
        return seen
    seen.add(module_name)
    spec = importlib.util.find_spec(module_name)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(module_name)
    for imported in re.findall(r"^from (inferbench\.engines\.\w+) import", Path(spec.origin).read_text(), re.M):
        _engine_modules(imported, seen)
    return seen


def code_version(impl: str) -> str:
    """A short hash of the engine's code (its module, the engine modules that one builds on) and the
    shared measuring code, without importing any of them.

    Snakemake does not see edits in imported modules; a rule param carrying this hash makes an edit
    of one engine re-run that engine's cells and nothing else.
    """
    module_name = engine_info(impl).target.split(":")[0]
    shared = [
        "inferbench.engines.base",
        "inferbench.measure.timing",
        "inferbench.measure.gpu_telemetry",
        "inferbench.measure.profiling",
        "inferbench.cell_runner",
        "inferbench.repeats",
        "inferbench.parity",
    ]
    digest = hashlib.sha256()
    for name in sorted(_engine_modules(module_name)) + shared:
        spec = importlib.util.find_spec(name)
        digest.update(Path(spec.origin).read_bytes())
    return digest.hexdigest()[:12]
