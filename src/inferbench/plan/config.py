"""Validate the workflow config against its JSON schema, fill defaults, and check cross-references.

Errors name the config key and what is allowed, so a wrong value stops the run before any job.
"""

from __future__ import annotations

import copy
import difflib
import functools
import math
import re
from collections.abc import Callable, Iterator
from typing import Any

import jsonschema
import yaml

from inferbench.catalog.exporters import EXPORTERS
from inferbench.catalog.layouts import LAYOUTS
from inferbench.catalog.scenarios import SCENARIOS
from inferbench.catalog.targets import load_target
from inferbench.catalog.workloads import DEVICES, PRECISIONS, WORKLOADS, allowed_text, family_of, workload_info
from inferbench.core.settings import Settings, schema, with_settings
from inferbench.data import DATASETS
from inferbench.engines.registry import ENGINES, engine_info, option_problems
from inferbench.plan.grid import SettingsConflict, cell_scenario_settings, study_scenario_settings
from inferbench.plan.sizing import (
    context_length,
    decoder_arch_problems,
    decoder_config,
    decoder_type_problem,
    positions_key,
    size_problems,
)


@functools.cache
def config_schema() -> dict[str, Any]:
    """The config schema as the workflow reads it: each scenario's settings class that declares its keys'
    defaults and help texts (inferbench.core.settings.Settings: LoadGen's) writes them into its section, as
    MeasureSettings writes `measure`'s."""
    whole = copy.deepcopy(schema())
    for kind in declared_settings():
        with_settings(whole, kind)
    return whole


def declared_settings() -> list[type[Settings]]:
    """The scenarios' settings types that are Settings classes, once each (LoadGen's server and offline share
    one)."""
    types = dict.fromkeys(load_target(info.settings_type) for info in SCENARIOS.values() if info.settings_type)
    return [kind for kind in types if isinstance(kind, type) and issubclass(kind, Settings)]


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
    "^auto$": "auto, null or a list of CPU ids",
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
    problems = _value_problems(config) or _own_grid_problems(config)
    if problems:  # before the schema: its validator would walk an expanded config too
        raise ConfigError("invalid config:\n  " + "\n  ".join(problems))
    apply_own_grids(config)
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
    if not problems:  # the models' own checks need known workloads, engines and studies
        problems = [*_pairing_problems(config), *_scenario_settings_problems(config), *_model_problems(config)]
    if problems:
        raise ConfigError("invalid config:\n  " + "\n  ".join(problems))
    return config


def _own_grid_problems(config: dict[str, Any]) -> list[str]:
    """``own_grids`` naming a study that is not there, or one that declares no ``own_grid``."""
    studies = config.get("studies") if isinstance(config.get("studies"), dict) else {}
    names = config.get("own_grids") or []
    if not isinstance(names, list):
        return [f"own_grids: {names!r} is not a list of study names"]
    problems = []
    for name in names:
        if name not in studies:
            problems.append(f"own_grids: {name!r} is not a study (studies: {', '.join(sorted(studies))})")
        elif not isinstance(studies[name], dict) or not studies[name].get("own_grid"):
            problems.append(f"own_grids: study {name!r} declares no own_grid: add one, or leave it out of own_grids")
    return problems


def apply_own_grids(config: dict[str, Any]) -> None:
    """Each study that ``own_grids`` names takes its ``own_grid``'s keys: the seed's own grid, declared once
    beside the default's cut. Applying it twice changes nothing."""
    for name in config.get("own_grids") or []:
        config["studies"][name].update(copy.deepcopy(config["studies"][name]["own_grid"]))


def cell_tolerance(
    tolerances: dict[str, dict[str, float]], variant: dict[str, Any], precision: str, device: str
) -> dict[str, float]:
    """The parity gate of a cell: its precision's tolerance, or for fp32 with TF32 math on the GPU
    (variant option ``tf32`` other than ``strict``), the ``tf32`` one (TF32 keeps 10 mantissa bits, not 23)."""
    # an engine without a tf32 option runs its library's default, TF32 on (TensorRT, ONNX Runtime GenAI)
    tf32 = engine_info(variant["engine"]).effective_options(variant).get("tf32", "all")
    if precision == "fp32" and device == "cuda" and tf32 != "strict":
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
    if library == "llm":  # a model type transformers knows, but perhaps no decoder LM (llm:bert, llm:t5, llm:vit)
        return decoder_type_problem(name)
    return None


#: a string that names something to download: a Hub repository (org/name, hf-hub:..., hf://...) or a URL.
#: Models are built with random weights from the libraries' code alone; such a value (timm's
#: `architecture: hf-hub:timm/resnet18`, an `attn_implementation` naming a Hub kernel) would reach the network
_DOWNLOADABLE = re.compile(r"^(hf[-_]hub:|hf://)|://|^[\w.-]+/[\w.-]+(@[\w.-]+)?(:[\w.-]+)?$")


def _downloadable_values(value: Any, path: tuple) -> Iterator[str]:
    for key, leaf in _leaves(value, path):  # the config's size is checked before: no _TooManyValues here
        if isinstance(leaf, str) and _DOWNLOADABLE.search(leaf):
            yield (
                f"{_key(key)}: {leaf!r} names something to download (a Hub repository, a Hub kernel or a URL); "
                "inferbench builds models from the libraries' code with random weights and never reaches the "
                "network for them: give the architecture's own parameters instead"
            )


def _hf_problems(workload: str, model_type: str, arch: dict[str, Any]) -> list[str]:
    """An hf:<type> workload is a text encoder (token ids in) whose config takes its `arch`."""
    try:
        config = _encoder_config(model_type, arch)
    except Exception as error:  # a value of the wrong kind for the config class
        return [f"models.{workload}.arch: transformers' {model_type} config refuses it: {error}"]
    if getattr(config, "vocab_size", None) is None:
        return [
            f"{workload}: transformers' {model_type} config has no vocab_size: the hf: family takes text encoders "
            "(token ids in); vision models are timm:<name> workloads"
        ]
    return []


def _encoder_config(model_type: str, arch: dict[str, Any]) -> Any:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    return CONFIG_MAPPING[model_type](**arch)


def _family(workload: str) -> tuple[str, str] | None:
    """(family, name) of the model a workload is built as: its own, or the one its declaration names."""
    return family_of(workload_info(workload).model or workload)


def model_positions(workload: str, arch: dict[str, Any]) -> int | None:
    """The longest sequence a text workload's model takes (its position embeddings), or None if unknown."""
    family = _family(workload)
    if family is not None and family[0] in ("hf", "llm"):  # the config it is built with, arch applied
        try:
            config = decoder_config(family[1], arch) if family[0] == "llm" else _encoder_config(family[1], arch)
        except Exception:  # refused by the model checks, which say why
            return None
        return getattr(config, "max_position_embeddings", None)
    if "max_position_embeddings" in arch:
        return int(arch["max_position_embeddings"])
    return workload_info(workload).positions


def _workload_problems(workload: str, arch: dict[str, Any], precisions: list[str]) -> list[str]:
    """What a measured workload's model cannot take: an `arch` its config refuses or that is no decoder's,
    a size past its limit or this machine's memory."""
    family = _family(workload)
    problems = []
    if family is not None and family[0] == "hf":
        problems = _hf_problems(workload, family[1], arch)
    elif family is not None and family[0] == "llm":
        problems = decoder_arch_problems(workload, family[1], arch)
    if problems:
        return problems
    if family is None and not arch and workload_info(workload).kind != "tabular":
        return []  # a declared model at its declared shape fits: counting it would import torch in every dry run
    return size_problems(workload, arch, precisions)


def _decoder_length_problems(
    name: str,
    study: dict[str, Any],
    workload: str,
    arch: dict[str, Any],
    variants: dict[str, Any],
    ranges: tuple[float, float],
    longest: Callable[[int, int, float, float], tuple[int, int]],
) -> Iterator[str]:
    """A generation cell's prompt (the study's seq_lens) and new tokens (its engine variant's option) within
    the decoder's positions, and within an exported context: past them the first call fails (GPT-2: a bare
    IndexError). ``ranges``: how far the study's scenarios spread prompt and output lengths around them, and
    ``longest`` the longest request they then send (it must fit)."""
    prompt_range, output_range = ranges
    family = _family(workload)
    assert family is not None  # a decoder workload is an llm: one, or declared as one
    config, key = decoder_config(family[1], arch), positions_key(family[1])
    positions = getattr(config, "max_position_embeddings", None)
    for variant in study["engines"]:
        info = engine_info(variants[variant]["engine"])
        if info.mode != "generate" or "new_tokens" not in info.options:
            continue
        new_tokens = info.typed_options(variants[variant]).new_tokens
        limit, what = positions, f"{workload}'s {positions} positions ({key})"
        if (named := info.exported_context) is not None:
            context = context_length(config)
            if context is not None and (limit is None or context < limit):
                limit, what = context, f"{named} ({context}, from {workload}'s config)"
            elif limit is not None:
                what += f", which is {named}"
        longest_output = longest(1, new_tokens, prompt_range, output_range)[1]
        too_long = [
            n for n in study.get("seq_lens", [])
            if limit is not None and sum(longest(n, new_tokens, prompt_range, output_range)) > limit
        ]  # fmt: skip
        if too_long:
            # the longest prompt whose spread requests fit: int(n x (1 + range)) + the longest output <= limit
            longest_prompt = int((limit - longest_output) / (1 + prompt_range))
            fits = f"list prompts up to {longest_prompt}, " if longest_prompt > 0 else ""
            spread = (
                f" (spread by the study's prompt_range {prompt_range:g} and output_range {output_range:g}: the "
                f"longest requests are {longest(max(too_long), new_tokens, prompt_range, output_range)[0]} + "
                f"{longest_output} tokens)"
                if prompt_range or output_range
                else ""
            )
            yield (
                f"studies.{name}.seq_lens: prompts {too_long} + engines.{variant}.new_tokens {new_tokens}{spread} "
                f"exceed {what}; {fits}lower engines.{variant}.new_tokens, or give the model more in "
                f"models.{workload}.arch.{key}"
            )


def _model_problems(config: dict[str, Any]) -> Iterator[str]:
    """What the models of the studies that run cannot take: downloads, shapes, sizes, sequence lengths."""
    models = config.get("models", {})
    unbuildable = set()
    for workload, settings in models.items():
        downloads = list(_downloadable_values(settings.get("arch", {}), ("models", workload, "arch")))
        if downloads:  # never built, not even on the meta device: a builder might fetch it
            unbuildable.add(workload)
        yield from downloads
    running = [(name, config["studies"][name]) for name in config["run"] if name in config["studies"]]
    precisions: dict[str, set[str]] = {}  # each measured workload's, for the memory its weights take
    for _, study in running:
        for workload in study["workloads"]:
            precisions.setdefault(workload, set()).update(study["precisions"])
    for workload in sorted(precisions):
        if workload in unbuildable:
            continue
        problems = _workload_problems(workload, models.get(workload, {}).get("arch", {}), sorted(precisions[workload]))
        if problems:
            unbuildable.add(workload)
        yield from problems
    for name, study in running:
        for workload in study["workloads"]:
            if workload in unbuildable or not workload_info(workload).has_seq_len:
                continue
            arch = models.get(workload, {}).get("arch", {})
            if workload_info(workload).kind == "decoder":
                yield from _decoder_length_problems(
                    name, study, workload, arch, config["engines"], _ranges(config, study), _longest(study)
                )
                continue
            positions = model_positions(workload, arch)
            too_long = [n for n in study.get("seq_lens", []) if positions is not None and n > positions]
            if too_long:
                yield (
                    f"studies.{name}.seq_lens: {too_long} exceed {workload}'s {positions} positions; list "
                    f"sequence lengths up to {positions}, or give the model more in "
                    f"models.{workload}.arch.max_position_embeddings"
                )


def _ranges(config: dict[str, Any], study: dict[str, Any]) -> tuple[float, float]:
    """How far the study's scenarios spread prompt and output lengths around a cell's (a decoder under load:
    their settings' ``prompt_range`` and ``output_range``; 0, 0 where none does)."""

    def valid(value: Any) -> float:  # one out of [0, 1) is refused by the settings check, named there
        return float(value) if isinstance(value, int | float) and 0 <= value < 1 else 0.0

    sections = sorted({SCENARIOS[name].settings for name in study["scenarios"]} - {None})
    spreads = [study_scenario_settings(config, study, section) for section in sections]
    return (
        max((valid(settings.get("prompt_range", 0.0)) for settings in spreads), default=0.0),
        max((valid(settings.get("output_range", 0.0)) for settings in spreads), default=0.0),
    )


def _longest(study: dict[str, Any]) -> Callable[[int, int, float, float], tuple[int, int]]:
    """The longest request of a cell of the study, from its prompt, new tokens and the ranges: its scenario's
    settings type's (the first of its scenarios whose lengths spread), else the prompt and new tokens themselves."""
    types = [load_target(SCENARIOS[name].settings_type) for name in study["scenarios"] if SCENARIOS[name].settings_type]
    spreading = [settings for settings in types if hasattr(settings, "longest_request")]
    return spreading[0].longest_request if spreading else lambda prompt, new_tokens, *_: (prompt, new_tokens)


def _scenario_settings_problems(config: dict[str, Any]) -> Iterator[str]:
    """The settings of scenarios with a config section of their own: a study's override checked as
    the section itself is (the schema, on the merged settings), what the scenario refuses (e.g. burstiness
    with Poisson arrivals), requests too few for the objective's percentile, a study key no scenario of the
    study reads, a cell given different settings by two studies, and the key the workflow sets itself."""
    if config["measure"].get("scenario_settings") is not None:
        yield (
            "measure.scenario_settings: the workflow sets it for each cell of a scenario with settings of its own; "
            "leave it out and set the scenario's section (or a study's section of that name) instead"
        )
    sections = sorted({info.settings for info in SCENARIOS.values() if info.settings})
    for section in sections:
        readers = [name for name, info in SCENARIOS.items() if info.settings == section]
        whole = config_schema()
        # the section's schema with the definitions it refers to, validated as the whole config's is
        subschema = {**copy.deepcopy(whole["properties"][section]), "definitions": whole.get("definitions", {})}
        validator = jsonschema.validators.validator_for(whole)(subschema)
        for name, study in config["studies"].items():
            listed = [s for s in study["scenarios"] if s in readers]
            if section in study and not listed:
                yield (
                    f"studies.{name}.{section}: only the {', '.join(readers)} scenario reads it, and the study lists "
                    f"{', '.join(study['scenarios'])}; remove it, or add {readers[0]} to studies.{name}.scenarios"
                )
                continue
            if not listed:
                continue
            merged = study_scenario_settings(config, study, section)
            where = f"studies.{name}.{section}" if section in study else section
            errors = sorted(validator.iter_errors(merged), key=lambda e: list(map(str, e.absolute_path)))
            if errors:
                for error in errors:
                    inner = _key(error.absolute_path)
                    text = _describe(error)
                    yield f"{where}{'' if inner == '(top level)' else '.' + inner}{text[len(inner) :]}"
                continue
            try:
                settings = load_target(SCENARIOS[listed[0]].settings_type).from_dict(merged)
            except ValueError as error:
                yield f"studies.{name}: {error}"
                continue
            yield from (f"{where}.{problem}" for problem in settings.problems())
    for has_cuda in (False, True):  # a cell is in the run with a GPU or without one
        try:
            cell_scenario_settings(config, has_cuda)
        except SettingsConflict as error:
            yield str(error)
            return


def _pairing_problems(config: dict[str, Any]) -> Iterator[str]:
    """A study's workloads and engines that make no cell together: a workload no engine of the study runs
    (an llm: decoder beside no generation engine), else an engine that runs none of the study's workloads.
    Left to the grid, they vanish from the cells, and a study of them alone read "no cells on this machine"."""
    variants = config["engines"]
    for name, study in config["studies"].items():
        infos = {variant: engine_info(variants[variant]["engine"]) for variant in study["engines"]}
        listed = ", ".join(f"{v} ({variants[v]['engine']})" for v in infos)
        orphans = False
        for i, workload in enumerate(study["workloads"]):
            kind = workload_info(workload).kind
            if any(kind in info.workload_kinds for info in infos.values()):
                continue
            orphans = True
            runners = [e for e, info in ENGINES.items() if kind in info.workload_kinds and not info.harness]
            configured = [v for v, variant in variants.items() if variant["engine"] in runners]
            if kind == "decoder":
                verb = "is not a generation engine" if len(infos) == 1 else "are not generation engines"
                why = (
                    f"{workload} is a decoder LM, and {listed} {verb}; llm: workloads run on generation engines: "
                    f"{', '.join(runners)}"
                )
            else:
                why = (
                    f"{workload} is a {kind} workload, and none of {listed} runs one; they run on {', '.join(runners)}"
                )
            yield (
                f"studies.{name}.workloads[{i}]: {why} (this config's variants of them: "
                f"{', '.join(configured) or 'none'}); add one to studies.{name}.engines, or give {workload} a study "
                "of its own"
            )
        if orphans:
            continue
        kinds = {workload_info(w).kind for w in study["workloads"]}
        for i, variant in enumerate(study["engines"]):
            info = infos[variant]
            if info.harness or kinds & set(info.workload_kinds):
                continue
            generation = " (a generation engine: llm: workloads)" if info.mode == "generate" else ""
            yield (
                f"studies.{name}.engines[{i}]: {variant} ({variants[variant]['engine']}) runs "
                f"{', '.join(info.workload_kinds)} workloads{generation}, and the study has none "
                f"({', '.join(study['workloads'])}); remove it from the study, or give it a study of its own"
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
        if study.get("requires_gpu") and study.get("skip_with_gpu"):
            yield f"studies.{study_name}: requires_gpu and skip_with_gpu together leave it no machine: keep one"
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
