"""PyTorch eager execution; fp16/bf16 through autocast; optional channels-last for image models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from inferbench.engines.base import Engine, cuda_unavailable_reason
from inferbench.models.registry import InputSpec, load_checkpoint

AUTOCAST_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


class TorchEager(Engine):
    impl = "torch_eager"

    @classmethod
    def unavailable_reason(cls, device: str, precision: str) -> str | None:
        if device == "cuda":
            reason = cuda_unavailable_reason()
            if reason is None and precision == "bf16" and not torch.cuda.is_bf16_supported():
                reason = f"{torch.cuda.get_device_name()} does not support bf16"
            return reason
        return None

    def prepare(self, artifact: Path | None, inputs: tuple[InputSpec, ...]) -> None:
        if self.threads > 0:
            torch.set_num_threads(self.threads)
        spec, _ = load_checkpoint(artifact)
        self.channels_last = bool(self.options.get("channels_last")) and any(len(i.shape) == 4 for i in inputs)
        module = spec.module.to(self.device)
        if self.channels_last:
            module = module.to(memory_format=torch.channels_last)
        self.module = module.eval()
        self.autocast_dtype = AUTOCAST_DTYPES.get(self.precision)

    def stage(self, batch: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        staged = {}
        for name, array in batch.items():
            tensor = torch.from_numpy(array).to(self.device)
            if self.channels_last and tensor.dim() == 4:
                tensor = tensor.contiguous(memory_format=torch.channels_last)
            staged[name] = tensor
        self.synchronize()
        return staged

    def run(self, staged: dict[str, torch.Tensor]) -> torch.Tensor:
        with (
            torch.inference_mode(),
            torch.autocast(
                device_type=self.device,
                dtype=self.autocast_dtype or torch.float32,
                enabled=self.autocast_dtype is not None,
            ),
        ):
            return self.module(**staged)

    def synchronize(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    def to_numpy(self, output: torch.Tensor) -> np.ndarray:
        return output.detach().float().cpu().numpy()

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "autocast": str(self.autocast_dtype) if self.autocast_dtype else None,
            "channels_last": self.channels_last,
        }
