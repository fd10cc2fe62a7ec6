"""PyTorch engines: eager, TorchScript, torch.compile and CUDA graphs, sharing loading and precision.

Precision: ``autocast`` runs fp32 weights under torch.autocast (eager and torch.compile by default);
``cast`` converts weights and float inputs to fp16/bf16 (TorchScript and CUDA graphs by default;
option ``precision_mode`` overrides).

Math on CUDA, as users run it: ``cudnn.benchmark`` is on (cuDNN picks the fastest convolution
algorithm for the cell's shapes during the warm-up, as timm's benchmark.py does), and fp32 has
PyTorch's default TF32 math: TF32 in cuDNN's convolutions, full fp32 matmuls. The option ``tf32``
names the other two settings: ``strict`` (no TF32: fp32 means what it says) and ``all`` (matmuls too,
as timm's benchmark.py sets it); the report labels them.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from inferbench.engines.base import Engine, artifact_path, cuda_unavailable_reason
from inferbench.engines.pytorch import TorchEngineOptions, TorchInferenceOptions, TorchOptions
from inferbench.models.registry import InputSpec, load_checkpoint

#: the dtype of weights and activations at each low precision (fp8: what is not an fp8 linear layer)
LOW_PRECISION = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp8": torch.bfloat16}
#: FP8 tensor cores (e4m3): Ada and Hopper onwards
FP8_CAPABILITY = (8, 9)


def tf32_switches(precision: str, setting: str) -> tuple[bool, bool]:
    """PyTorch's two TF32 switches (cuDNN's convolutions, matmuls) for a cell: fp32's as its ``tf32`` setting
    names them; both on at a lower precision, whose fp32 leftovers are not what it measures."""
    if precision != "fp32":
        return True, True
    return setting in ("conv", "all"), setting == "all"


class TorchEngine(Engine):
    """Shared by the PyTorch engines: load the checkpoint, place and cast the model, stage tensors."""

    options: TorchEngineOptions
    #: what a call runs (set by prepare): the engine's module, compiled, scripted or captured
    module: Any
    #: fp8 cells (TorchCompile): the linear layers torchao swapped
    fp8_layers: Any

    graph: ClassVar[str] = "eager"

    @classmethod
    def unavailable_reason(cls, device: str, precision: str) -> str | None:
        if precision == "fp8":
            return fp8_unavailable_reason(device)
        if device == "cuda":
            reason = cuda_unavailable_reason()
            if reason is None and precision == "bf16" and not torch.cuda.is_bf16_supported():
                reason = f"{torch.cuda.get_device_name()} does not support bf16"
            return reason
        return None

    def _load(self, artifact: Path | None, inputs: tuple[InputSpec, ...]) -> torch.nn.Module:
        if self.threads > 0:
            torch.set_num_threads(self.threads)
        if self.device == "cuda":
            convolutions, matmuls = tf32_switches(self.precision, self.options.tf32)
            torch.backends.cudnn.allow_tf32 = convolutions
            torch.backends.cuda.matmul.allow_tf32 = matmuls
            torch.backends.cudnn.benchmark = True
        # fp8: bf16 weights and activations, fp8 linear layers swapped in by torchao (no autocast form)
        self.precision_mode = "cast" if self.precision == "fp8" else self.options.precision_mode
        self.low_dtype = LOW_PRECISION.get(self.precision)
        self.channels_last = self._channels_last_option() and any(len(i.shape) == 4 for i in inputs)
        with self.cold_start("load_model"):
            spec, _ = load_checkpoint(artifact_path(artifact), self.device)
        module = spec.module.eval()
        if self.channels_last:
            module = module.to(memory_format=torch.channels_last)
        if self.low_dtype is not None and self.precision_mode == "cast":
            module = module.to(self.low_dtype)
        self.eager_module = module
        return module

    def attention_kernel(self, staged: dict[str, torch.Tensor]) -> dict[str, str | None]:
        """From one profiled call; a CUDA-graph replay dispatches no operators, so there the eager module
        is probed: its kernels are the ones a graph of eager kernels replays, and Inductor keeps SDPA as
        the same ATen call."""
        from inferbench.trackers.attention import profiled_attention

        kernel = profiled_attention(lambda: self.run(staged), self.synchronize)
        if kernel is not None or not self.computation("text")["cuda_graph"]:
            return {"kernel": kernel, "source": "profiled call"}

        def eager_call() -> torch.Tensor:
            return self.forward(staged, self.eager_module)

        return {"kernel": profiled_attention(eager_call, self.synchronize), "source": "eager module (graph replayed)"}

    def computation(self, workload_kind: str) -> dict[str, Any]:
        fp32 = self.precision == "fp32"
        mode = None if fp32 else self.options.precision_mode
        return super().computation(workload_kind) | {
            "precision_mode": mode,
            "channels_last": self._channels_last_option() and workload_kind == "vision",
            "tf32": self.options.tf32 if fp32 and self.device == "cuda" else None,
            "host_input": self._host_input(),
        }

    def _channels_last_option(self) -> bool:
        """The variant's ``channels_last``, where the engine takes it (``TorchImageEngine``); False here."""
        return False

    def _host_input(self) -> str | None:
        """How the host holds the inputs, where not as drawn (pageable fp32): the inference engines' options
        (``TorchInference``); None here."""
        return None

    def forward(self, staged: dict[str, torch.Tensor], module: Any = None) -> torch.Tensor:
        """One inference call of ``module`` (the engine's own by default) on staged inputs, as every PyTorch
        engine makes it: no autograd, under the precision's autocast where it has one."""
        with torch.inference_mode(), self._autocast():
            return (self.module if module is None else module)(**staged)

    def _autocast(self) -> contextlib.AbstractContextManager:
        enabled = self.low_dtype is not None and self.precision_mode == "autocast"
        return torch.autocast(device_type=self.device, dtype=self.low_dtype or torch.float32, enabled=enabled)

    def stage(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        staged = {}
        for name, array in batch.items():
            # host arrays, or the host tensors of ``host_batches``: from pinned memory the copy is asynchronous
            host = array if isinstance(array, torch.Tensor) else torch.from_numpy(array)
            tensor = host.to(self.device, non_blocking=host.is_pinned())
            if tensor.is_floating_point() and self.low_dtype is not None and self.precision_mode == "cast":
                tensor = tensor.to(self.low_dtype)
            if self.channels_last and tensor.dim() == 4:
                tensor = tensor.contiguous(memory_format=torch.channels_last)
            staged[name] = tensor
        if self.device == "cuda":  # this stream's copies only: another stream may be computing meanwhile
            torch.cuda.current_stream().synchronize()
        return staged

    @property
    def stages_apart(self) -> bool:
        return self.device == "cuda"  # fresh device tensors per stage, a wait on the current stream only

    def synchronize(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    def to_numpy(self, output: torch.Tensor) -> np.ndarray:
        return output.detach().float().cpu().numpy()

    def describe(self) -> dict[str, Any]:
        info = {
            **super().describe(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "precision_mode": self.precision_mode if self.low_dtype is not None else None,
            "channels_last": self.channels_last,
            "host_input": self._host_input(),
        }
        if self.precision == "fp8":
            info["fp8_linear_layers"] = self.fp8_layers
        if self.device == "cuda":
            info |= {
                "gpu": torch.cuda.get_device_name(),
                "tf32_convolutions": torch.backends.cudnn.allow_tf32,
                "tf32_matmuls": torch.backends.cuda.matmul.allow_tf32,
                "cudnn_benchmark": torch.backends.cudnn.benchmark,
            }
        return info


def fp8_unavailable_reason(device: str) -> str | None:
    """Why fp8 cells cannot run here: they need torchao and a GPU with FP8 tensor cores."""
    import importlib.util

    if device != "cuda":
        return "fp8 runs on GPUs with FP8 tensor cores (compute capability 8.9+), not on the CPU"
    reason = cuda_unavailable_reason()
    if reason is None and torch.cuda.get_device_capability() < FP8_CAPABILITY:
        reason = f"{torch.cuda.get_device_name()} has no FP8 tensor cores (compute capability 8.9+ needed)"
    if reason is None and importlib.util.find_spec("torchao") is None:
        reason = "torchao is not installed (pip install -e . installs it on Linux x86_64)"
    return reason


def to_fp8(module: torch.nn.Module, scaling: str) -> int:
    """Swap the linear layers of ``module`` for torchao's float8 (e4m3) ones with dynamic scales of
    activations and weights, per row or per tensor; returns how many layers were swapped."""
    from torchao.quantization import Float8DynamicActivationFloat8WeightConfig, PerRow, PerTensor, quantize_

    linears = sum(isinstance(m, torch.nn.Linear) for m in module.modules())
    granularity = PerRow() if scaling == "rowwise" else PerTensor()
    quantize_(module, Float8DynamicActivationFloat8WeightConfig(granularity=granularity))
    return linears


class TorchImageEngine(TorchEngine):
    """The PyTorch engines that also run image models, in channels-last memory format where the variant
    says so (option ``channels_last``): inference and training, not generation."""

    options: TorchOptions

    def _channels_last_option(self) -> bool:
        return self.options.channels_last


class TorchInference(TorchImageEngine):
    """The PyTorch inference engines: the host holds their inputs as a server would (options
    ``host_memory``, ``host_dtype``, ``host_overlap``), which training and generation engines do not take."""

    options: TorchInferenceOptions

    def _host_held(self) -> tuple[bool, bool]:
        """(pinned, in the model's dtype): how the host holds the inputs (``host_memory``, ``host_dtype``);
        the model's dtype applies where its weights are cast to fp16/bf16."""
        pinned = self.options.host_memory == "pinned"
        cast = self.precision in ("fp16", "bf16") and self.options.precision_mode == "cast"
        return pinned, cast and self.options.host_dtype == "model"

    def _host_input(self) -> str | None:
        """How the host holds the inputs, where not as drawn (pageable fp32): ``pinned``, ``fp16``,
        ``pinned fp16``, ``pinned fp16 overlapped``; None for the plain way."""
        pinned, model_dtype = self._host_held()
        words = (("pinned", pinned), (self.precision, model_dtype), ("overlapped", self.overlaps_copies))
        return " ".join(word for word, on in words if on) or None

    @property
    def overlaps_copies(self) -> bool:
        return self.options.host_overlap

    def host_batches(self, batches: list[dict[str, np.ndarray]]) -> list[dict[str, Any]]:
        """The host inputs as this variant's server would hold them (``host_memory``, ``host_dtype``), made
        once before any timed call: float inputs in the model's dtype where its weights are cast, in
        page-locked memory (a GPU copies from it directly, without the driver's bounce buffer)."""
        pinned, model_dtype = self._host_held()
        if self.overlaps_copies and not (pinned and self.device == "cuda"):
            raise ValueError(
                "host_overlap: true overlaps copies to a GPU with its compute, which only page-locked memory "
                "allows: give the variant host_memory: pinned, and run it on cuda"
            )
        if not (pinned or model_dtype):
            return batches
        if pinned and self.device != "cuda":
            raise ValueError("host_memory: pinned is for copies to a GPU: this cell runs on the CPU")
        held = []
        for batch in batches:
            tensors = {}
            for name, array in batch.items():
                tensor = torch.from_numpy(array)
                if tensor.is_floating_point() and model_dtype:
                    tensor = tensor.to(self.low_dtype)
                tensors[name] = tensor.pin_memory() if pinned else tensor
            held.append(tensors)
        return held


class TorchEager(TorchInference):
    options: TorchInferenceOptions

    def prepare(self, artifact: Path | None, inputs: tuple[InputSpec, ...], example: dict[str, np.ndarray]) -> None:
        self.module = self._load(artifact, inputs)

    def run(self, staged: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.forward(staged)
