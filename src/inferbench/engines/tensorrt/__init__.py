"""Native TensorRT: a serialized engine (plan) built from the fp32 ONNX export by a workflow rule of its
own, cached per GPU model and TensorRT version, and run on device buffers.

The plan's paths and TensorRT's availability are in ``plans`` (light: the Snakefile reads them), the
build in ``build``, the engine that runs a plan in ``engine``; ``tensorrt`` itself is imported only
inside the functions that need it, so everything else works and is tested where it is missing.
"""

from dataclasses import dataclass

from inferbench.catalog.engines import EngineInfo, EngineOptions, option

#: the precisions a plan is built for
PRECISIONS = ("fp32", "fp16", "int8")


@dataclass(frozen=True)
class TensorRTOptions(EngineOptions):
    workspace_gib: float = option(8.0, "builder workspace limit, GiB", minimum=0, exclusive=True)
    calibration_batches: int = option(16, "int8: batches that calibrate the engine", minimum=1)


ENGINES = {
    "tensorrt": EngineInfo(
        "inferbench.engines.tensorrt.engine:TensorRTEngine",
        ("cuda",),
        PRECISIONS,
        "trt_plan",
        "native TensorRT engine (static shape profile, cached per GPU and TensorRT version), device buffers",
        libraries=("torch", "tensorrt"),
        options_type=TensorRTOptions,
    ),
}
