"""The summary columns of LoadGen's server and offline cells (their declaration's ``columns``), from their record's
``serving`` section. Light: the summary is made where no engine or LoadGen is installed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from inferbench.scenarios.serving import SECTION

if TYPE_CHECKING:
    from inferbench.core.cells import CellRecord

#: the columns of numbers a summary is checked for (their declaration's ``numeric``): the QPS and latencies that
#: `inferbench compare` reads
NUMERIC = (
    "serving_qps",
    "serving_target_qps",
    "serving_lowest_invalid_qps",
    "serving_p99_ms",
    "serving_harness_p99_ms",
)


def columns(record: CellRecord) -> dict[str, Any]:
    """LoadGen's result of a server or offline cell: the QPS it served, within the latency bound for a server cell,
    its latency percentiles and validity, and the batcher."""
    return section_columns(record.sections.get(SECTION) or {})


def section_columns(serving: dict[str, Any]) -> dict[str, Any]:
    """The columns of a section in LoadGen's result shape (llm_load's keeps that shape for the fields it has)."""
    result = serving.get("result") or {}
    latency = result.get("latency_ms") or {}
    harness_latency = (serving.get("harness") or {}).get("latency_ms") or {}
    batches = serving.get("batches") or {}
    # the answering run's slowest 1% of batches: the phase that took most of their time
    slowest = batches.get("slowest") or {}
    longest = slowest.get("longest")
    return {
        "serving_qps": result.get("completed_qps"),
        "serving_target_qps": result.get("target_qps"),
        "serving_latency_bound_ms": serving.get("latency_bound_ms"),
        **{f"serving_{k}_ms": latency.get(k) for k in ("p50", "p90", "p99")},
        "serving_valid": result.get("valid"),
        "serving_early_stopping_met": result.get("early_stopping_met"),
        "serving_queries": result.get("query_count"),
        "serving_max_queue_delay_ms": serving.get("max_queue_delay_ms"),
        "serving_mean_batch": batches.get("mean_size"),
        "serving_padded_share": batches.get("padded_share"),
        # the next batch's copy in overlapped with this one's compute (serving.overlap_copies)
        "serving_overlapped": serving.get("overlapped"),
        "serving_capacity_qps": serving.get("capacity_qps"),
        # the search's bracket: the QPS within the bound lies between serving_qps and this
        "serving_lowest_invalid_qps": serving.get("lowest_invalid_qps"),
        # the no-op engine through the same path at the answer's target: the harness's own latency
        **{f"serving_harness_{k}_ms": harness_latency.get(k) for k in ("p50", "p99")},
        # the p99 from the batcher's issue callback to completion: below serving_p99_ms by what
        # LoadGen's issuing thread lost before the callback ran
        "serving_batcher_p99_ms": (batches.get("query_ms") or {}).get("p99"),
        # at largest batch 1: the QPS within the bound that queueing alone allows (an M/D/1 queue with
        # the run's median service through the serving path): near it, the tail is queueing
        "serving_md1_qps": (serving.get("queueing") or {}).get("md1_qps"),
        "serving_slowest_ms": slowest.get("total_ms"),
        "serving_slowest_phase": longest,
        "serving_slowest_phase_ms": slowest.get(f"{longest}_ms") if longest else None,
        # the hypervisor's share of the machine's CPU time during the answering run
        "serving_steal_pct": (result.get("host") or {}).get("steal_pct"),
    }
