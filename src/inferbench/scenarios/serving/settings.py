"""LoadGen's settings of a server or offline cell (config `serving`): each key's default and meaning, declared
once here. The config schema bounds each key; the workflow writes these defaults and help texts into it
(inferbench.plan.config), resolves them per cell (``for_cell``) and passes them in the measure settings."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from inferbench.core.settings import Settings, setting


@dataclasses.dataclass(frozen=True)
class ServingSettings(Settings):
    """How a serving cell runs (config `serving`, with its study's `latency_bound_ms` and its variant's
    `max_queue_delay_ms` over it: ``for_cell``)."""

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
        "docs/configuration.md): one batch at a time, copy in, compute, copy out",
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

    def problems(self) -> list[str]:
        """What the config check refuses besides the schema's bounds: nothing (the schema bounds each key)."""
        return []

    @classmethod
    def for_cell(cls, values: dict[str, Any], study: Mapping[str, Any], variant: Mapping[str, Any]) -> dict[str, Any]:
        """A cell's settings: the section's ``values``, its study's latency bound and its engine variant's batcher
        delay over them, where they set one."""
        return {
            **values,
            "latency_bound_ms": study.get("latency_bound_ms", values["latency_bound_ms"]),
            "max_queue_delay_ms": variant.get("max_queue_delay_ms", values["max_queue_delay_ms"]),
        }

    @classmethod
    def combined(cls, earlier: dict[str, Any], other: dict[str, Any]) -> dict[str, Any] | None:
        """A cell two studies measure: the tighter latency bound, where nothing else differs (else None)."""
        rest = [{k: v for k, v in values.items() if k != "latency_bound_ms"} for values in (earlier, other)]
        if rest[0] != rest[1]:
            return None
        return min(earlier, other, key=lambda values: values["latency_bound_ms"])


def serving_settings(cell: Any) -> ServingSettings:
    """A serving cell's settings, as the workflow resolved them (``measure.scenario_settings``)."""
    values = getattr(cell.settings, "scenario_settings", None)
    if values is None:
        raise ValueError(
            f"a {cell.key.scenario} cell needs its LoadGen settings in measure.scenario_settings (the workflow "
            "passes config `serving` with its study's bound and its variant's delay; a hand run: --measure "
            '\'{"scenario_settings": {"latency_bound_ms": 50, ...}}\')'
        )
    return ServingSettings.from_dict(values)
