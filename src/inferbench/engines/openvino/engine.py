"""OpenVINO's CPU plugin on the ONNX export.

The precision is always set, never left to the plugin: on CPUs with bf16 units (AVX512-BF16, AMX) the
plugin computes an fp32 model in bf16 unless told otherwise, so an ``fp32`` cell asks for ``f32`` (strict
fp32, as the PyTorch and ONNX Runtime cells are), and ``bf16``/``fp16`` cells ask for those where the CPU
computes in them (``OPTIMIZATION_CAPABILITIES``) and are unavailable, with the reason, elsewhere. What
the compiled model actually runs with (precision, streams, threads, pinning) is read back into the record.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np

from inferbench.core.errors import CorruptArtifact
from inferbench.engines.base import Engine, artifact_path
from inferbench.engines.openvino import OpenVinoOptions
from inferbench.models.onnx_costs import onnx_build_costs
from inferbench.models.registry import InputSpec

#: the plugin's inference precision per cell precision (int8: the quantized ONNX, the rest of it in fp32)
INFERENCE_PRECISION = {"fp32": "f32", "bf16": "bf16", "fp16": "f16", "int8": "f32"}
#: the CPU capability (``OPTIMIZATION_CAPABILITIES``) a precision needs to be computed in, not emulated
CAPABILITY = {"bf16": "BF16", "fp16": "FP16"}
#: how an OpenVINO cell reaches a low precision
PRECISION_MODES = {"bf16": "precision hint", "fp16": "precision hint", "int8": "dynamic quantization"}
#: properties of the compiled model the record keeps: what the plugin actually runs with
COMPILED_PROPERTIES = (
    "INFERENCE_PRECISION_HINT",
    "NUM_STREAMS",
    "INFERENCE_NUM_THREADS",
    "ENABLE_CPU_PINNING",
    "PERFORMANCE_HINT",
    "EXECUTION_MODE_HINT",
)


def cpu_capabilities() -> list[str]:
    """The CPU plugin's ``OPTIMIZATION_CAPABILITIES`` on this machine (e.g. FP32, BF16, INT8)."""
    import openvino as ov

    return [str(c) for c in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")]


class OpenVinoCpu(Engine):
    options: OpenVinoOptions

    graph = "openvino"
    run_description = "one synchronous infer request on host arrays, where the CPU plugin computes"

    @classmethod
    def unavailable_reason(cls, device: str, precision: str) -> str | None:
        if importlib.util.find_spec("openvino") is None:
            return "openvino is not installed (python -m pip install -e . installs it where the package index has it)"
        needed = CAPABILITY.get(precision)
        if needed is not None and needed not in (found := cpu_capabilities()):
            return (
                f"this CPU does not compute in {precision} (OpenVINO's CPU plugin reports {', '.join(found)}, "
                f"not {needed}): it would emulate it, which measures no {precision} engine"
            )
        return None

    @property
    def takes_any_batch(self) -> bool:
        return not self.options.static_shapes  # compiled for one shape: a serving ladder prepares each

    def computation(self, workload_kind: str) -> dict[str, Any]:
        return super().computation(workload_kind) | {"precision_mode": PRECISION_MODES.get(self.precision)}

    def compile_config(self) -> dict[str, Any]:
        """The CPU plugin's properties for this cell: precision, streams and threads set, never defaulted."""
        config: dict[str, Any] = {
            "INFERENCE_PRECISION_HINT": INFERENCE_PRECISION[self.precision],
            "NUM_STREAMS": self.options.num_streams,
            "PERFORMANCE_HINT": "LATENCY",
        }
        if self.threads > 0:
            config["INFERENCE_NUM_THREADS"] = self.threads
        return config

    def _compile(self, perf_counts: bool = False) -> Any:
        config = self.compile_config() | ({"PERF_COUNT": True} if perf_counts else {})
        return self.core.compile_model(self.model, "CPU", config)

    def prepare(self, artifact: Path | None, inputs: tuple[InputSpec, ...], example: dict[str, np.ndarray]) -> None:
        import openvino as ov

        self.core = ov.Core()
        with self.cold_start("read"):
            try:
                self.model = self.core.read_model(str(artifact))
            except RuntimeError as error:  # OpenVINO's ONNX frontend on a truncated or foreign file
                if not Path(str(artifact)).exists():
                    raise FileNotFoundError(artifact) from error
                raise CorruptArtifact(artifact, error) from error
        if self.options.static_shapes:
            self.model.reshape({self.model.input(name): ov.PartialShape(list(a.shape)) for name, a in example.items()})
        with self.cold_start("compile_model"):  # each process compiles alike: no priming (launch.processes)
            self.compiled = self._compile()
        self.cold_start_s |= onnx_build_costs(artifact_path(artifact))
        self.request = self.compiled.create_infer_request()
        self.input_names = [port.get_any_name() for port in self.compiled.inputs]
        self.version = ov.get_version()

    def stage(self, batch: dict[str, np.ndarray]) -> Any:
        """The host arrays wrapped as OpenVINO tensors over the same memory, in the model's input order."""
        import openvino as ov

        return [ov.Tensor(np.ascontiguousarray(batch[name]), shared_memory=True) for name in self.input_names]

    def run(self, staged: Any) -> Any:
        # the request's own API, not infer(dict): on a 47-feature MLP at batch 1 (2 threads) the dict path
        # cost 103 µs a call against 41 µs for setting the tensors and calling infer() (the dict's inputs
        # converted, its outputs wrapped every call); the output stays in the request's buffer until the next call
        for index, tensor in enumerate(staged):
            self.request.set_input_tensor(index, tensor)
        self.request.infer()
        return self.request.get_output_tensor(0)

    def to_numpy(self, output: Any) -> np.ndarray:
        return np.array(output.data, dtype=np.float32)

    def profile(self, batch: dict[str, np.ndarray], n_calls: int, out_dir: Path, top: int) -> dict[str, Any]:
        """OpenVINO's performance counters: a second compiled model with them on (the measured one has them
        off), three warm-up calls, then each call's executed nodes summed by layer type."""
        from inferbench.trackers.profiling import per_call, top_ops

        request = self._compile(perf_counts=True).create_infer_request()
        for index, tensor in enumerate(self.stage(batch)):
            request.set_input_tensor(index, tensor)
        for _ in range(3):
            request.infer()
        totals: dict[str, list[float]] = {}
        nodes = []
        for _ in range(n_calls):
            request.infer()
            for node in request.get_profiling_info():
                if str(node.status).endswith("EXECUTED") and "NOT_RUN" not in str(node.status):
                    count_us = totals.setdefault(node.node_type, [0, 0.0])
                    count_us[0] += 1
                    count_us[1] += node.real_time.total_seconds() * 1e6
        for node in request.get_profiling_info():  # the last call's nodes, as a trace to read
            nodes.append(
                {
                    "node": node.node_name,
                    "type": node.node_type,
                    "exec_type": node.exec_type,
                    "status": str(node.status),
                    "real_time_us": node.real_time.total_seconds() * 1e6,
                }
            )
        counted = {k: (int(c), us) for k, (c, us) in totals.items()}
        trace = Path(out_dir) / "openvino_perf_counts.json"
        trace.write_text(json.dumps(nodes, indent=1))
        return {
            "tool": "openvino",
            "trace": trace.name,
            "time": "real time of executed nodes, grouped by layer type (the plugin's performance counters)",
            "top_ops": top_ops(counted, n_calls, top),
            "per_call": per_call(counted, n_calls, "nodes"),
        }

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "openvino": self.version,
            "device": self.core.get_property("CPU", "FULL_DEVICE_NAME"),
            "capabilities": [str(c) for c in self.core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")],
            "requested": self.compile_config(),
            "compiled": {name: _text(self.compiled.get_property(name)) for name in COMPILED_PROPERTIES},
        }


def _text(value: Any) -> str:
    """A property's value as OpenVINO spells it in its config (an element type as ``f32``, not ``<Type: ...>``)."""
    return value.to_string() if hasattr(value, "to_string") else str(value)
