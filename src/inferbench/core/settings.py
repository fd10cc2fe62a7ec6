"""How cells are measured: config `measure` as typed settings, written here with each key's default and meaning.
The config schema (inferbench/config.schema.yaml, package data) holds what a value may be (types and bounds);
its `measure` section takes its defaults and descriptions from this class when it is read (``schema()``), so
each default is declared once. A scenario's settings (LoadGen's, inferbench.scenarios.serving.settings) are
written the same way, as a ``Settings`` class of its folder."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

#: the config schema: types, allowed values and defaults of every config key
SCHEMA = Path(__file__).resolve().parents[1] / "config.schema.yaml"


def setting(default: Any, help: str, workflow_only: bool = False) -> Any:
    """A settings field: its default and its help text (the schema's description). ``workflow_only``: set
    by the workflow for a cell, never in a config, so the schema gives it no default."""
    return dataclasses.field(default=default, metadata={"help": help, "workflow_only": workflow_only})


class Settings:
    """What the settings classes share: made from a config section (``SECTION``), refusing keys they do not have;
    each field declared with ``setting`` (its default and help text)."""

    SECTION = ""

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Any:
        known = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]  (subclasses are dataclasses)
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ValueError(f"unknown {cls.SECTION} settings {unknown}; known: {', '.join(known)}")
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class MeasureSettings(Settings):
    """How a cell's calls are timed (config `measure`); ``min_iters`` counts the calls of all the cell's
    processes (inferbench.plan.grid sizes it for the cell's studies' percentiles)."""

    SECTION = "measure"

    warmup_s: float = setting(
        0.3,
        "seconds of warm-up (at least one call)",
    )
    min_time_s: float = setting(
        0.3,
        "each process times calls at least this long at each of its boundaries",
    )
    min_iters: int = setting(
        5,
        "and the processes together at least this many calls (more where a study reports a tail percentile: "
        "p90 10, p95 20, p99 100)",
    )
    seed: int = setting(
        0,
        "seed of the synthetic inputs",
    )
    input_batches: int = setting(
        4,
        "timed calls cycle through this many seeded input batches (caches see no repeated input)",
    )
    repeats: int = setting(
        2,
        "measure each cell in this many fresh processes and record the spread between them",
    )
    host_bound_repeats: int = setting(
        2,
        "fresh processes in all for a GPU cell whose first processes find it host-bound (its time follows the "
        "launching CPU thread)",
    )
    gpu_min_requests: int = setting(
        10,
        "a GPU generation cell's process times at least this many requests, whatever min_iters asks: each "
        "gives one TTFT, and a GPU request takes well under a second",
    )
    gpu_min_requests_s: float = setting(
        5.0,
        "and at least this many seconds of requests: vLLM's pace at batch 1 moves between two modes within a "
        "second, so ten requests can meet one mode (docs/generation.md)",
    )
    unstable_spread_pct: float = setting(
        25,
        "a cell whose processes' p50s lie further apart than this share of their median ((max - min) / "
        "median) gets one more process, up to max_repeats: measured again rather than averaged",
    )
    max_repeats: int = setting(
        3,
        "the most timed processes a cell whose processes part gets (unstable_spread_pct); below repeats or "
        "host_bound_repeats: no more than those",
    )
    stall_timeout_s: float = setting(
        1800,
        "a measuring process that makes no progress this long (no phase entered, no call, batch or step "
        "ended) is ended with a `failed` record naming the stall, and the machine lock freed "
        "(inferbench.machine.watchdog); long enough for a torch.compile with autotuning",
    )
    cpu_affinity: str | tuple[int, ...] | None = setting(
        "auto",
        "auto: a CPU cell's process on `threads` physical cores, the highest-numbered first, and a GPU cell's "
        "launching thread on one core while it times its calls (inferbench.machine.cores); a list: each "
        "measuring process on these CPU ids (e.g. [2]); null: no pinning",
    )
    scenario_settings: dict[str, Any] | None = setting(
        None,
        "set by the workflow, never in a config: the settings of a cell whose scenario has a config section "
        "of its own (the top-level section with its studies' section of that name over it), resolved for "
        "that cell and passed to its job with the measure settings",
        workflow_only=True,
    )

    def __post_init__(self) -> None:
        if isinstance(self.cpu_affinity, list):  # a list from JSON: a tuple, so that the settings stay hashable
            object.__setattr__(self, "cpu_affinity", tuple(self.cpu_affinity))

    @property
    def min_iters_per_process(self) -> int:
        """Each of the ``repeats`` processes times this many calls at least: together ``min_iters``."""
        return -(-self.min_iters // self.repeats)


def with_settings(loaded: dict[str, Any], settings: type[Settings]) -> dict[str, Any]:
    """``loaded`` (a config schema) with the defaults and descriptions of ``settings``' fields written into its
    section (``settings.SECTION``), whose keys the file bounds."""
    properties = loaded["properties"][settings.SECTION]["properties"]
    for field in dataclasses.fields(settings):  # type: ignore[arg-type]
        spec = properties.setdefault(field.name, {})
        spec["description"] = field.metadata["help"]
        if not field.metadata["workflow_only"]:
            spec["default"] = field.default
    return loaded


@functools.cache
def schema() -> dict[str, Any]:
    """The config schema, its `measure` section's defaults and descriptions MeasureSettings'. A scenario's settings
    class of this kind fills its own section where the workflow reads the schema (inferbench.plan.config)."""
    if not SCHEMA.exists():
        raise FileNotFoundError(
            f"the config schema is not at {SCHEMA}: the package is installed without its data; "
            "install it again (pip install -e . from a checkout, or pip install inferbench)"
        )
    return with_settings(yaml.safe_load(SCHEMA.read_text()), MeasureSettings)


@functools.cache
def schema_defaults(*path: str) -> Mapping[str, Any]:
    """The defaults the schema declares for the keys of the object at ``path``: property names from the
    top, ``additionalProperties`` for the values of a map (``"studies", "additionalProperties"``: a study's)."""
    node = schema()
    for key in path:
        node = node[key] if key == "additionalProperties" else node["properties"][key]
    return MappingProxyType({key: spec["default"] for key, spec in node["properties"].items() if "default" in spec})
