"""PyTorch engines: eager, TorchScript, torch.compile, CUDA graphs, and training steps and epochs.

The code that runs them is in this package's modules (eager, torchscript, compile, cudagraph, train),
imported only when a cell runs.
"""

from dataclasses import dataclass

from inferbench.catalog.engines import (
    ALL_PRECISIONS,
    ChannelsLastOptions,
    EngineInfo,
    HostInputOptions,
    Tf32Options,
    option,
    precision_mode,
)

#: torch.compile's modes
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
#: torch.compile modes that record and replay CUDA graphs (on CUDA)
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")


@dataclass(frozen=True)
class TorchEngineOptions(Tf32Options):
    """Every PyTorch engine's: TF32, and how fp16/bf16 are reached."""

    precision_mode: str = precision_mode("autocast")


@dataclass(frozen=True)
class TorchOptions(TorchEngineOptions, ChannelsLastOptions):
    """The image-capable engines': channels-last too."""


@dataclass(frozen=True)
class TorchInferenceOptions(TorchOptions, HostInputOptions):
    """The inference engines': how the host holds the inputs too."""


@dataclass(frozen=True)
class TorchScriptOptions(TorchInferenceOptions):
    # weights in fp16/bf16: autocast does not survive freezing
    precision_mode: str = precision_mode("cast")
    optimize: bool = option(True, "run optimize_for_inference after freezing")


@dataclass(frozen=True)
class TorchCompileOptions(TorchInferenceOptions):
    mode: str = option("default", "torch.compile mode", COMPILE_MODES)
    fullgraph: bool = option(False, "fail rather than fall back to eager at a graph break")
    freezing: bool = option(
        False,
        "Inductor's freezing: weights become constants of the graph, so that BatchNorm folds into the "
        "convolution before it and constant subgraphs are computed once (inference only)",
    )
    cuda_graph: bool = option(
        False,
        "capture the compiled model in one CUDA graph of the engine's own and replay it (cuda, static "
        "shapes; modes without Inductor's graphs): no per-call checks of Inductor's CUDA graph trees",
    )
    fp8_scaling: str = option(
        "rowwise",
        "fp8: torchao's dynamic scaling of activations and weights, one scale per row or per tensor",
        ("rowwise", "tensorwise"),
    )


@dataclass(frozen=True)
class TorchCudaGraphOptions(TorchInferenceOptions):
    precision_mode: str = precision_mode("cast")


@dataclass(frozen=True)
class TrainOptions(TorchOptions):
    compile: bool = option(False, "torch.compile the model before training")
    mode: str = option("default", "torch.compile mode, with `compile: true`", COMPILE_MODES)
    lr: float = option(0.01, "SGD learning rate (momentum 0.9)", minimum=0, exclusive=True)


@dataclass(frozen=True)
class TrainEpochOptions(TrainOptions):
    workers: int = option(0, "DataLoader worker processes", minimum=0)
    pin_memory: bool = option(False, "pinned host memory for the batches (cuda)")
    non_blocking: bool = option(False, "asynchronous host-to-device copies (cuda)")


ENGINES = {
    "torch_eager": EngineInfo(
        "inferbench.engines.pytorch.eager:TorchEager",
        ("cpu", "cuda"),
        ALL_PRECISIONS,
        "checkpoint",
        "PyTorch eager; fp16/bf16 through autocast (or cast weights)",
        options_type=TorchInferenceOptions,
    ),
    "torchscript": EngineInfo(
        "inferbench.engines.pytorch.torchscript:TorchScript",
        ("cpu", "cuda"),
        ALL_PRECISIONS,
        "checkpoint",
        "TorchScript: trace, freeze, optimize_for_inference; fp16/bf16 weights",
        options_type=TorchScriptOptions,
    ),
    "torch_compile": EngineInfo(
        "inferbench.engines.pytorch.compile:TorchCompile",
        ("cpu", "cuda"),
        (*ALL_PRECISIONS, "fp8"),
        "checkpoint",
        "torch.compile (Inductor), mode configurable; compile time recorded",
        options_type=TorchCompileOptions,
        compiles=True,
    ),
    "torch_cudagraph": EngineInfo(
        "inferbench.engines.pytorch.cudagraph:TorchCudaGraph",
        ("cuda",),
        ALL_PRECISIONS,
        "checkpoint",
        "the eager kernels captured once in a CUDA graph and replayed (static shapes)",
        options_type=TorchCudaGraphOptions,
    ),
    "torch_train": EngineInfo(
        "inferbench.engines.pytorch.train:TorchTrainStep",
        ("cpu", "cuda"),
        ALL_PRECISIONS,
        "checkpoint",
        "training iterations: forward, loss, backward, SGD step on a staged batch; AMP, channels-last, "
        "torch.compile as options",
        mode="train",
        options_type=TrainOptions,
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
        options_type=TrainEpochOptions,
    ),
}
