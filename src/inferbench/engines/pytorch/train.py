"""Training engines: the cost of learning, measured like inference.

``torch_train`` times training iterations (forward, loss, backward, optimizer step) on a staged
batch, baseline or with AMP (fp16 with a gradient scaler, bf16 without), channels-last and
torch.compile as variant options: seed 002's micro-training. ``torch_train_epoch`` times whole
epochs over the workload's processed dataset through a DataLoader, with worker processes, pinned
memory and non_blocking copies as options: seed 004's CPU-against-GPU study.

The loss is cross-entropy against seeded random labels for models with class logits (the MLPs,
ResNet-50, ViT); for encoders without a head (BERT), the mean square of the hidden states, which
costs the same backward pass. Weights change with every call: the timing, not the model, matters.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch

from inferbench.engines.pytorch import CUDA_GRAPH_MODES, TrainEpochOptions, TrainOptions
from inferbench.engines.pytorch.compile import compile_module
from inferbench.engines.pytorch.eager import TorchImageEngine
from inferbench.models.registry import InputSpec

log = logging.getLogger(__name__)


class TorchTrainStep(TorchImageEngine):
    options: TrainOptions

    run_description = (
        "one training iteration (zero_grad, forward, loss, backward, optimizer step) on a batch already "
        "staged where the engine computes"
    )

    def computation(self, workload_kind: str) -> dict[str, Any]:
        compiled = self.options.compile
        mode = self.options.mode if compiled else None
        return super().computation(workload_kind) | {
            "graph": "inductor" if compiled else "eager",
            "compile_mode": mode,
            "cuda_graph": self.device == "cuda" and mode in CUDA_GRAPH_MODES,
        }

    def _train_setup(self, artifact: Path | None, inputs: tuple[InputSpec, ...]) -> None:
        module = self._load(artifact, inputs).train()
        for parameter in module.parameters():
            parameter.requires_grad_(True)
        self.optimizer = torch.optim.SGD(module.parameters(), lr=self.options.lr, momentum=0.9)
        # fp16 gradients underflow without scaling; bf16 has fp32's range and needs none
        self.scaler = torch.amp.GradScaler(self.device, enabled=self.precision == "fp16")
        self.compiled = self.options.compile
        self.eager_module = module  # probes the output shape without triggering a compile
        self.module = compile_module(module, self.options.mode) if self.compiled else module
        self.n_classes: int | None = None
        self._label_rng = torch.Generator().manual_seed(0)

    def _step(self, inputs: dict[str, torch.Tensor], labels: torch.Tensor | None) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        with self._autocast():
            output = self.module(**inputs)
            output = output.float()
            loss = torch.nn.functional.cross_entropy(output, labels) if labels is not None else output.square().mean()
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss.detach()

    def prepare(self, artifact: Path | None, inputs: tuple[InputSpec, ...], example: dict[str, np.ndarray]) -> None:
        self._train_setup(artifact, inputs)
        staged = self.stage(example)
        if self.compiled:
            log.info("compiling the training step (mode %s) on the first steps", self.options.mode)
        with self.cold_start("compile") if self.compiled else contextlib.nullcontext():
            for _ in range(3):  # the first steps compile (or allocate the optimizer state)
                self.run(staged)
            self.synchronize()
        if self.compiled:
            log.info("compiled in %.1f s", self.cold_start_s["compile"])

    # a training step stages its inputs with their targets
    def stage(self, batch: dict[str, np.ndarray]) -> tuple[dict[str, torch.Tensor], torch.Tensor | None]:  # type: ignore[override]
        tensors = super().stage(batch)
        rows = next(iter(batch.values())).shape[0]
        with torch.no_grad(), self._autocast():
            probe = self.eager_module(**tensors) if self.n_classes is None else None
        if probe is not None:
            self.n_classes = probe.shape[1] if probe.dim() == 2 else 0
        labels = None
        if self.n_classes:
            labels = torch.randint(0, self.n_classes, (rows,), generator=self._label_rng).to(self.device)
        self.synchronize()
        return tensors, labels

    def run(self, staged: tuple[dict[str, torch.Tensor], torch.Tensor | None]) -> torch.Tensor:
        return self._step(*staged)

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "optimizer": "SGD(momentum=0.9)",
            "amp": self.low_dtype is not None and self.precision_mode == "autocast",
            "grad_scaler": self.scaler.is_enabled(),
            "compile": self.compiled,
        }


class TorchTrainEpoch(TorchTrainStep):
    """One call = one epoch over every row of the processed dataset, shuffled, in DataLoader batches of
    the cell's batch size; the data comes from host memory on every call."""

    options: TrainEpochOptions

    run_description = (
        "one epoch over the dataset's rows from host memory: DataLoader (workers, pinning), host-to-device "
        "copies, and a training iteration per batch"
    )

    @property
    def staged_on_device(self) -> bool:
        return False  # an epoch reads its batches from the host

    def prepare(self, artifact: Path | None, inputs: tuple[InputSpec, ...], example: dict[str, np.ndarray]) -> None:
        import pandas as pd

        if self.dataset is None:
            raise ValueError("torch_train_epoch needs the workload's processed dataset (--data)")
        table = pd.read_parquet(self.dataset)
        features = torch.from_numpy(table.drop(columns=["target"]).to_numpy(np.float32, copy=True))
        labels = torch.from_numpy(table["target"].to_numpy(np.int64, copy=True))
        (name,) = [spec.name for spec in inputs]
        self.input_name = name
        self._train_setup(artifact, inputs)
        self.workers = self.options.workers
        self.pin_memory = self.options.pin_memory and self.device == "cuda"
        self.non_blocking = self.options.non_blocking and self.device == "cuda"
        self.loader = torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(features, labels),
            batch_size=next(iter(example.values())).shape[0],
            shuffle=True,
            num_workers=self.workers,
            pin_memory=self.pin_memory,
            persistent_workers=self.workers > 0,  # workers start once, not once per epoch
            generator=torch.Generator().manual_seed(0),
        )
        self.rows = len(features)

    # an epoch stages nothing: it reads the dataset itself
    def stage(self, batch: dict[str, np.ndarray]) -> None:  # type: ignore[override]
        return None

    def run(self, staged: None) -> torch.Tensor:  # type: ignore[override]
        loss = torch.zeros(())
        for features, labels in self.loader:
            inputs = {self.input_name: features.to(self.device, non_blocking=self.non_blocking)}
            loss = self._step(inputs, labels.to(self.device, non_blocking=self.non_blocking))
        return loss

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "rows": self.rows,
            "workers": self.workers,
            "pin_memory": self.pin_memory,
            "non_blocking": self.non_blocking,
        }
