"""How cells are measured and served: config `measure` and `serving` as typed settings, written here with
each key's default and meaning. The config schema (inferbench/config.schema.yaml, package data) holds what
a value may be (types and bounds); its `measure` and `serving` sections take their defaults and
descriptions from these classes when it is read (``schema()``), so each default is declared once."""

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


class _Settings:
    """What the settings classes share: made from a config section, refusing keys they do not have."""

    SECTION = ""

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Any:
        known = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]  (subclasses are dataclasses)
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ValueError(f"unknown {cls.SECTION} settings {unknown}; known: {', '.join(known)}")
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class MeasureSettings(_Settings):
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


@dataclasses.dataclass(frozen=True)
class ServingSettings(_Settings):
    """How a serving cell runs (config `serving`, with the study's `latency_bound_ms` and the variant's
    `max_queue_delay_ms` filled in by inferbench.plan.grid)."""

    SECTION = "serving"

    latency_bound_ms: float = setting(
        50,
        "p99 bound of server cells, unless their study sets one",
    )
    max_queue_delay_ms: float = setting(
        0,
        "how long the batcher waits after a batch's first query for the batch to fill, unless the variant "
        "sets it: 0 runs a batch as soon as the engine is free, with every query waiting then (vLLM's and "
        "TensorRT-LLM's schedulers); more waits even with the engine idle (Triton's dynamic batcher)",
    )
    batcher_wait: str = setting(
        "block",
        "how the batcher's worker waits for queries: block (on the queue, the OS wakes it) or spin (polls it, "
        "yielding the GIL: a shorter wake-up, one core kept busy)",
    )
    overlap_copies: bool = setting(
        False,
        "on a GPU, stage the next batch (its copy in, on a stream of its own) while the engine runs this one, "
        "where the engine allows it (PyTorch eager, TorchScript, CUDA graphs); false (the default: the "
        "overlapped path's own p99 was several times the serial path's, "
        "docs/results/h100/serving_harness_floor): one batch at a time, copy in, compute, copy out",
    )
    min_duration_s: float = setting(
        2,
        "every LoadGen run lasts at least this long",
    )
    min_query_count: int = setting(
        2000,
        "and issues at least this many queries: 2,000 put 20 queries beyond a p99, so that a few slow ones do "
        "not decide it (LoadGen's early stopping needs ~460 within the bound to judge a p99 at all)",
    )
    max_duration_s: float = setting(
        300,
        "a run ends here; short of its queries it is invalid (the search runs no target that cannot issue "
        "min_query_count within it)",
    )
    samples: int = setting(
        256,
        "seeded input rows of the query sample library",
    )
    min_load_share: float = setting(
        0.0625,
        "a server search goes no lower than this share of the capacity (1/16) in runs longer than 30 s: a "
        "bound missed at so light a load is a tail, not queueing, and each run there lasts minutes (0: only "
        "max_duration_s limits it)",
    )
    search_runs: int = setting(
        6,
        "LoadGen runs of a server cell's search for the highest QPS within the bound (log-scale bracket, then "
        "geometric bisection)",
    )
    target_qps: float | None = setting(
        None,
        "server cells: run at this QPS only, no search (null: search for the highest QPS within the bound)",
    )


#: the config sections whose defaults and descriptions are these classes' own
SETTINGS_SECTIONS: dict[str, type[_Settings]] = {cls.SECTION: cls for cls in (MeasureSettings, ServingSettings)}


@functools.cache
def schema() -> dict[str, Any]:
    if not SCHEMA.exists():
        raise FileNotFoundError(
            f"the config schema is not at {SCHEMA}: the package is installed without its data; "
            "install it again (pip install -e . from a checkout, or pip install inferbench)"
        )
    loaded = yaml.safe_load(SCHEMA.read_text())
    for section, settings in SETTINGS_SECTIONS.items():
        properties = loaded["properties"][section]["properties"]
        for field in dataclasses.fields(settings):  # type: ignore[arg-type]
            spec = properties.setdefault(field.name, {})
            spec["description"] = field.metadata["help"]
            if not field.metadata["workflow_only"]:
                spec["default"] = field.default
    return loaded


@functools.cache
def schema_defaults(*path: str) -> Mapping[str, Any]:
    """The defaults the schema declares for the keys of the object at ``path``: property names from the
    top, ``additionalProperties`` for the values of a map (``"studies", "additionalProperties"``: a study's)."""
    node = schema()
    for key in path:
        node = node[key] if key == "additionalProperties" else node["properties"][key]
    return MappingProxyType({key: spec["default"] for key, spec in node["properties"].items() if "default" in spec})
