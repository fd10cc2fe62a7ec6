"""ONNX Runtime engines on the simplified ONNX export: CPU, CUDA (IO binding or host-to-host), TensorRT.

After the session is made, the provider actually in use is checked: ONNX Runtime falls back to other
providers silently, and a cell must measure what its name says.
"""

from __future__ import annotations

import contextlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from inferbench.catalog.engines import engine_files_dir
from inferbench.core.errors import CorruptArtifact
from inferbench.engines.base import Engine, artifact_path, cuda_unavailable_reason
from inferbench.engines.ort import OrtCpuOptions, OrtCudaOptions, OrtTensorRTOptions
from inferbench.engines.tensorrt.plans import tensorrt_unavailable_reason
from inferbench.models.onnx_costs import onnx_build_costs
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


@dataclass(frozen=True)
class BoundInputs:
    """An IO binding and the device values bound to it (kept alive together)."""

    binding: Any
    values: list[Any]


#: how ONNX Runtime cells reach a low precision: the workflow's converted ONNX file
ORT_PRECISION_MODES = {"fp16": "cast", "int8": "dynamic quantization"}


class OrtEngine(Engine):
    options: OrtCpuOptions

    provider: ClassVar[str]
    graph = "onnxruntime"
    #: whether the session replays a CUDA graph (OrtCuda's option ``cuda_graph``, read when it prepares)
    cuda_graph: bool = False

    def computation(self, workload_kind: str) -> dict[str, Any]:
        return super().computation(workload_kind) | {
            "precision_mode": ORT_PRECISION_MODES.get(self.precision),
            "fusions": self.options.fusions,
        }

    @classmethod
    def unavailable_reason(cls, device: str, precision: str) -> str | None:
        return _ort_reason(cls.provider)

    def provider_options(self, graph_capture: bool = True) -> dict[str, Any]:
        """The provider's options; ``graph_capture=False`` leaves out a CUDA-graph capture."""
        return {}

    def _process_options(self) -> dict[str, str]:
        """Provider options that belong to this process, not to the variant (a stream's address): given
        to the session, left out of the record."""
        return {}

    #: symbolic dimensions (``batch``, ``seq``) fixed to the cell's values before the session is made
    #: (engines that need static shapes set it in prepare)
    fixed_dims: dict[str, int] | None = None

    def _session(self, profile_prefix: Path | None = None, graph_capture: bool = True) -> Any:
        import onnxruntime as ort

        options = ort.SessionOptions()
        for name, value in (self.fixed_dims or {}).items():
            options.add_free_dimension_override_by_name(name, value)
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
                str(self.artifact),
                options,
                providers=[(self.provider, self.provider_options(graph_capture) | self._process_options())],
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
        self.cold_start_s |= onnx_build_costs(artifact_path(artifact))
        self.operator_types = _operator_types(artifact_path(artifact))
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
        """On a GPU, the kernels of the measured session's own calls (a CUDA graph's replay included) under
        torch.profiler, whose CUPTI tracing sees every library's kernels; beside them (``nodes``, and alone on
        the CPU) the graph's nodes from ONNX Runtime's own profiler."""
        nodes = self._node_profile(batch, n_calls, out_dir, top)
        if self.device == "cpu":
            return nodes
        from inferbench.trackers.profiling import torch_profile

        staged = self.stage(batch)
        try:
            kernels = torch_profile(lambda: self.run(staged), self.synchronize, n_calls, out_dir, self.device, top)
        except Exception as error:  # the node table stands alone, saying why
            return nodes | {"note": f"{nodes.get('note', '')}. No kernel profile: {error}".lstrip(". ")}
        note = "The measured session's calls; the graph's nodes (ONNX Runtime's profiler) below"
        return kernels | {"note": note, "nodes": nodes}

    def _node_profile(self, batch: dict[str, np.ndarray], n_calls: int, out_dir: Path, top: int) -> dict[str, Any]:
        """ONNX Runtime's own profiler: a second session with profiling on (the measured one has it
        off), host arrays in and out, three warm-up runs left out of the operator table. The session
        runs the same graph without a CUDA-graph capture: ONNX Runtime's profiler records no node
        events while a captured graph replays."""
        from inferbench.trackers.profiling import ort_top_ops

        session = self._session(profile_prefix=Path(out_dir) / "ort_profile", graph_capture=False)
        feeds = OrtEngine.stage(self, batch)
        for _ in range(3 + n_calls):
            session.run(self.output_names, feeds)
        result = ort_top_ops(Path(session.end_profiling()), n_calls, top)
        if self.cuda_graph:
            result["note"] = "The same graph run without its CUDA-graph capture (no node events during a replay)"
        return result

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "onnxruntime": self.version,
            "providers": self.session.get_providers(),
            "intra_op_threads": self.threads,
        }

    def attention_kernel(self, staged: Any) -> dict[str, str | None]:
        """ONNX Runtime's fused attention operator, or the unfused MatMul/Softmax chain, from the graph
        (which kernels the provider runs for them is not named here)."""
        from inferbench.trackers.attention import UNFUSED

        fused = sorted({"Attention", "MultiHeadAttention"} & self.operator_types)
        kernel = f"onnxruntime {fused[0]}" if fused else UNFUSED if "Softmax" in self.operator_types else None
        return {"kernel": kernel, "source": "ONNX graph"}


class OrtCpu(OrtEngine):
    provider = "CPUExecutionProvider"
    run_description = "one session.run on host arrays, where the CPU provider computes"


class OrtCuda(OrtEngine):
    """With ``io_binding`` (default) inputs and outputs stay on the GPU; without, host arrays go in and
    come out on every call. With ``cuda_graph`` the session is captured once in a CUDA graph and
    replayed. The session computes on a CUDA stream of ours (the provider's ``user_compute_stream``),
    so GPU events recorded on it bracket a call's device work, as for the PyTorch engines."""

    options: OrtCudaOptions

    provider = "CUDAExecutionProvider"

    @classmethod
    def unavailable_reason(cls, device: str, precision: str) -> str | None:
        return cuda_unavailable_reason() or _ort_reason(cls.provider)

    @property
    def takes_any_batch(self) -> bool:
        # Not as fast as the shape it was prepared for: a CUDA provider session serving unpadded batches of
        # changing size runs many times slower a batch than at one shape, most likely cuDNN's convolutions
        # set up again at each new shape (docs/serving.md). So a cell serving batches keeps one session per rung of
        # its batch ladder, each seeing one shape. A captured graph replays its shapes only anyway.
        return False

    def computation(self, workload_kind: str) -> dict[str, Any]:
        return super().computation(workload_kind) | {
            "io_binding": self.options.io_binding,
            "tf32": self.options.tf32 if self.precision == "fp32" else None,
            "cuda_graph": self.options.cuda_graph,
            "channels_last": self.options.prefer_nhwc if workload_kind == "vision" else None,
        }

    def provider_options(self, graph_capture: bool = True) -> dict[str, Any]:
        # the CUDA provider's one TF32 switch (matmuls and convolutions), on by default: ``tf32: strict``
        # turns it off for fp32
        tf32 = self.precision != "fp32" or self.options.tf32 == "all"
        options: dict[str, Any] = {
            "device_id": 0,
            "use_tf32": int(tf32),
            "cudnn_conv_algo_search": self.options.cudnn_conv_algo_search,
            "prefer_nhwc": int(self.options.prefer_nhwc),
        }
        if self.options.cuda_graph and graph_capture:
            options["enable_cuda_graph"] = 1
        return options

    def _process_options(self) -> dict[str, str]:
        """The session computes on our stream: the GPU events of a timed call are recorded on it, and
        the copies into a CUDA graph's input buffers that run() issues there come before the replay
        without a host synchronisation."""
        return {"user_compute_stream": str(self._stream.cuda_stream)}

    @property
    def staged_on_device(self) -> bool:
        return self.io_binding

    def stream(self) -> Any:
        return self._stream

    def prepare(self, artifact: Path | None, inputs: tuple[InputSpec, ...], example: dict[str, np.ndarray]) -> None:
        import torch

        self.cuda_graph = self.options.cuda_graph
        self.io_binding = self.options.io_binding
        self._stream = torch.cuda.Stream()
        if self.cuda_graph:
            # a capture needs static shapes: with the symbolic dimensions fixed, ONNX Runtime folds the
            # shape computations that would otherwise run on the CPU provider and stop the capture
            self.fixed_dims = {
                dim: int(example[spec.name].shape[axis])
                for spec in inputs
                for axis, dim in enumerate(spec.shape)
                if isinstance(dim, str)
            }
        super().prepare(artifact, inputs, example)
        self.run_description = (
            "session.run with host arrays in and host arrays out (its copies included)"
            if not self.io_binding
            else "one run_with_iobinding on inputs bound on the device; outputs stay on the device"
        )
        if self.cuda_graph:
            self._bind_graph_buffers(example)
            with self.cold_start("capture"):  # ONNX Runtime captures on an early run, then replays
                for _ in range(3):
                    self.run(self.stage(example))
            self.run_description = (
                "a device-to-device copy of the staged inputs into the graph's input buffers, then one "
                "run_with_iobinding that replays the captured CUDA graph; outputs stay on the device"
            )

    def _bind_graph_buffers(self, example: dict[str, np.ndarray]) -> None:
        """Input and output buffers at fixed device addresses (a graph replays on the addresses it was
        captured with), allocated by PyTorch and bound by pointer."""
        import torch

        self.graph_inputs = {name: torch.from_numpy(np.ascontiguousarray(a)).cuda() for name, a in example.items()}
        self.graph_binding = self.session.io_binding()
        for name, tensor in self.graph_inputs.items():
            self.graph_binding.bind_input(name, "cuda", 0, _numpy_dtype(tensor), tuple(tensor.shape), tensor.data_ptr())
        self.graph_outputs = {}
        fixed = self.fixed_dims or {}
        for output in self.session.get_outputs():
            shape: tuple[Any, ...] = tuple(fixed.get(d, d) if isinstance(d, str) else d for d in output.shape)
            if not all(isinstance(d, int) for d in shape):
                raise RuntimeError(
                    f"cuda_graph needs static output shapes; {output.name} has {output.shape} with the "
                    f"dimensions {self.fixed_dims} fixed"
                )
            tensor = torch.empty(shape, dtype=getattr(torch, _OUTPUT_DTYPES[output.type]), device="cuda")
            self.graph_outputs[output.name] = tensor
            self.graph_binding.bind_output(output.name, "cuda", 0, _numpy_dtype(tensor), shape, tensor.data_ptr())

    def stage(self, batch: dict[str, np.ndarray]) -> Any:
        if self.cuda_graph:
            import torch

            return {name: torch.from_numpy(np.ascontiguousarray(a)).cuda() for name, a in batch.items()}
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
        if self.cuda_graph:
            import torch

            with torch.cuda.stream(self._stream):
                for name, tensor in staged.items():
                    self.graph_inputs[name].copy_(tensor, non_blocking=True)
            self.session.run_with_iobinding(self.graph_binding)
            return self.graph_outputs[self.output_names[0]]
        if not self.io_binding:
            return super().run(staged)
        self.session.run_with_iobinding(staged.binding)
        return staged.binding

    def synchronize(self) -> None:
        self._stream.synchronize()

    def to_numpy(self, output: Any) -> np.ndarray:
        if self.cuda_graph:
            return output.float().cpu().numpy()
        if not self.io_binding:
            return super().to_numpy(output)
        return np.asarray(output.copy_outputs_to_cpu()[0], dtype=np.float32)

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "io_binding": self.io_binding,
            "provider_options": self.provider_options(),
            "fixed_dims": self.fixed_dims,
        }


#: ONNX Runtime's type names of the outputs a graph buffer may hold
_OUTPUT_DTYPES = {"tensor(float)": "float32", "tensor(float16)": "float16"}


def _numpy_dtype(tensor: Any) -> np.dtype:
    return np.dtype(str(tensor.dtype).removeprefix("torch."))


class OrtTensorRT(OrtCuda):
    options: OrtTensorRTOptions

    provider = "TensorrtExecutionProvider"

    @property
    def takes_any_batch(self) -> bool:
        return False  # the TensorRT provider builds an engine for each new shape, in the caller's time

    @classmethod
    def unavailable_reason(cls, device: str, precision: str) -> str | None:
        return cuda_unavailable_reason() or _ort_reason(cls.provider) or tensorrt_unavailable_reason()

    def provider_options(self, graph_capture: bool = True) -> dict[str, Any]:
        cache = engine_files_dir(self.options.cache_dir)
        cache.mkdir(parents=True, exist_ok=True)
        return {
            "device_id": 0,
            "trt_fp16_enable": self.precision == "fp16",
            "trt_engine_cache_enable": True,
            "trt_engine_cache_path": str(cache),
            "trt_timing_cache_enable": True,
            "trt_timing_cache_path": str(cache),
        }


def _operator_types(path: Path) -> set[str]:
    """The operator types of an ONNX file (a session does not expose its graph)."""
    from inferbench.models.export import read_onnx

    return {node.op_type for node in read_onnx(path).graph.node}


def _unreadable_model(error: BaseException) -> bool:
    """ONNX Runtime's way of saying that the model file is not a whole ONNX model (truncated, garbage)."""
    text = f"{type(error).__name__} {error}".lower()
    return "invalidprotobuf" in text or "protobuf parsing failed" in text
