"""The workloads a study can name, and what kind of input each takes. Light: imports nothing heavy."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class WorkloadInfo:
    kind: Literal["tabular", "vision", "text"]
    description: str
    dataset: str | None = None  # tabular workloads train on this dataset

    @property
    def has_seq_len(self) -> bool:
        return self.kind == "text"


WORKLOADS: dict[str, WorkloadInfo] = {
    "mlp_lendingclub": WorkloadInfo("tabular", "MLP trained on LendingClub accepted loans", "lendingclub"),
    "mlp_heart": WorkloadInfo("tabular", "MLP trained on UCI Heart Disease (Cleveland)", "heart"),
    "resnet50": WorkloadInfo("vision", "ResNet-50 (timm), random weights"),
    "vit_b16": WorkloadInfo("vision", "ViT-B/16 at 224 px (timm vit_base_patch16_224), random weights"),
    "bert_base": WorkloadInfo("text", "BERT-base encoder (transformers), random weights"),
    "distilbert": WorkloadInfo("text", "DistilBERT encoder (transformers), random weights"),
}

PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "bf16", "int8")
DEVICES: tuple[str, ...] = ("cpu", "cuda")
