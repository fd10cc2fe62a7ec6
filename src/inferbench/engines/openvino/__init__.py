"""OpenVINO on the CPU, from the workflow's ONNX export: Intel's runtime that CPU deployments pick beside
ONNX Runtime.

The code that runs it is in ``inferbench.engines.openvino.engine``, imported only when a cell runs.
"""

from dataclasses import dataclass

from inferbench.catalog.engines import EngineInfo, EngineOptions, option


@dataclass(frozen=True)
class OpenVinoOptions(EngineOptions):
    num_streams: int = option(
        1,
        "CPU streams: inference requests the plugin can run at once, the cell's threads shared among "
        "them (1: all threads on one call, the lowest latency of a call)",
        minimum=1,
        # 2**40 streams reached the plugin and failed at job time; no CPU runs more calls at once
        maximum=1024,
    )
    static_shapes: bool = option(
        True,
        "compile for the cell's batch and sequence length (the symbolic dimensions of the export "
        "fixed); false: one compiled model for any shape",
    )


ENGINES = {
    "openvino": EngineInfo(
        "inferbench.engines.openvino.engine:OpenVinoCpu",
        ("cpu",),
        ("fp32", "bf16", "fp16", "int8"),
        "onnx",
        "OpenVINO, CPU plugin, on the ONNX export compiled for the cell's shapes; fp32 strict, bf16/fp16 "
        "through the inference precision hint where the CPU computes in them, int8 from the ONNX export's "
        "dynamic quantization",
        {"int8": "int8"},
        libraries=("openvino",),
        options_type=OpenVinoOptions,
    ),
}
