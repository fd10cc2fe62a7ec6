"""The model builders. Each sets only what differs; inputs come from the model's own metadata."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from inferbench.models.registry import InputSpec, ModelSpec, register_family, register_model


class MLP(nn.Module):
    """in_features -> hidden... -> n_classes logits, ReLU between."""

    def __init__(self, in_features: int, hidden: list[int], n_classes: int = 2) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = in_features
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, n_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def _mlp(name: str, in_features: int, hidden: list[int] | None, default_hidden: list[int]) -> ModelSpec:
    hidden = list(hidden or default_hidden)
    module = MLP(in_features, hidden)
    arch = {"in_features": in_features, "hidden": hidden}
    return ModelSpec(name, module, (InputSpec("x", ("batch", in_features), "float32"),), "logits", arch)


@register_model("mlp_lendingclub")
def mlp_lendingclub(in_features: int, hidden: list[int] | None = None) -> ModelSpec:
    return _mlp("mlp_lendingclub", in_features, hidden, [64, 32])


@register_model("mlp_heart")
def mlp_heart(in_features: int, hidden: list[int] | None = None) -> ModelSpec:
    return _mlp("mlp_heart", in_features, hidden, [32, 16])


def _timm(name: str, timm_name: str, arch: dict[str, Any]) -> ModelSpec:
    import timm

    # weights are random by design: nothing in `arch` may make timm load a file or a hub checkpoint
    # (a checkpoint file is a pickle)
    loading = sorted(k for k in arch if k == "checkpoint_path" or k.startswith("pretrained"))
    if loading:
        raise ValueError(f"{name}: arch may not set {', '.join(loading)}: inferbench builds models with random weights")

    module = timm.create_model(timm_name, pretrained=False, **arch)
    channels, height, width = module.pretrained_cfg["input_size"]
    if "img_size" in arch:
        height = width = int(arch["img_size"])
    inputs = (InputSpec("x", ("batch", channels, height, width), "float32"),)
    return ModelSpec(name, module, inputs, "logits", dict(arch))


@register_model("resnet50")
def resnet50(**arch: Any) -> ModelSpec:
    return _timm("resnet50", "resnet50", arch)


@register_model("vit_b16")
def vit_b16(**arch: Any) -> ModelSpec:
    return _timm("vit_b16", "vit_base_patch16_224", arch)


class _Encoder(nn.Module):
    """A transformers encoder with a plain tensor signature: (input_ids, attention_mask) -> hidden states."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def _text(name: str, model: nn.Module, vocab_size: int, arch: dict[str, Any]) -> ModelSpec:
    inputs = (
        InputSpec("input_ids", ("batch", "seq"), "int64", "tokens", vocab_size),
        InputSpec("attention_mask", ("batch", "seq"), "int64", "mask"),
    )
    return ModelSpec(name, _Encoder(model), inputs, "last_hidden_state", dict(arch))


@register_model("bert_base")
def bert_base(**arch: Any) -> ModelSpec:
    from transformers import BertConfig, BertModel

    config = BertConfig(**arch)
    return _text("bert_base", BertModel(config, add_pooling_layer=False), config.vocab_size, arch)


@register_model("distilbert")
def distilbert(**arch: Any) -> ModelSpec:
    from transformers import DistilBertConfig, DistilBertModel

    config = DistilBertConfig(**arch)
    return _text("distilbert", DistilBertModel(config), config.vocab_size, arch)


@register_family("timm")
def timm_model(model_name: str, **arch: Any) -> ModelSpec:
    """Any timm model by name (workload ``timm:<model_name>``), random weights, its own input size."""
    return _timm(f"timm:{model_name}", model_name, arch)


@register_family("hf")
def hf_encoder(model_type: str, **arch: Any) -> ModelSpec:
    """Any transformers encoder by model type (workload ``hf:<model_type>``): its default
    configuration (``arch`` overrides it), random weights, last hidden states out."""
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.for_model(model_type, **arch)
    return _text(f"hf:{model_type}", AutoModel.from_config(config), config.vocab_size, arch)
