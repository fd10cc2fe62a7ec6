"""PyTorch engines: eager, TorchScript, torch.compile, CUDA graphs, and training steps and epochs.

The code that runs them is in this package's modules (eager, torchscript, compile, cudagraph, train),
imported only when a cell runs.
"""

from inferbench.catalog.engines import (
    ALL_PRECISIONS,
    CHANNELS_LAST,
    HOST_INPUT,
    TF32,
    EngineInfo,
    Option,
    precision_mode,
)

#: torch.compile's modes
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
#: torch.compile modes that record and replay CUDA graphs (on CUDA)
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")
_TORCH = {"channels_last": CHANNELS_LAST, "tf32": TF32}
_TRAIN = {
    **_TORCH,
    "precision_mode": precision_mode("autocast"),
    "compile": Option(bool, False, "torch.compile the model before training"),
    "mode": Option(str, "default", "torch.compile mode, with `compile: true`", COMPILE_MODES),
    "lr": Option(float, 0.01, "SGD learning rate (momentum 0.9)", minimum=0, exclusive=True),
}

ENGINES = {
    "torch_eager": EngineInfo(
        "inferbench.engines.pytorch.eager:TorchEager",
        ("cpu", "cuda"),
        ALL_PRECISIONS,
        "checkpoint",
        "PyTorch eager; fp16/bf16 through autocast (or cast weights)",
        options={**_TORCH, **HOST_INPUT, "precision_mode": precision_mode("autocast")},
    ),
    "torchscript": EngineInfo(
        "inferbench.engines.pytorch.torchscript:TorchScript",
        ("cpu", "cuda"),
        ALL_PRECISIONS,
        "checkpoint",
        "TorchScript: trace, freeze, optimize_for_inference; fp16/bf16 weights",
        options={
            **_TORCH,
            **HOST_INPUT,
            # weights in fp16/bf16: autocast does not survive freezing
            "precision_mode": precision_mode("cast"),
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
            **HOST_INPUT,
            "precision_mode": precision_mode("autocast"),
            "mode": Option(str, "default", "torch.compile mode", COMPILE_MODES),
            "fullgraph": Option(bool, False, "fail rather than fall back to eager at a graph break"),
            "freezing": Option(
                bool,
                False,
                "Inductor's freezing: weights become constants of the graph, so that BatchNorm folds into the "
                "convolution before it and constant subgraphs are computed once (inference only)",
            ),
            "cuda_graph": Option(
                bool,
                False,
                "capture the compiled model in one CUDA graph of the engine's own and replay it (cuda, static "
                "shapes; modes without Inductor's graphs): no per-call checks of Inductor's CUDA graph trees",
            ),
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
        options={**_TORCH, **HOST_INPUT, "precision_mode": precision_mode("cast")},
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
