"""CUDA graphs: the eager model's kernels captured once for the cell's static shapes, then replayed.

A graph reads its inputs from the buffers it was captured with. The timed calls rotate among
several staged batches, so ``run`` copies the staged batch into those buffers on the device (a few
microseconds even for a batch of 32 images) and then ``replay()``s: one launch for the whole model,
which removes the per-kernel launch cost that dominates small batches.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from inferbench.engines.base import cuda_unavailable_reason
from inferbench.engines.pytorch.eager import TorchEngine
from inferbench.models.registry import InputSpec


class TorchCudaGraph(TorchEngine):
    impl = "torch_cudagraph"
    graph = "cuda_graph"

    def computation(self, workload_kind: str) -> dict[str, Any]:
        return super().computation(workload_kind) | {"cuda_graph": True}

    @property
    def takes_any_batch(self) -> bool:
        return False  # a graph replays the shapes it was captured with

    @classmethod
    def unavailable_reason(cls, device: str, precision: str) -> str | None:
        return cuda_unavailable_reason() or super().unavailable_reason(device, precision)

    def prepare(self, artifact: Path | None, inputs: tuple[InputSpec, ...], example: dict[str, np.ndarray]) -> None:
        module = self._load(artifact, inputs)
        self.static_inputs = super().stage(example)
        with self.cold_start("capture"), torch.inference_mode(), self._autocast():
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up on a side stream, as capture requires
                for _ in range(3):
                    module(**self.static_inputs)
            torch.cuda.current_stream().wait_stream(side)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.static_output = module(**self.static_inputs)
            torch.cuda.synchronize()
        self.module = module

    run_description = (
        "a device-to-device copy of the staged batch into the graph's input buffers, then one replay(); "
        "the output stays on the device"
    )

    def stage(self, batch: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        staged = super().stage(batch)
        for name, tensor in staged.items():
            if tensor.shape != self.static_inputs[name].shape:
                raise ValueError(
                    f"a CUDA graph runs one shape: captured {tuple(self.static_inputs[name].shape)}, "
                    f"got {tuple(tensor.shape)} for {name}"
                )
        return staged

    def run(self, staged: dict[str, torch.Tensor]) -> torch.Tensor:
        for name, tensor in staged.items():
            self.static_inputs[name].copy_(tensor, non_blocking=True)
        self.graph.replay()
        return self.static_output

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "graph": "captured once, replayed"}
