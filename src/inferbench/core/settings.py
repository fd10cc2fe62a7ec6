"""How cells are measured and served: the settings a cell's job gets from config `measure` and
`serving`, with their defaults taken from the config schema (workflow/schemas/config.schema.yaml),
where they are declared once."""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

#: the config schema: types, allowed values and defaults of every config key
SCHEMA = Path(__file__).resolve().parents[3] / "workflow" / "schemas" / "config.schema.yaml"


@functools.cache
def schema() -> dict[str, Any]:
    if not SCHEMA.exists():
        raise FileNotFoundError(
            f"the config schema is not at {SCHEMA}: inferbench runs from a checkout of its repository "
            "(pip install -e .)"
        )
    return yaml.safe_load(SCHEMA.read_text())


def schema_defaults(section: str) -> dict[str, Any]:
    """The defaults the schema declares for the keys of a top-level config section."""
    properties = schema()["properties"][section]["properties"]
    return {key: spec["default"] for key, spec in properties.items() if "default" in spec}


def _from_dict(cls: type, values: dict[str, Any], what: str) -> Any:
    unknown = sorted(set(values) - {f.name for f in fields(cls)})
    if unknown:
        raise ValueError(f"unknown {what} settings {unknown}; known: {', '.join(f.name for f in fields(cls))}")
    return cls(**values)


_MEASURE = schema_defaults("measure")
_SERVING = schema_defaults("serving")


@dataclass(frozen=True)
class MeasureSettings:
    """How a cell's calls are timed (config `measure`)."""

    warmup_s: float = _MEASURE["warmup_s"]
    #: per process: a cell measured in two processes times at least twice this
    min_time_s: float = _MEASURE["min_time_s"]
    #: the cell's processes together (inferbench.plan.grid sizes it so that they reach the count the
    #: cell's studies' percentiles need)
    min_iters: int = _MEASURE["min_iters"]
    seed: int = _MEASURE["seed"]
    #: timed calls cycle through this many seeded batches, so no cache sees the same input twice in a row
    input_batches: int = _MEASURE["input_batches"]
    #: fresh processes that measure the cell (inferbench.launch.processes)
    repeats: int = _MEASURE["repeats"]
    #: fresh processes in all for a GPU cell that one of its processes found host-bound
    host_bound_repeats: int = _MEASURE["host_bound_repeats"]
    #: pin the measuring process to these CPUs (None: wherever the OS schedules it)
    cpu_affinity: tuple[int, ...] | None = _MEASURE["cpu_affinity"]

    @property
    def min_iters_per_process(self) -> int:
        """Each of the ``repeats`` processes times this many calls at least: together ``min_iters``."""
        return -(-self.min_iters // self.repeats)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> MeasureSettings:
        """The settings from config `measure` (a JSON object); an unknown key is an error that names them."""
        affinity = values.get("cpu_affinity")
        return _from_dict(cls, {**values, "cpu_affinity": tuple(affinity) if affinity else None}, "measure")


@dataclass(frozen=True)
class ServingSettings:
    """How a serving cell runs (config `serving`, the study's `latency_bound_ms`, the variant's
    `max_queue_delay_ms`)."""

    #: the p99 latency a server run must stay within (ms)
    latency_bound_ms: float = _SERVING["latency_bound_ms"]
    #: the batcher waits at most this long after a batch's first query for more to fill it
    max_queue_delay_ms: float = _SERVING["max_queue_delay_ms"]
    #: every LoadGen run lasts at least this long and issues at least this many queries (LoadGen's
    #: early stopping needs about 460 queries within the bound to judge a p99)
    min_duration_s: float = _SERVING["min_duration_s"]
    min_query_count: int = _SERVING["min_query_count"]
    #: a run ends here even if its minimum query count is not reached (it is then invalid)
    max_duration_s: float = _SERVING["max_duration_s"]
    #: samples in the query sample library (seeded inputs, cycled by LoadGen's sample index)
    samples: int = _SERVING["samples"]
    #: server: LoadGen runs of the search for the highest valid QPS
    search_runs: int = _SERVING["search_runs"]
    #: server: run at this QPS only, no search (None: search)
    target_qps: float | None = None

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ServingSettings:
        """The settings from a JSON object; a key that is not a setting is an error that names them."""
        return _from_dict(cls, values, "serving")
