"""ONNX Runtime engines on the simplified ONNX export: CPU, CUDA (IO binding or host-to-host), TensorRT.

After the session is made, the provider actually in use is checked: ONNX Runtime falls back to other
providers silently, and a cell must measure what its name says.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from inferbench.engines.base import Engine, cuda_unavailable_reason
from inferbench.engines.tensorrt import tensorrt_unavailable_reason
from inferbench.errors import CorruptArtifact
from inferbench.models.registry import InputSpec


def _ort_reason(provider: str) -> str | None:
    if importlib.util.find_spec("onnxruntime") is None:
        return "onnxruntime is not installed (pip install onnxruntime, or onnxruntime-gpu on GPU machines)"
    import onnxruntime as ort

    if provider not in ort.get_available_providers():
        hint = ""
        if provider != "CPUExecutionProvider" and any(d.startswith("onnxruntime ") for d in ort_distributions()):
            hint = (
                " (this is the CPU package `onnxruntime`: `pip uninstall -y onnxruntime onnxruntime-gpu`, then"
                " `pip install -e .`, installs the GPU build on Linux x86_64)"
            )
        return f"onnxruntime {ort.__version__} has no {provider}{hint}; it has {ort.get_available_providers()}"
    return None


def ort_distributions() -> list[str]:
    """The installed distributions that provide the module `onnxruntime` (more than one: their files
    overwrite each other, and which build is imported depends on the order they were installed)."""
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for name in ("onnxruntime", "onnxruntime-gpu"):
        with contextlib.suppress(PackageNotFoundError):
            found.append(f"{name} {version(name)}")
    return found


def onnx_build_costs(onnx: str | Path) -> dict[str, float]:
    """Seconds spent making ``onnx`` (export, onnxsim, and the fp16/int8 conversion of a variant),
    read from the reports the workflow writes beside it: they are part of an ORT cell's cold start."""
    onnx = Path(onnx)
    workload = onnx.name.split(".")[0]
    costs: dict[str, float] = {}
    reports = [(onnx.parent / f"{workload}.export.json", {"export_s": "export", "simplify_s": "simplify"})]
    if onnx.name.count(".") > 1:  # <workload>.<variant>.onnx
        reports.append((onnx.with_suffix(".json"), {"convert_s": "convert"}))
    for path, keys in reports:
        if path.exists():
            report = json.loads(path.read_text())
            costs |= {name: float(report[key]) for key, name in keys.items() if report.get(key) is not None}
    return costs


@dataclass(frozen=True)
class BoundInputs:
    """An IO binding and the device values bound to it (kept alive together)."""

    binding: Any
    values: list[Any]


#: how ONNX Runtime cells reach a low precision: the workflow's converted ONNX file
ORT_PRECISION_MODES = {"fp16": "cast", "int8": "dynamic quantization"}


class OrtEngine(Engine):
    provider: ClassVar[str]
    graph = "onnxruntime"

    def computation(self, workload_kind: str) -> dict[str, Any]:
        return super().computation(workload_kind) | {"precision_mode": ORT_PRECISION_MODES.get(self.precision)}

    @classmethod
    def unavailable_reason(cls, device: str, precision: str) -> str | None:
        return _ort_reason(cls.provider)

    def provider_options(self) -> dict[str, Any]:
        return {}

    def _session(self, profile_prefix: Path | None = None) -> Any:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        if self.threads > 0:
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
        if profile_prefix is not None:
            options.enable_profiling = True
            options.profile_file_prefix = str(profile_prefix)
        try:
            return ort.InferenceSession(
                str(self.artifact), options, providers=[(self.provider, self.provider_options())]
            )
        except Exception as error:
            if _unreadable_model(error):
                raise CorruptArtifact(self.artifact, error) from error
            raise

    def prepare(self, artifact: Path | None, inputs: tuple[InputSpec, ...], example: dict[str, np.ndarray]) -> None:
        import onnxruntime as ort

        self.artifact = artifact
        with self.cold_start("session"):
            self.session = self._session()
        self.cold_start_s |= onnx_build_costs(artifact)
        in_use = self.session.get_providers()
        if in_use[0] != self.provider:  # never fall back silently
            raise RuntimeError(f"asked for {self.provider}, ONNX Runtime uses {in_use}")
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.version = ort.__version__

    def stage(self, batch: dict[str, np.ndarray]) -> Any:
        return {name: np.ascontiguousarray(array) for name, array in batch.items()}

    def run(self, staged: Any) -> Any:
        return self.session.run(self.output_names, staged)

    def to_numpy(self, output: Any) -> np.ndarray:
        return np.asarray(output[0], dtype=np.float32)

    def profile(self, batch: dict[str, np.ndarray], n_calls: int, out_dir: Path, top: int) -> dict[str, Any]:
        """ONNX Runtime's own profiler: a second session with profiling on (the measured one has it
        off), host arrays in and out, three warm-up runs left out of the operator table."""
        from inferbench.measure.profiling import ort_top_ops

        session = self._session(profile_prefix=Path(out_dir) / "ort_profile")
        feeds = OrtEngine.stage(self, batch)
        for _ in range(3 + n_calls):
            session.run(self.output_names, feeds)
        return ort_top_ops(Path(session.end_profiling()), n_calls, top)

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "onnxruntime": self.version,
            "providers": self.session.get_providers(),
            "intra_op_threads": self.threads,
        }


class OrtCpu(OrtEngine):
    impl = "ort_cpu"
    provider = "CPUExecutionProvider"


class OrtCuda(OrtEngine):
    """With ``io_binding`` (default) inputs and outputs stay on the GPU (boundary ``device``);
    without, host arrays go in and come out on every call (boundary ``end_to_end``)."""

    impl = "ort_cuda"
    provider = "CUDAExecutionProvider"

    @classmethod
    def unavailable_reason(cls, device: str, precision: str) -> str | None:
        return cuda_unavailable_reason() or _ort_reason(cls.provider)

    def computation(self, workload_kind: str) -> dict[str, Any]:
        return super().computation(workload_kind) | {
            "io_binding": self.options["io_binding"],
            "tf32": self.options["tf32"] if self.precision == "fp32" else None,
        }

    def provider_options(self) -> dict[str, Any]:
        # the CUDA provider uses TF32 for fp32 matmuls and convolutions by default: fp32 means strict
        # fp32 unless the variant asks for TF32 (as the PyTorch engines)
        tf32 = self.precision != "fp32" or self.options["tf32"]
        return {"device_id": 0, "use_tf32": int(tf32)}

    def prepare(self, artifact: Path | None, inputs: tuple[InputSpec, ...], example: dict[str, np.ndarray]) -> None:
        super().prepare(artifact, inputs, example)
        self.io_binding = self.options["io_binding"]
        if not self.io_binding:
            self.timing = "end_to_end"
            self.timing_description = "session.run with host arrays in and host arrays out (copies included)"

    def stage(self, batch: dict[str, np.ndarray]) -> Any:
        if not self.io_binding:
            return super().stage(batch)
        import onnxruntime as ort

        binding = self.session.io_binding()
        values = []  # the device copies must live as long as the binding that points at them
        for name, array in batch.items():
            value = ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array), "cuda", 0)
            values.append(value)
            binding.bind_ortvalue_input(name, value)
        for name in self.output_names:
            binding.bind_output(name, "cuda", 0)
        return BoundInputs(binding, values)

    def run(self, staged: Any) -> Any:
        if not self.io_binding:
            return super().run(staged)
        self.session.run_with_iobinding(staged.binding)
        return staged.binding

    def synchronize(self) -> None:
        pass  # the CUDA provider synchronises its stream at the end of every run

    def to_numpy(self, output: Any) -> np.ndarray:
        if not self.io_binding:
            return super().to_numpy(output)
        return np.asarray(output.copy_outputs_to_cpu()[0], dtype=np.float32)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "io_binding": self.io_binding, "provider_options": self.provider_options()}


class OrtTensorRT(OrtCuda):
    impl = "ort_trt"
    provider = "TensorrtExecutionProvider"

    @classmethod
    def unavailable_reason(cls, device: str, precision: str) -> str | None:
        return cuda_unavailable_reason() or _ort_reason(cls.provider) or tensorrt_unavailable_reason()

    def provider_options(self) -> dict[str, Any]:
        cache = Path(self.options["cache_dir"])
        cache.mkdir(parents=True, exist_ok=True)
        return {
            "device_id": 0,
            "trt_fp16_enable": self.precision == "fp16",
            "trt_engine_cache_enable": True,
            "trt_engine_cache_path": str(cache),
            "trt_timing_cache_enable": True,
            "trt_timing_cache_path": str(cache),
        }


def _unreadable_model(error: BaseException) -> bool:
    """ONNX Runtime's way of saying that the model file is not a whole ONNX model (truncated, garbage)."""
    text = f"{type(error).__name__} {error}".lower()
    return "invalidprotobuf" in text or "protobuf parsing failed" in text
