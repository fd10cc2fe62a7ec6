"""The workloads a study can name, and what kind of input each takes. Light: imports nothing heavy.

Seven are declared here; besides them, any timm model (``timm:<model name>``, e.g. ``timm:convnext_tiny``),
any transformers encoder (``hf:<model type>``, e.g. ``hf:roberta``) and any transformers decoder LM
(``llm:<model type>``, e.g. ``llm:gpt2``, ``llm:llama``: a TinyLlama-1.1B-shaped Llama) can be named in a
study, with random weights like the others: the families below say how. Everything that needs the list of
workloads (config checks, Snakemake's wildcard constraints, CLI choices, the report's order) asks
this module.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class WorkloadInfo:
    #: decoder: a causal language model that generates tokens (inferbench.scenarios.generation)
    kind: Literal["tabular", "vision", "text", "decoder"]
    description: str
    dataset: str | None = None  # tabular workloads train on this dataset
    #: the model of a family it is built as, where no builder has its name (e.g. ``timm:convnext_tiny``):
    #: then this entry is all a new workload needs
    model: str | None = None
    #: the longest sequence the model takes (its position embeddings), where it is fixed and known here
    positions: int | None = None

    @property
    def has_seq_len(self) -> bool:
        """Text in: the sequence length is an axis (a decoder's prompt length)."""
        return self.kind in ("text", "decoder")

    @property
    def trained(self) -> bool:
        """Made by training on its dataset (rule train_mlp), else built with random weights (build_model)."""
        return self.dataset is not None


WORKLOADS: dict[str, WorkloadInfo] = {
    "mlp_lendingclub": WorkloadInfo("tabular", "MLP on LendingClub-format loans, generated or real", "lendingclub"),
    "mlp_heart": WorkloadInfo("tabular", "MLP on UCI Heart Disease-format rows, generated or real", "heart"),
    "resnet50": WorkloadInfo("vision", "ResNet-50 (timm), random weights"),
    "vit_b16": WorkloadInfo("vision", "ViT-B/16 at 224 px (timm vit_base_patch16_224), random weights"),
    "bert_base": WorkloadInfo("text", "BERT-base encoder (transformers), random weights", positions=512),
    "distilbert": WorkloadInfo("text", "DistilBERT encoder (transformers), random weights", positions=512),
    # small enough for the CPU default on 2 cores (its shape: config models.llama_mini.arch)
    "llama_mini": WorkloadInfo("decoder", "a small Llama decoder (transformers), random weights", model="llm:llama"),
}

#: workloads named on the fly, ``<family>:<name>``: the kind of input and how the description reads
FAMILIES: dict[str, tuple[Literal["vision", "text", "decoder"], str]] = {
    "timm": ("vision", "{name} (timm), random weights"),
    "hf": ("text", "{name} encoder (transformers AutoModel), random weights"),
    "llm": ("decoder", "{name} decoder LM (transformers AutoModelForCausalLM), random weights"),
}
#: the shape an ``llm:<type>`` decoder takes where transformers' default config of the type is not the model
#: people run (``models.<workload>.arch`` overrides either): llama is TinyLlama-1.1B's shape
DECODER_SHAPES: dict[str, dict[str, int | float]] = {
    "llama": {
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "num_hidden_layers": 22,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "vocab_size": 32000,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5,
    },
}
_FAMILY_NAME = re.compile(r"^(?P<family>[a-z]+):(?P<name>[A-Za-z0-9_.\-]+)$")

#: fp8: e4m3 linear layers (weights and activations, scaled) with everything else in bf16 (torchao)
PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "bf16", "int8", "fp8")
DEVICES: tuple[str, ...] = ("cpu", "cuda")


def family_of(workload: str) -> tuple[str, str] | None:
    """(family, name) of a ``timm:...`` / ``hf:...`` workload, or None."""
    match = _FAMILY_NAME.match(workload)
    if match is None or match["family"] not in FAMILIES:
        return None
    return match["family"], match["name"]


def workload_info(workload: str) -> WorkloadInfo:
    """What the workload is: a declared one, or one of a family named on the fly."""
    if workload in WORKLOADS:
        return WORKLOADS[workload]
    family = family_of(workload)
    if family is None:
        raise KeyError(f"unknown workload {workload!r}; {allowed_text()}")
    kind, description = FAMILIES[family[0]]
    return WorkloadInfo(kind, description.format(name=family[1]))


def allowed_text() -> str:
    families = ", ".join(f"{f}:<name>" for f in FAMILIES)
    return f"allowed values: {', '.join(WORKLOADS)}, or {families} (e.g. timm:convnext_tiny, hf:roberta, llm:gpt2)"


def ordered(workloads: Iterable[str]) -> list[str]:
    """The declared workloads in their order, then the others by name (the report's order)."""
    present = set(workloads)
    return [w for w in WORKLOADS if w in present] + sorted(present - set(WORKLOADS))
