"""The model builders. Each sets only what differs; inputs come from the model's own metadata."""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from inferbench.models.spec import InputSpec, ModelSpec, register_family, register_model


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


def check_arch(name: str, arch: dict[str, Any], allowed: Iterable[str]) -> None:
    """Refuse ``arch`` keys that the builder does not take: a typo would otherwise be ignored
    (transformers' configs keep any key) or reach a loader. Raises ValueError listing the allowed keys."""
    allowed = set(allowed)
    # weights are random by design: nothing may make a library load a file or a hub checkpoint (a pickle)
    loading = sorted(k for k in arch if k in _LOADING_KEYS or k.startswith("pretrained"))
    if loading:
        raise ValueError(f"{name}: arch may not set {', '.join(loading)}: inferbench builds models with random weights")
    unknown = sorted(set(arch) - allowed)
    if unknown:
        raise ValueError(
            f"{name}: arch keys {', '.join(unknown)} are not taken by this model; allowed: {', '.join(sorted(allowed))}"
        )


#: keys of timm.create_model / transformers configs that load files or reach the network
_LOADING_KEYS = {"checkpoint_path", "cache_dir", "token", "revision", "trust_remote_code", "name_or_path"}


def _init_keys(cls: type) -> set[str]:
    """The keyword parameters of ``cls.__init__`` (not *args / **kwargs)."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {p.name for p in inspect.signature(cls.__init__).parameters.values() if p.kind in kinds} - {"self"}


def _timm(name: str, timm_name: str, arch: dict[str, Any]) -> ModelSpec:
    import timm

    with torch.device("meta"):  # the model's class, without allocating it
        model_class = type(timm.create_model(timm_name, pretrained=False))
    check_arch(name, arch, _init_keys(model_class))
    module = timm.create_model(timm_name, pretrained=False, **arch)
    channels, height, width = module.pretrained_cfg["input_size"]
    if "img_size" in arch:
        height = width = int(arch["img_size"])
    inputs = (InputSpec("x", ("batch", channels, height, width), "float32"),)
    return ModelSpec(name, module, inputs, "logits", dict(arch))


def _hf_config(name: str, config_class: type, arch: dict[str, Any]) -> Any:
    """A transformers config from ``arch``, whose keys must be the config class's own parameters
    (plus the attention implementation): PretrainedConfig would keep a misspelled key silently."""
    check_arch(name, arch, _init_keys(config_class) | {"attn_implementation"})
    return config_class(**arch)


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

    config = _hf_config("bert_base", BertConfig, arch)
    return _text("bert_base", BertModel(config, add_pooling_layer=False), config.vocab_size, arch)


@register_model("distilbert")
def distilbert(**arch: Any) -> ModelSpec:
    from transformers import DistilBertConfig, DistilBertModel

    config = _hf_config("distilbert", DistilBertConfig, arch)
    return _text("distilbert", DistilBertModel(config), config.vocab_size, arch)


@register_family("timm")
def timm_model(model_name: str, workload: str | None = None, **arch: Any) -> ModelSpec:
    """Any timm model by name (workload ``timm:<model_name>``, or a declared workload built as it),
    random weights, its own input size."""
    return _timm(workload or f"timm:{model_name}", model_name, arch)


@register_family("hf")
def hf_encoder(model_type: str, workload: str | None = None, **arch: Any) -> ModelSpec:
    """Any transformers encoder by model type (workload ``hf:<model_type>``, or a declared workload built
    as it): its default configuration (``arch`` overrides it), random weights, last hidden states out."""
    from transformers import AutoModel
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    name = workload or f"hf:{model_type}"
    config = _hf_config(name, CONFIG_MAPPING[model_type], arch)
    return _text(name, AutoModel.from_config(config), config.vocab_size, arch)


class _CausalLM(nn.Module):
    """A transformers causal LM with a plain tensor signature: (input_ids, attention_mask) -> the logits of
    the last position, float32 (the prefill's next-token distribution: what parity compares). Generation
    engines drive ``model`` itself, with its KV cache (inferbench.engines.generation)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        logits = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits
        return logits[:, -1, :].float()


@register_family("llm")
def llm_decoder(model_type: str, workload: str | None = None, **arch: Any) -> ModelSpec:
    """Any transformers decoder LM by model type (workload ``llm:<model_type>``, or a declared workload
    built as it): its default configuration, or the shape in DECODER_SHAPES (llama: TinyLlama-1.1B), with
    ``arch`` over it; random weights; the prompt's token ids in, the last position's logits out."""
    from transformers import AutoModelForCausalLM
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from inferbench.catalog.workloads import DECODER_SHAPES

    name = workload or f"llm:{model_type}"
    config = _hf_config(name, CONFIG_MAPPING[model_type], {**DECODER_SHAPES.get(model_type, {}), **arch})
    model = AutoModelForCausalLM.from_config(config)
    inputs = (
        InputSpec("input_ids", ("batch", "seq"), "int64", "tokens", config.vocab_size),
        InputSpec("attention_mask", ("batch", "seq"), "int64", "mask"),
    )
    return ModelSpec(name, _CausalLM(model), inputs, "next_token_logits", dict(arch))
