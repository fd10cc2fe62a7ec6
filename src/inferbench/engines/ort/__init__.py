"""ONNX Runtime engines on the workflow's ONNX export: the CPU, CUDA and TensorRT execution providers.

The code that runs them is in ``inferbench.engines.ort.engine``, imported only when a cell runs.
"""

from dataclasses import dataclass

from inferbench.catalog.engines import EngineInfo, EngineOptions, option


@dataclass(frozen=True)
class OrtCpuOptions(EngineOptions):
    fusions: bool = option(
        False,
        "run ONNX Runtime's transformer fusions (onnxruntime.transformers.optimizer: Attention, SkipLayerNorm, "
        "BiasGelu, EmbedLayerNorm) on an export made for them (TorchScript exporter, eager attention): "
        "results/onnx/<workload>.fused.onnx",
    )


@dataclass(frozen=True)
class OrtCudaOptions(OrtCpuOptions):
    io_binding: bool = option(True, "inputs and outputs stay on the GPU (false: host arrays in and out, end to end)")
    # the CUDA provider has one switch for both (use_tf32, on by default)
    tf32: str = option(
        "all",
        "TF32 math for fp32: strict (none) or all (convolutions and matmuls: the CUDA provider's default)",
        ("strict", "all"),
    )
    cuda_graph: bool = option(
        False,
        "capture the session in a CUDA graph and replay it (needs io_binding; the cell's shapes are fixed "
        "with free-dimension overrides so that no node falls back to the CPU)",
        requires="io_binding",
    )
    prefer_nhwc: bool = option(False, "the CUDA provider's NHWC convolution kernels (channels-last)")
    cudnn_conv_algo_search: str = option(
        "EXHAUSTIVE",
        "how the CUDA provider picks cuDNN convolution algorithms (EXHAUSTIVE is its default)",
        ("EXHAUSTIVE", "HEURISTIC", "DEFAULT"),
    )


@dataclass(frozen=True)
class OrtTensorRTOptions(OrtCudaOptions):
    cache_dir: str = option("results/engines/ort_trt", "where TensorRT engines are cached", engine_folder=True)


#: torch first: it loads the CUDA libraries ONNX Runtime's CUDA provider links to
_GPU_LIBRARIES = ("torch", "onnxruntime")

ENGINES = {
    "ort_cpu": EngineInfo(
        "inferbench.engines.ort.engine:OrtCpu",
        ("cpu",),
        ("fp32", "int8"),
        "onnx",
        "ONNX Runtime, CPU execution provider; int8 through dynamic quantization",
        {"int8": "int8"},
        libraries=("onnxruntime",),
        options_type=OrtCpuOptions,
    ),
    "ort_cuda": EngineInfo(
        "inferbench.engines.ort.engine:OrtCuda",
        ("cuda",),
        ("fp32", "fp16"),
        "onnx",
        "ONNX Runtime, CUDA execution provider, IO binding (or host-to-host)",
        {"fp16": "fp16"},
        libraries=_GPU_LIBRARIES,
        options_type=OrtCudaOptions,
    ),
    "ort_trt": EngineInfo(
        "inferbench.engines.ort.engine:OrtTensorRT",
        ("cuda",),
        ("fp32", "fp16"),
        "onnx",
        "ONNX Runtime, TensorRT execution provider, engine cache under results/engines/ort_trt",
        libraries=_GPU_LIBRARIES,
        options_type=OrtTensorRTOptions,
    ),
}
