"""How large a workload's model is, and whether a decoder's shape holds together, asked before any job
(inferbench.plan.config): a model too large for the host, or a shape its library takes only to fail in
build_model or in the first call, stops the run with the count, the limit and the fix.

Parameters are counted on the meta device (the model built, no weights allocated) by the builder a job
uses (inferbench.models.registry.create_model), once per workload and arch in a process; torch and the
model's library are imported only when a workload needs counting.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import itertools
import json
import os
from dataclasses import dataclass
from typing import Any

from inferbench.catalog.workloads import DECODER_SHAPES, family_of, workload_info

#: random weights beyond this many parameters are refused (fp32: 8 GB): a family's default (hf:llama is
#: 6.7 billion) would otherwise fill the host's memory in every job; the fix is to shrink it in `arch`
MAX_PARAMETERS = 2_000_000_000
#: the same for llm: decoders: llm:llama (TinyLlama-1.1B's shape) fits; llm:qwen2's default, 12 billion
#: (48 GB in fp32), was OOM-killed in build_model
MAX_DECODER_PARAMETERS = 2_000_000_000
#: bytes a weight takes at each precision (int8, fp8: the quantised layers' weights)
BYTES_PER_PARAMETER = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1, "fp8": 1}
#: a stack deeper than this (an `arch` key of LAYER_KEYS) is first counted from one and two of its layers:
#: building thousands of layers, even on the meta device, took seconds per thousand before the refusal
EXACT_LAYERS = 64
#: the `arch` keys that set a stack's depth (transformers' configs, timm's ViT-like models)
LAYER_KEYS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers", "depth")
#: the sizes of a transformers decoder config that must be positive integers (their canonical names:
#: a config's attribute_map gives the key it takes them as, e.g. GPT-2's n_embd for hidden_size)
DECODER_SIZES = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
)
_DECODER_EXAMPLES = "e.g. llm:gpt2, llm:llama, llm:qwen2"


class SizingError(ValueError):
    """The workload's model cannot be built with its `arch`: the message says why."""


@dataclass(frozen=True)
class Size:
    parameters: int
    #: where the count is not exact: "at least" (an MLP's first layer takes the dataset's columns, unknown
    #: before its data is made) or "about" (a deep stack, extrapolated from one and two of its layers)
    qualifier: str = ""

    def text(self) -> str:
        return f"{self.qualifier + ' ' if self.qualifier else ''}{self.parameters / 1e9:.1f} billion parameters"


def parameter_limit(workload: str) -> int:
    return MAX_DECODER_PARAMETERS if workload_info(workload).kind == "decoder" else MAX_PARAMETERS


def host_memory_bytes() -> int | None:
    """This machine's physical memory (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def workload_size(workload: str, arch: dict[str, Any]) -> Size:
    """The parameters of ``workload`` built with ``arch``; SizingError where it cannot be built."""
    return _size(workload, json.dumps(arch, sort_keys=True))


@functools.cache
def _size(workload: str, arch_json: str) -> Size:
    arch = json.loads(arch_json)
    if workload_info(workload).kind == "tabular":
        return _mlp_size(arch)
    deep = _deep_stack(workload, arch)
    if deep is not None:
        key, depth = deep
        try:
            one, two = _meta_count(workload, {**arch, key: 1}), _meta_count(workload, {**arch, key: 2})
        except SizingError:  # a shape that needs its depth (a list per layer): counted whole below
            pass
        else:
            estimate = one + (depth - 1) * (two - one)
            if estimate > parameter_limit(workload):
                return Size(estimate, "about")
    return Size(_meta_count(workload, arch))


def _deep_stack(workload: str, arch: dict[str, Any]) -> tuple[str, int] | None:
    """The `arch` key and depth of a stack deeper than EXACT_LAYERS, or None."""
    family = family_of(workload_info(workload).model or workload)
    shape = {**(DECODER_SHAPES.get(family[1], {}) if family and family[0] == "llm" else {}), **arch}
    for key in LAYER_KEYS:
        depth = shape.get(key)
        if _positive_int(depth) and depth > EXACT_LAYERS:
            return key, depth
    return None


def _meta_count(workload: str, arch: dict[str, Any]) -> int:
    import torch

    from inferbench.models.registry import create_model

    try:
        with torch.device("meta"):  # the modules and their shapes, no weights allocated
            spec = create_model(workload, **arch)
    except Exception as error:  # whatever the builder or its library refuses, said before any job
        raise SizingError(f"the model cannot be built with it: {type(error).__name__}: {error}") from error
    return spec.n_params


def _mlp_size(arch: dict[str, Any]) -> Size:
    """An MLP's parameters (inferbench.models.builders.MLP: in_features -> hidden... -> 2 logits), its
    input layer counted for one column: the dataset's count is known once its data is made."""
    unknown = sorted(set(arch) - {"hidden"})
    if unknown:
        raise SizingError(f"arch keys {', '.join(unknown)} are not taken by an MLP; allowed: hidden")
    hidden = arch.get("hidden") or []
    if not isinstance(hidden, list) or not all(_positive_int(h) for h in hidden):
        raise SizingError(f"hidden: {hidden!r} must be a list of positive integers (the hidden layers' widths)")
    widths = [1, *hidden, 2]
    return Size(sum((a + 1) * b for a, b in itertools.pairwise(widths)), "at least")


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _shrink_keys(workload: str) -> str:
    kind = workload_info(workload).kind
    if kind == "tabular":
        return "hidden"
    if kind == "vision":
        return "depth, embed_dim (ViT-like) or layers (ResNet-like)"
    family = family_of(workload_info(workload).model or workload)
    keys = ("num_hidden_layers", "hidden_size")
    if family is not None and family[0] in ("hf", "llm"):
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        keys = tuple(CONFIG_MAPPING[family[1]].attribute_map.get(k, k) for k in keys)
    return ", ".join(keys)


def size_problems(workload: str, arch: dict[str, Any], precisions: list[str]) -> list[str]:
    """Why ``workload`` is too large to build here: past its kind's parameter limit, or its fp32 weights
    (build_model makes them on the host, whatever precision its cells run at) past this machine's memory."""
    try:
        size = workload_size(workload, arch)
    except SizingError as error:
        return [f"models.{workload}.arch: {error}"]
    decoder = workload_info(workload).kind == "decoder"
    limit, fp32 = parameter_limit(workload), size.parameters * BYTES_PER_PARAMETER["fp32"]
    weights = f"{size.text()} ({fp32 / 1e9:.0f} GB of random fp32 weights)"
    at = "".join(
        f"; at {p} its weights take {size.parameters * BYTES_PER_PARAMETER[p] / 1e9:.1f} GB"
        for p in precisions
        if p != "fp32"
    )
    fix = (
        f"shrink it in models.{workload}.arch (e.g. {_shrink_keys(workload)}); activations"
        f"{' and the KV cache' if decoder else ''} at the studies' batch sizes and sequence lengths come on top"
    )
    if size.parameters > limit:
        kind = " for llm: decoders" if decoder else ""
        return [f"{workload}: {weights} is more than the {limit / 1e9:g} billion allowed{kind}{at}; {fix}"]
    memory = host_memory_bytes()
    if memory is not None and fp32 > memory:
        return [
            f"{workload}: {weights} is more than this machine's {memory / 1e9:.0f} GB of memory, which build_model "
            f"fills with them{at}; {fix}"
        ]
    return []


def _config_keys(config_class: type) -> set[str]:
    """What a transformers config takes (as the builder's check, inferbench.models.builders.check_arch)."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    keys = {p.name for p in inspect.signature(config_class.__init__).parameters.values() if p.kind in kinds}
    return (keys - {"self"}) | {"attn_implementation"}


def _config_default(config_class: type, key: str) -> Any:
    """The default of a config parameter as declared (None: none, or derived from others at init)."""
    parameter = inspect.signature(config_class.__init__).parameters.get(key)
    return None if parameter is None or parameter.default is inspect.Parameter.empty else parameter.default


def decoder_type_problem(model_type: str) -> str | None:
    """Why an ``llm:<model_type>`` workload is not a decoder LM (None: it is one): transformers has no
    causal LM of the type, or the type is an encoder (a masked LM too, whose causal-LM class is the encoder
    made a decoder for fine-tuning: llm:bert was measured as a decoder) or an encoder-decoder."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return (
            f"transformers has no causal language model (AutoModelForCausalLM) of type {model_type!r}: the llm: "
            f"family takes decoder LMs ({_DECODER_EXAMPLES}); a text encoder is hf:<type>, a vision model timm:<name>"
        )
    if _config_default(CONFIG_MAPPING[model_type], "is_encoder_decoder") is True:
        return (
            f"{model_type} is an encoder-decoder (is_encoder_decoder): the llm: family takes decoder-only LMs "
            f"({_DECODER_EXAMPLES})"
        )
    if model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        return (
            f"{model_type} is an encoder: transformers maps it to a masked LM, and its causal-LM class "
            f"({MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type]}) is the encoder made a decoder for fine-tuning, not a "
            f"decoder LM; measure it as the encoder hf:{model_type}, or name a decoder LM ({_DECODER_EXAMPLES})"
        )
    return None


def _decoder_shape(model_type: str, arch: dict[str, Any]) -> dict[str, Any]:
    """What the builder gives the config (inferbench.models.builders.llm_decoder): the type's shape, arch over it."""
    return {**DECODER_SHAPES.get(model_type, {}), **arch}


def decoder_arch_problems(workload: str, model_type: str, arch: dict[str, Any]) -> list[str]:
    """What an ``llm:`` decoder's `arch` gets wrong before transformers would say it late or not at all:
    keys its config does not take (a typo is kept silently), sizes that are not positive integers, a hidden
    size the attention heads do not divide, key/value heads that do not divide the attention heads; then
    whatever the config itself refuses, and a config that is an encoder-decoder."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config_class, where = CONFIG_MAPPING[model_type], f"models.{workload}.arch"
    allowed = _config_keys(config_class)
    problems = []
    for key in sorted(set(arch) - allowed):
        close = difflib.get_close_matches(key, sorted(allowed), n=3, cutoff=0.7)
        hint = f"did you mean {', '.join(close)}?" if close else f"its keys: {', '.join(sorted(allowed))}"
        problems.append(
            f"{where}.{key}: not a key of transformers' {model_type} config ({config_class.__name__}); {hint}"
        )
    if problems:
        return problems
    shape = _decoder_shape(model_type, arch)
    sizes: dict[str, tuple[str, int]] = {}  # canonical name -> (the key the config takes it as, its value)
    for name in DECODER_SIZES:
        key = config_class.attribute_map.get(name, name)
        value = shape[key] if key in shape else _config_default(config_class, key)
        if value is None:
            continue  # not in this config, or derived from the others at init
        if not _positive_int(value):
            problems.append(f"{where}.{key}: {value!r} must be a positive integer")
        else:
            sizes[name] = (key, value)
    if problems:
        return problems
    hidden, heads = sizes.get("hidden_size"), sizes.get("num_attention_heads")
    # a head_dim of its own (Gemma, Qwen3) decouples the heads from the hidden size
    if hidden and heads and "head_dim" not in sizes and hidden[1] % heads[1]:
        lower, upper = hidden[1] - hidden[1] % heads[1], hidden[1] + heads[1] - hidden[1] % heads[1]
        problems.append(
            f"{where}: {hidden[0]} {hidden[1]} is not a multiple of {heads[0]} {heads[1]} (each attention head "
            f"takes {hidden[0]} / {heads[0]} dimensions); give e.g. {hidden[0]} {lower or upper} or {upper}"
        )
    kv = sizes.get("num_key_value_heads")
    if heads and kv and heads[1] % kv[1]:
        divisors = [d for d in range(1, heads[1] + 1) if heads[1] % d == 0]
        problems.append(
            f"{where}: {kv[0]} {kv[1]} does not divide {heads[0]} {heads[1]} (each key/value head serves an equal "
            f"share of the attention heads); give one of {', '.join(map(str, divisors[:12]))}"
        )
    if problems:
        return problems
    try:
        config = decoder_config(model_type, arch)
    except Exception as error:  # the config's own validation (a value of the wrong kind, a bad combination)
        return [f"{where}: transformers' {model_type} config refuses it: {error}"]
    if getattr(config, "is_encoder_decoder", False):
        return [f"{where}: is_encoder_decoder makes {model_type} an encoder-decoder; llm: workloads are decoder LMs"]
    return []


def decoder_config(model_type: str, arch: dict[str, Any]) -> Any:
    """The transformers config an ``llm:<model_type>`` workload is built with (raises what the config does)."""
    return _decoder_config(model_type, json.dumps(arch, sort_keys=True))


@functools.cache
def _decoder_config(model_type: str, arch_json: str) -> Any:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    return CONFIG_MAPPING[model_type](**_decoder_shape(model_type, json.loads(arch_json)))


def positions_key(model_type: str) -> str:
    """The key a config takes its positions as (GPT-2: n_positions)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    return CONFIG_MAPPING[model_type].attribute_map.get("max_position_embeddings", "max_position_embeddings")


def context_length(config: Any) -> int | None:
    """The longest sequence ONNX Runtime GenAI's model builder exports the decoder for (its genai_config's
    context_length): the config's seq_length where it has one, else its positions."""
    if hasattr(config, "seq_length"):
        return config.seq_length
    return getattr(config, "max_position_embeddings", None)
