"""ONNX Runtime engines on the simplified ONNX export."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np

from inferbench.engines.base import Engine
from inferbench.models.registry import InputSpec


class OrtCpu(Engine):
    impl = "ort_cpu"
    provider = "CPUExecutionProvider"

    @classmethod
    def unavailable_reason(cls, device: str, precision: str) -> str | None:
        if importlib.util.find_spec("onnxruntime") is None:
            return "onnxruntime is not installed (pip install onnxruntime, or onnxruntime-gpu on GPU machines)"
        import onnxruntime as ort

        if cls.provider not in ort.get_available_providers():
            return f"onnxruntime {ort.__version__} lacks {cls.provider} (has {ort.get_available_providers()})"
        return None

    def prepare(self, artifact: Path | None, inputs: tuple[InputSpec, ...]) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        if self.threads > 0:
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(artifact), options, providers=[self.provider])
        in_use = self.session.get_providers()
        if in_use[0] != self.provider:  # never fall back silently
            raise RuntimeError(f"asked for {self.provider}, ONNX Runtime uses {in_use}")
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.version = ort.__version__

    def stage(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {name: np.ascontiguousarray(array) for name, array in batch.items()}

    def run(self, staged: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self.session.run(self.output_names, staged)

    def to_numpy(self, output: list[np.ndarray]) -> np.ndarray:
        return np.asarray(output[0], dtype=np.float32)

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "onnxruntime": self.version,
            "providers": self.session.get_providers(),
            "intra_op_threads": self.threads,
        }
