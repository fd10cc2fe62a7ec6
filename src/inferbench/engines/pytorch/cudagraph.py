"""CUDA graphs: a model's kernels captured once for the cell's static shapes, then replayed.

A graph reads its inputs from the buffers it was captured with. The timed calls rotate among
several staged batches, so a call copies the staged batch into those buffers on the device (a few
microseconds even for a batch of 32 images) and then ``replay()``s: one launch for the whole model,
which removes the per-kernel launch cost that dominates small batches. ``TorchCudaGraph`` captures the
eager kernels; torch.compile's ``cuda_graph`` option captures Inductor's kernels the same way
(``CapturedGraph``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from inferbench.engines.base import cuda_unavailable_reason
from inferbench.engines.pytorch import TorchCudaGraphOptions
from inferbench.engines.pytorch.eager import TorchInference
from inferbench.models.registry import InputSpec

#: what a call does when it replays a graph of its own
REPLAY_DESCRIPTION = (
    "a device-to-device copy of the staged batch into the graph's input buffers, then one replay(); "
    "the output stays on the device"
)


class CapturedGraph:
    """``forward`` captured in one CUDA graph on ``static_inputs`` (after warm-up calls on a side stream, as
    capture requires); ``replay`` copies a staged batch of the same shapes into them and replays."""

    def __init__(
        self, forward: Callable[[dict[str, torch.Tensor]], torch.Tensor], static_inputs: dict[str, torch.Tensor]
    ) -> None:
        self.static_inputs = static_inputs
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                forward(static_inputs)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.static_output = forward(static_inputs)
        torch.cuda.synchronize()

    def check_shapes(self, staged: dict[str, torch.Tensor]) -> None:
        for name, tensor in staged.items():
            if tensor.shape != self.static_inputs[name].shape:
                raise ValueError(
                    f"a CUDA graph runs one shape: captured {tuple(self.static_inputs[name].shape)}, "
                    f"got {tuple(tensor.shape)} for {name}"
                )

    def replay(self, staged: dict[str, torch.Tensor]) -> torch.Tensor:
        for name, tensor in staged.items():
            self.static_inputs[name].copy_(tensor, non_blocking=True)
        self.graph.replay()
        return self.static_output


class TorchCudaGraph(TorchInference):
    options: TorchCudaGraphOptions

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
        self.module = self._load(artifact, inputs)
        static_inputs = super().stage(example)  # staging is not capturing: outside its cold-start step
        with self.cold_start("capture"):
            self.captured = CapturedGraph(self.forward, static_inputs)

    run_description = REPLAY_DESCRIPTION

    def stage(self, batch: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        staged = super().stage(batch)
        self.captured.check_shapes(staged)
        return staged

    def run(self, staged: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.captured.replay(staged)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "graph": "captured once, replayed"}
