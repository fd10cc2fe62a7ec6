"""Validate the workflow config against its JSON schema, fill defaults, and check cross-references.

Errors name the config key and what is allowed, so a wrong value stops the run before any job.
"""

from __future__ import annotations

import copy
import difflib
import math
import re
from collections.abc import Iterator
from typing import Any

import jsonschema
import yaml

from inferbench.catalog.engine_registry import ENGINES, engine_info, option_problems
from inferbench.catalog.exporters import EXPORTERS
from inferbench.catalog.layouts import LAYOUTS
from inferbench.catalog.scenarios import SCENARIOS
from inferbench.catalog.workloads import DEVICES, PRECISIONS, WORKLOADS, allowed_text, family_of, workload_info
from inferbench.core.settings import schema as config_schema
from inferbench.data import DATASETS


def axis_values() -> dict[str, list[str]]:
    """The schema's enums that their registries declare (each value declared once, there)."""
    return {
        "precision": list(PRECISIONS),
        "device": list(DEVICES),
        "device_or_auto": ["auto", *DEVICES],
        "scenario": list(SCENARIOS),
        "layout": list(LAYOUTS),
        "exporter": list(EXPORTERS),
        **{f"{name}_source": list(info.sources) for name, info in DATASETS.items()},
    }


class ConfigError(ValueError):
    """The config is invalid; the message says which key and what is allowed."""


def _extend_with_default(validator_class: type) -> type:
    """A validator that also fills ``default`` values into the instance (the jsonschema FAQ recipe)."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator: Any, properties: dict, instance: Any, schema: dict) -> Iterator[Any]:
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if "default" in subschema and name not in instance:
                    instance[name] = _copy(subschema["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def _copy(value: Any) -> Any:
    return yaml.safe_load(yaml.safe_dump(value))


def _key(path: Any) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


#: what a schema pattern asks for, in words (the schema's patterns, by their regex)
PATTERN_HINTS = {
    "^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$": (
        "a Kaggle dataset is owner/name, letters, digits, '_', '.', '-' only (e.g. wordsforthewise/lending-club)"
    ),
    "^https://[A-Za-z0-9.-]+(:[0-9]+)?(/[A-Za-z0-9._~%+=,/-]*)?$": (
        "downloads are https:// URLs of plain characters (no file://, http://, spaces or shell characters)"
    ),
}


def _describe(error: jsonschema.ValidationError) -> str:
    key = _key(error.absolute_path)
    v, schema = error.validator, error.schema
    if v == "enum":
        allowed = ", ".join(map(str, schema["enum"]))
        return f"{key}: {error.instance!r} is not allowed; allowed values: {allowed}"
    if v == "minimum":
        return f"{key}: {error.instance!r} is too small; it must be >= {schema['minimum']}"
    if v == "exclusiveMinimum":
        return f"{key}: {error.instance!r} is too small; it must be > {schema['exclusiveMinimum']}"
    if v == "maximum":
        return f"{key}: {error.instance!r} is too large; it must be <= {schema['maximum']:,}"
    if v == "type":
        return f"{key}: {error.instance!r} has the wrong type; expected {schema['type']}"
    if v == "additionalProperties":
        allowed = ", ".join(sorted(schema.get("properties", {})))
        return f"{key}: {error.message}; allowed keys: {allowed}"
    if v == "propertyNames":
        return f"{key}: {error.message}"
    if v == "pattern":  # the regex alone does not say what is wanted: the schema's comment-like hint does
        hint = PATTERN_HINTS.get(schema["pattern"])
        return f"{key}: {error.instance!r} is not allowed{f'; {hint}' if hint else ''} (pattern {schema['pattern']})"
    return f"{key}: {error.message}"


#: values a config may hold once YAML aliases are expanded: a few hundred bytes of nested aliases
#: expand to 1e8 items, which every later copy, hash and job would walk
MAX_CONFIG_VALUES = 100_000


class _TooManyValues(Exception):
    pass


def _leaves(value: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    """(key path, value) of every value that is neither a dict nor a list, in one walk that stops with
    _TooManyValues past MAX_CONFIG_VALUES values (dicts and lists counted)."""
    pending, seen = [(path, value)], 0
    while pending:
        path, value = pending.pop()
        seen += 1
        if seen > MAX_CONFIG_VALUES:
            raise _TooManyValues
        if isinstance(value, dict):
            pending.extend(((*path, k), v) for k, v in value.items())
        elif isinstance(value, list):
            pending.extend(((*path, i), v) for i, v in enumerate(value))
        else:
            yield path, value


def _value_problems(config: dict[str, Any]) -> list[str]:
    """NaN and infinity anywhere (the schema's number type lets them through: a warm-up of .inf holds
    the machine's measuring lock forever), and a config too large."""
    try:
        return sorted(
            f"{_key(path)}: {value!r} is not a finite number; give a finite value"
            for path, value in _leaves(config)
            if isinstance(value, float) and not math.isfinite(value)
        )
    except _TooManyValues:
        return [
            f"(top level): the config holds more than {MAX_CONFIG_VALUES:,} values once its YAML aliases "
            "(&name / *name) are expanded; write the values out, or remove the aliases that repeat large blocks"
        ]


def validate_config(config: dict[str, Any]) -> dict[str, Any]:
    """Validate ``config`` in place (filling defaults) and return it against the config schema
    (inferbench.core.settings.SCHEMA); raise ConfigError on any problem."""
    problems = _value_problems(config)
    if problems:  # before the schema: its validator would walk an expanded config too
        raise ConfigError("invalid config:\n  " + "\n  ".join(problems))
    schema = copy.deepcopy(config_schema())  # its axes' enums are filled in below
    definitions = schema.get("definitions", {})
    for name, values in axis_values().items():
        if name in definitions:  # declared once, in the registry
            definitions[name]["enum"] = values
    validator_class = _extend_with_default(jsonschema.validators.validator_for(schema))
    errors = sorted(validator_class(schema).iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))
    problems = [_describe(e) for e in errors]
    if not problems:
        problems = list(_cross_reference_problems(config))
    if not problems:  # the models' own checks need known workloads and studies
        problems = list(_model_problems(config))
    if problems:
        raise ConfigError("invalid config:\n  " + "\n  ".join(problems))
    return config


def cell_tolerance(
    tolerances: dict[str, dict[str, float]], variant: dict[str, Any], precision: str, device: str
) -> dict[str, float]:
    """The parity gate of a cell: its precision's tolerance, or for fp32 with TF32 math on the GPU
    (variant option ``tf32``), the ``tf32`` one (TF32 keeps 10 mantissa bits, not 23)."""
    if precision == "fp32" and device == "cuda" and engine_info(variant["engine"]).typed_options(variant).tf32:
        return tolerances["tf32"]
    return tolerances[precision]


def workload_problem(workload: str, look_up: bool = True) -> str | None:
    """Why ``workload`` cannot be built, or None. A timm or transformers name is looked up in that
    library (imported only when such a name is used), so a typo stops the run before any job;
    ``look_up=False`` checks the form only (a study this run does not measure: importing the library
    cost every dry run 4 s)."""
    if workload in WORKLOADS:
        return None
    family = family_of(workload)
    if family is None:
        return f"{workload!r} is not allowed; {allowed_text()}"
    if not look_up:
        return None
    library, name = family
    if library == "timm":
        import timm

        known, what = timm.list_models(), "timm has no model"
    else:
        from transformers import CONFIG_MAPPING

        known, what = list(CONFIG_MAPPING), "transformers has no model type"
    if name not in known:
        close = difflib.get_close_matches(name, known, n=5)
        return f"{what} {name!r}" + (f"; did you mean {', '.join(close)}?" if close else "")
    return None


#: a string that names something to download: a Hub repository (org/name, hf-hub:..., hf://...) or a URL.
#: Models are built with random weights from the libraries' code alone; such a value (timm's
#: `architecture: hf-hub:timm/resnet18`, an `attn_implementation` naming a Hub kernel) would reach the network
_DOWNLOADABLE = re.compile(r"^(hf[-_]hub:|hf://)|://|^[\w.-]+/[\w.-]+(@[\w.-]+)?(:[\w.-]+)?$")

#: random weights beyond this many parameters are refused (fp32: 8 GB): a family's default (hf:llama is
#: 6.7 billion) would otherwise fill the host's memory in every job; the fix is to shrink it in `arch`
MAX_PARAMETERS = 2_000_000_000


def _downloadable_values(value: Any, path: tuple) -> Iterator[str]:
    for key, leaf in _leaves(value, path):  # the config's size is checked before: no _TooManyValues here
        if isinstance(leaf, str) and _DOWNLOADABLE.search(leaf):
            yield (
                f"{_key(key)}: {leaf!r} names something to download (a Hub repository, a Hub kernel or a URL); "
                "inferbench builds models from the libraries' code with random weights and never reaches the "
                "network for them: give the architecture's own parameters instead"
            )


def _hf_problems(workload: str, model_type: str, arch: dict[str, Any]) -> Iterator[str]:
    """An hf:<type> workload is a text encoder (token ids in) of a size the host can build."""
    import torch
    from transformers import AutoModel
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    try:
        config = CONFIG_MAPPING[model_type](**arch)
    except Exception as error:  # a value of the wrong kind for the config class
        yield f"models.{workload}.arch: transformers' {model_type} config refuses it: {error}"
        return
    if getattr(config, "vocab_size", None) is None:
        yield (
            f"{workload}: transformers' {model_type} config has no vocab_size: the hf: family takes text encoders "
            "(token ids in); vision models are timm:<name> workloads"
        )
        return
    with torch.device("meta"):  # the parameter count without allocating the weights
        parameters = sum(p.numel() for p in AutoModel.from_config(config).parameters())
    if parameters > MAX_PARAMETERS:
        yield (
            f"{workload}: {parameters / 1e9:.1f} billion parameters ({parameters * 4 / 1e9:.0f} GB of random "
            f"fp32 weights) is more than the {MAX_PARAMETERS / 1e9:g} billion allowed; shrink it in "
            f"models.{workload}.arch (e.g. num_hidden_layers, hidden_size)"
        )


def model_positions(workload: str, arch: dict[str, Any]) -> int | None:
    """The longest sequence a text workload's model takes (its position embeddings), or None if unknown."""
    if "max_position_embeddings" in arch:
        return int(arch["max_position_embeddings"])
    info = workload_info(workload)
    if info.positions is not None:
        return info.positions
    family = family_of(info.model or workload)
    if family is None or family[0] != "hf":
        return None
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    return getattr(CONFIG_MAPPING[family[1]](), "max_position_embeddings", None)


def _model_problems(config: dict[str, Any]) -> Iterator[str]:
    """What the models of the studies that run cannot take: downloads, sizes, sequence lengths."""
    models = config.get("models", {})
    for workload, settings in models.items():
        yield from _downloadable_values(settings.get("arch", {}), ("models", workload, "arch"))
    running = [(name, config["studies"][name]) for name in config["run"] if name in config["studies"]]
    workloads = {w for _, study in running for w in study["workloads"]}
    for workload in sorted(workloads):
        info, arch = workload_info(workload), models.get(workload, {}).get("arch", {})
        family = family_of(info.model or workload)
        if family is not None and family[0] == "hf":
            yield from _hf_problems(workload, family[1], arch)
    for name, study in running:
        for workload in study["workloads"]:
            if not workload_info(workload).has_seq_len:
                continue
            positions = model_positions(workload, models.get(workload, {}).get("arch", {}))
            too_long = [n for n in study.get("seq_lens", []) if positions is not None and n > positions]
            if too_long:
                yield (
                    f"studies.{name}.seq_lens: {too_long} exceed {workload}'s {positions} positions; list "
                    f"sequence lengths up to {positions}, or give the model more in "
                    f"models.{workload}.arch.max_position_embeddings"
                )


def _layout_problem(study: dict[str, Any]) -> str | None:
    """Why a study's scenarios and its layout do not go together: a scenario that declares a layout of its
    own (the serving scenarios: ``serving``) is listed only by studies of that layout, with scenarios of the
    same layout; a study of such a layout lists only them."""
    needed = {SCENARIOS[name].layout for name in study["scenarios"]}
    owned = {info.layout for info in SCENARIOS.values() if info.layout}
    if needed == {study["layout"]} or (needed == {None} and study["layout"] not in owned):
        return None
    of_layout = sorted(name for name, info in SCENARIOS.items() if info.layout == study["layout"])
    parts = [f"it has layout {study['layout']!r} and scenarios {study['scenarios']}"]
    if of_layout:
        parts.append(f"a study of layout {study['layout']!r} lists scenarios {', '.join(of_layout)} only")
    parts += [
        f"scenario {name} needs layout {SCENARIOS[name].layout!r}"
        for name in study["scenarios"]
        if SCENARIOS[name].layout not in (None, study["layout"])
    ]
    return "; ".join(parts) + "; put cells of different layouts in studies of their own"


def _cross_reference_problems(config: dict[str, Any]) -> Iterator[str]:
    studies, variants = config["studies"], config["engines"]
    for i, name in enumerate(config["run"]):
        if name not in studies:
            yield f"run[{i}]: unknown study {name!r}; defined studies: {', '.join(sorted(studies))}"
    measured = {w for name in config["run"] if name in studies for w in studies[name]["workloads"]}
    for study_name, study in studies.items():
        if (problem := _layout_problem(study)) is not None:
            yield f"studies.{study_name}: {problem}"
        for i, workload in enumerate(study["workloads"]):
            if (problem := workload_problem(workload, look_up=workload in measured)) is not None:
                yield f"studies.{study_name}.workloads[{i}]: {problem}"
        for i, variant in enumerate(study["engines"]):
            if variant not in variants:
                yield (
                    f"studies.{study_name}.engines[{i}]: unknown engine {variant!r}; "
                    f"defined engine variants (config key `engines`): {', '.join(sorted(variants))}"
                )
    for workload in config.get("models", {}):
        if (problem := workload_problem(workload, look_up=workload in measured)) is not None:
            yield f"models.{workload}: {problem}"
    for name, variant in variants.items():
        if variant["engine"] not in ENGINES:
            yield f"engines.{name}.engine: {variant['engine']!r} is not allowed; allowed values: {', '.join(ENGINES)}"
            continue
        for problem in option_problems(variant["engine"], variant):
            yield f"engines.{name}: {problem}"
