"""How cells are measured and served: config `measure` and `serving` as typed settings. Their keys,
defaults and meaning are declared once, in the config schema (inferbench/config.schema.yaml, package
data, the sections of the same names); the settings classes are made from it, so a key added there is a
setting here."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

#: the config schema: types, allowed values and defaults of every config key
SCHEMA = Path(__file__).resolve().parents[1] / "config.schema.yaml"


@functools.cache
def schema() -> dict[str, Any]:
    if not SCHEMA.exists():
        raise FileNotFoundError(
            f"the config schema is not at {SCHEMA}: the package is installed without its data; "
            "install it again (pip install -e . from a checkout, or pip install inferbench)"
        )
    return yaml.safe_load(SCHEMA.read_text())


@functools.cache
def schema_defaults(*path: str) -> Mapping[str, Any]:
    """The defaults the schema declares for the keys of the object at ``path``: property names from the
    top, ``additionalProperties`` for the values of a map (``"studies", "additionalProperties"``: a study's)."""
    node = schema()
    for key in path:
        node = node[key] if key == "additionalProperties" else node["properties"][key]
    return MappingProxyType({key: spec["default"] for key, spec in node["properties"].items() if "default" in spec})


def _settings_class(name: str, section: str, doc: str, methods: dict[str, Any]) -> type:
    """A frozen dataclass with one field per key of the schema's ``section`` (its default the schema's)
    and ``from_dict``, which refuses a key that is not one of them."""
    properties = schema()["properties"][section]["properties"]
    fields = [(key, Any, dataclasses.field(default=spec.get("default"))) for key, spec in properties.items()]

    def from_dict(cls: type, values: dict[str, Any]) -> Any:
        unknown = sorted(set(values) - set(properties))
        if unknown:
            raise ValueError(f"unknown {section} settings {unknown}; known: {', '.join(properties)}")
        return cls(**values)

    keys = "".join(f"\n- ``{key}``: {spec.get('description', '')}" for key, spec in properties.items())
    namespace = {"from_dict": classmethod(from_dict), "__doc__": f"{doc}{keys}", **methods}
    cls = dataclasses.make_dataclass(name, fields, frozen=True, namespace=namespace)
    cls.__module__ = __name__  # picklable: a cell's processes may be spawned
    return cls


def _min_iters_per_process(self: Any) -> int:
    """Each of the ``repeats`` processes times this many calls at least: together ``min_iters``."""
    return -(-self.min_iters // self.repeats)


def _pinned_cpus(self: Any) -> None:
    if isinstance(self.cpu_affinity, list):  # a list from JSON: a tuple, so that the settings stay hashable
        object.__setattr__(self, "cpu_affinity", tuple(self.cpu_affinity))


MeasureSettings: Callable[..., Any] = _settings_class(
    "MeasureSettings",
    "measure",
    "How a cell's calls are timed (config `measure`); ``min_iters`` counts the calls of all the cell's "
    "processes (inferbench.plan.grid sizes it for the cell's studies' percentiles).",
    {"min_iters_per_process": property(_min_iters_per_process), "__post_init__": _pinned_cpus},
)
ServingSettings: Callable[..., Any] = _settings_class(
    "ServingSettings",
    "serving",
    "How a serving cell runs (config `serving`, with the study's `latency_bound_ms` and the variant's "
    "`max_queue_delay_ms` filled in by inferbench.plan.grid).",
    {},
)
