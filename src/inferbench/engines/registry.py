"""Engine implementations by name, with what they can run, without importing any of them.

Heavy libraries (torch, onnxruntime, tensorrt) are imported only when an engine class is loaded,
so the grid and the Snakefile can reason about engines in milliseconds.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import math
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from inferbench.engines.base import Engine


#: what ``Engine.computation`` says of a cell, one summary column each: options that change what it computes
COMPUTATION_KEYS = (
    "graph",
    "precision_mode",
    "channels_last",
    "compile_mode",
    "cuda_graph",
    "io_binding",
    "tf32",
    "fusions",
)


@dataclass(frozen=True)
class Option:
    """One option of an engine implementation: its type, default and what it does."""

    type: type
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None
    #: numbers: the smallest value allowed, and whether it is allowed itself
    minimum: float | None = None
    exclusive: bool = False
    #: strings: a path relative to the working directory that stays inside it (what the job creates
    #: and writes there must not land anywhere a config string points)
    inside_workdir: bool = False
    #: booleans: another boolean option of the same engine that must be true when this one is
    requires: str | None = None

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not a valid setting of this option, or None."""
        # bool is a subclass of int: a bool is right only for a bool option (`workers: true` is not an
        # int); a float option also takes an int
        accepted = (int, float) if self.type is float else self.type
        if isinstance(value, bool) != (self.type is bool) or not isinstance(value, accepted):
            return f"{value!r} is not a {self.type.__name__}"
        if isinstance(value, float) and not math.isfinite(value):
            return f"{value!r} is not a finite number"
        if self.inside_workdir and (
            not value or PurePosixPath(value).is_absolute() or ".." in PurePosixPath(value).parts or "\\" in value
        ):
            return f"{value!r} must be a relative path inside the working directory (no leading /, no ..)"
        if self.choices is not None and value not in self.choices:
            return f"{value!r} is not one of {', '.join(map(str, self.choices))}"
        if self.minimum is not None and (value < self.minimum or (self.exclusive and value == self.minimum)):
            return f"{value!r} must be {'>' if self.exclusive else '>='} {self.minimum}"
        return None


#: keys every variant may have besides its engine's options: which implementation, where it runs, and
#: how long the dynamic batcher of its serving cells waits for a batch to fill (inferbench.scenarios.serving)
VARIANT_KEYS = ("engine", "devices", "precisions", "max_queue_delay_ms")

_TF32 = Option(
    bool,
    False,
    "TF32 tensor-core math for fp32 convolutions and matmuls (PyTorch's default for convolutions); "
    "false: fp32 is strict fp32",
)
_CHANNELS_LAST = Option(bool, False, "channels-last memory format for image models")


def _precision_mode(default: str) -> Option:
    return Option(str, default, "fp16/bf16 by autocast, or by casting weights and inputs", ("autocast", "cast"))


_COMPILE_MODE = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
_TORCH = {"channels_last": _CHANNELS_LAST, "tf32": _TF32}
_TRAIN = {
    **_TORCH,
    "precision_mode": _precision_mode("autocast"),
    "compile": Option(bool, False, "torch.compile the model before training"),
    "mode": Option(str, "default", "torch.compile mode, with `compile: true`", _COMPILE_MODE),
    "lr": Option(float, 0.01, "SGD learning rate (momentum 0.9)", minimum=0, exclusive=True),
}
_ORT_FUSIONS = Option(
    bool,
    False,
    "run ONNX Runtime's transformer fusions (onnxruntime.transformers.optimizer: Attention, SkipLayerNorm, "
    "BiasGelu, EmbedLayerNorm) on an export made for them (TorchScript exporter, eager attention): "
    "results/onnx/<workload>.fused.onnx",
)
_ORT_CUDA = {
    "io_binding": Option(bool, True, "inputs and outputs stay on the GPU (false: host arrays in and out, end to end)"),
    "tf32": _TF32,
    "fusions": _ORT_FUSIONS,
    "cuda_graph": Option(
        bool,
        False,
        "capture the session in a CUDA graph and replay it (needs io_binding; the cell's shapes are fixed "
        "with free-dimension overrides so that no node falls back to the CPU)",
        requires="io_binding",
    ),
    "prefer_nhwc": Option(bool, False, "the CUDA provider's NHWC convolution kernels (channels-last)"),
    "cudnn_conv_algo_search": Option(
        str,
        "EXHAUSTIVE",
        "how the CUDA provider picks cuDNN convolution algorithms (EXHAUSTIVE is its default)",
        ("EXHAUSTIVE", "HEURISTIC", "DEFAULT"),
    ),
}


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
    #: workload kinds (see inferbench.core.workloads) the engine can run
    workload_kinds: tuple[str, ...] = ("tabular", "vision", "text")
    #: the engine reads the workload's processed dataset (given to the cell as an input)
    needs_dataset: bool = False
    #: libraries its cells import, imported (and timed) once before the cell's fresh processes start
    libraries: tuple[str, ...] = ("torch",)
    #: the options a variant of it may set (config `engines.<variant>`), with their defaults
    options: dict[str, Option] = field(default_factory=dict)
    #: it compiles while preparing (tens of seconds): True, or the boolean option that turns it on
    compiles: bool | str = False

    def compiles_with(self, variant: dict[str, Any]) -> bool:
        """Whether a cell of this variant compiles before it measures."""
        return bool(variant.get(self.compiles, False)) if isinstance(self.compiles, str) else self.compiles

    def effective_options(self, variant: dict[str, Any]) -> dict[str, Any]:
        """The variant's options with the defaults filled in (what a record says it ran with)."""
        return {key: variant.get(key, option.default) for key, option in self.options.items()}


ALL_PRECISIONS = ("fp32", "fp16", "bf16")
ENGINES: dict[str, EngineInfo] = {
    "noop": EngineInfo(
        "inferbench.engines.noop.engine:NoopEngine",
        ("cpu", "cuda"),
        ALL_PRECISIONS,
        "none",
        "returns a constant: measures the harness's own overhead",
        libraries=(),
    ),
    "torch_eager": EngineInfo(
        "inferbench.engines.pytorch.eager:TorchEager",
        ("cpu", "cuda"),
        ALL_PRECISIONS,
        "checkpoint",
        "PyTorch eager; fp16/bf16 through autocast (or cast weights)",
        options={**_TORCH, "precision_mode": _precision_mode("autocast")},
    ),
    "torchscript": EngineInfo(
        "inferbench.engines.pytorch.torchscript:TorchScript",
        ("cpu", "cuda"),
        ALL_PRECISIONS,
        "checkpoint",
        "TorchScript: trace, freeze, optimize_for_inference; fp16/bf16 weights",
        options={
            **_TORCH,
            # weights in fp16/bf16: autocast does not survive freezing
            "precision_mode": _precision_mode("cast"),
            "optimize": Option(bool, True, "run optimize_for_inference after freezing"),
        },
    ),
    "torch_compile": EngineInfo(
        "inferbench.engines.pytorch.compile:TorchCompile",
        ("cpu", "cuda"),
        (*ALL_PRECISIONS, "fp8"),
        "checkpoint",
        "torch.compile (Inductor), mode configurable; compile time recorded",
        options={
            **_TORCH,
            "precision_mode": _precision_mode("autocast"),
            "mode": Option(str, "default", "torch.compile mode", _COMPILE_MODE),
            "fullgraph": Option(bool, False, "fail rather than fall back to eager at a graph break"),
            "fp8_scaling": Option(
                str,
                "rowwise",
                "fp8: torchao's dynamic scaling of activations and weights, one scale per row or per tensor",
                ("rowwise", "tensorwise"),
            ),
        },
        compiles=True,
    ),
    "torch_cudagraph": EngineInfo(
        "inferbench.engines.pytorch.cudagraph:TorchCudaGraph",
        ("cuda",),
        ALL_PRECISIONS,
        "checkpoint",
        "the eager kernels captured once in a CUDA graph and replayed (static shapes)",
        options={**_TORCH, "precision_mode": _precision_mode("cast")},
    ),
    "ort_cpu": EngineInfo(
        "inferbench.engines.ort.engine:OrtCpu",
        ("cpu",),
        ("fp32", "int8"),
        "onnx",
        "ONNX Runtime, CPU execution provider; int8 through dynamic quantization",
        {"int8": "int8"},
        libraries=("onnxruntime",),
        options={"fusions": _ORT_FUSIONS},
    ),
    "ort_cuda": EngineInfo(
        "inferbench.engines.ort.engine:OrtCuda",
        ("cuda",),
        ("fp32", "fp16"),
        "onnx",
        "ONNX Runtime, CUDA execution provider, IO binding (or host-to-host)",
        {"fp16": "fp16"},
        libraries=("torch", "onnxruntime"),  # torch first: it loads the CUDA libraries ORT links to
        options=_ORT_CUDA,
    ),
    "ort_trt": EngineInfo(
        "inferbench.engines.ort.engine:OrtTensorRT",
        ("cuda",),
        ("fp32", "fp16"),
        "onnx",
        "ONNX Runtime, TensorRT execution provider, engine cache under results/engines/ort_trt",
        libraries=("torch", "onnxruntime"),
        options={
            **_ORT_CUDA,
            "cache_dir": Option(
                str, "results/engines/ort_trt", "where TensorRT engines are cached", inside_workdir=True
            ),
        },
    ),
    "tensorrt": EngineInfo(
        "inferbench.engines.tensorrt.engine:TensorRTEngine",
        ("cuda",),
        ("fp32", "fp16", "int8"),
        "trt_plan",
        "native TensorRT engine (static shape profile, cached per GPU and TensorRT version), device buffers",
        libraries=("torch", "tensorrt"),
        options={
            "workspace_gib": Option(float, 8.0, "builder workspace limit, GiB", minimum=0, exclusive=True),
            "calibration_batches": Option(int, 16, "int8: batches that calibrate the engine", minimum=1),
        },
    ),
    "torch_train": EngineInfo(
        "inferbench.engines.pytorch.train:TorchTrainStep",
        ("cpu", "cuda"),
        ALL_PRECISIONS,
        "checkpoint",
        "training iterations: forward, loss, backward, SGD step on a staged batch; AMP, channels-last, "
        "torch.compile as options",
        mode="train",
        options=_TRAIN,
        compiles="compile",
    ),
    "torch_train_epoch": EngineInfo(
        "inferbench.engines.pytorch.train:TorchTrainEpoch",
        ("cpu", "cuda"),
        ALL_PRECISIONS,
        "checkpoint",
        "one training epoch over the workload's dataset through a DataLoader (workers, pinned memory, "
        "non_blocking copies as options)",
        mode="train",
        workload_kinds=("tabular",),
        needs_dataset=True,
        options={
            **_TRAIN,
            "workers": Option(int, 0, "DataLoader worker processes", minimum=0),
            "pin_memory": Option(bool, False, "pinned host memory for the batches (cuda)"),
            "non_blocking": Option(bool, False, "asynchronous host-to-device copies (cuda)"),
        },
    ),
}


#: the ONNX exports a cell can be prepared from: the plain one (torch.onnx dynamo exporter + onnxsim),
#: or the one made for ONNX Runtime's transformer fusions (``fusions: true``)
ONNX_EXPORTS = {"plain": "", "fused": ".fused"}


def onnx_path(impl: str, workload: str, precision: str, variant: dict[str, Any] | None = None) -> str:
    """The ONNX file a cell of ``impl`` (with the options of ``variant``) reads:
    results/onnx/<workload>[.fused][.<precision variant>].onnx."""
    export = ONNX_EXPORTS["fused" if (variant or {}).get("fusions") else "plain"]
    converted = engine_info(impl).onnx_variants.get(precision)
    return f"results/onnx/{workload}{export}{f'.{converted}' if converted else ''}.onnx"


def engine_info(impl: str) -> EngineInfo:
    try:
        return ENGINES[impl]
    except KeyError:
        raise KeyError(f"unknown engine implementation {impl!r}; known: {sorted(ENGINES)}") from None


def option_problems(impl: str, variant: dict[str, Any]) -> list[str]:
    """What is wrong with a variant's options for its implementation ``impl``: unknown keys (a typo,
    or an option of another engine) with the keys allowed, and values of the wrong type."""
    declared = engine_info(impl).options
    problems = []
    for key, value in variant.items():
        if key in VARIANT_KEYS:
            continue
        if key not in declared:
            owners = sorted(name for name, info in ENGINES.items() if key in info.options)
            elsewhere = f" (an option of {', '.join(owners)})" if owners else ""
            allowed = ", ".join([*declared, *VARIANT_KEYS])
            problems.append(f"{key!r} is not an option of {impl}{elsewhere}; allowed keys: {allowed}")
        elif (problem := declared[key].problem(value)) is not None:
            problems.append(f"{key}: {problem} ({declared[key].help})")
    effective = effective_options(impl, variant)
    for key, option in declared.items():
        if option.requires and effective[key] is True and effective.get(option.requires) is not True:
            problems.append(f"{key}: true needs {option.requires}: true ({option.help})")
    return problems


def effective_options(impl: str, variant: dict[str, Any]) -> dict[str, Any]:
    """The variant's options with its engine's defaults filled in (what a record says it ran with)."""
    return engine_info(impl).effective_options(variant)


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
        "inferbench.scenarios.timing",
        "inferbench.trackers.gpu_telemetry",
        "inferbench.trackers.profiling",
        "inferbench.scenarios.run",
        "inferbench.launch.processes",
        "inferbench.models.parity",
    ]
    digest = hashlib.sha256()
    for name in sorted(_engine_modules(module_name)) + shared:
        spec = importlib.util.find_spec(name)
        digest.update(Path(spec.origin).read_bytes())
    return digest.hexdigest()[:12]
