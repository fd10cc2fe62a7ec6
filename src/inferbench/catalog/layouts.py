"""The shapes a study's answer can take (a study's ``layout``), declared once: the function that writes
the answer on the report's first page from the study's rows, the percentiles it shows (each cell of the study
gets the timed calls the highest one needs: inferbench.plan.grid), the plots it shows. Light: the
config check fills the schema's enum from here, the grid reads the percentiles."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from inferbench.catalog.targets import load_target
from inferbench.catalog.workloads import workload_info

#: the serving plot of a workload (drawn by its scenario's declared drawer): LoadGen's p99 against QPS, or for a
#: decoder's llm_load cells its TTFT and TPOT percentiles against the request rate
SERVING_PLOT = "serving.png"
#: the generation plot of a decoder workload (inferbench.scenarios.generation.plots)
GENERATION_PLOT = "generation.png"
#: the plots each kind of workload gets (inferbench.report.plots draws them); declared here, away from
#: matplotlib and scipy, because the workflow's DAG names them as outputs
PLOTS_BY_KIND = {
    "tabular": ["latency_per_item", "throughput"],
    "vision": ["latency_per_item", "throughput"],
    "text": ["latency_per_item", "throughput", "latency_vs_seq"],
    "decoder": ["generation"],  # the generation plot: per output token and to the first, against the batch
}


def plot_names(workload: str) -> list[str]:
    """The file names of ``workload``'s plots."""
    return [f"{name}.png" for name in PLOTS_BY_KIND[workload_info(workload).kind]]


@dataclass(frozen=True)
class Layout:
    #: ``"module:function"``: ``function(cells, study, basis) -> list[str]``, the Markdown lines of the
    #: study's answer on the report's first page, from the study's summary rows (a DataFrame), its config
    #: and what the run's claims rest on (inferbench.analysis.decisions.ClaimBasis: every study judges alike)
    first_page: str
    #: the latency percentiles shown when the study names none
    percentiles: tuple[str, ...]
    #: the plot files shown, of each of the study's workloads (made by inferbench.report.plots)
    plots: tuple[str, ...]
    #: its answer also reads the study's cell records (``cells/`` beside the report), passed as ``records``
    #: (cell id -> CellRecord): what a cell measured that is no summary column (an llm_load cell's sweep)
    records: bool = False

    def first_page_function(self) -> Callable[[Any, dict[str, Any], Any], list[str]]:
        return load_target(self.first_page)


LAYOUTS: dict[str, Layout] = {
    "by_batch": Layout(
        "inferbench.report.answers:by_batch_answer",
        ("p50",),
        ("latency_per_item.png",),
    ),
    "engines": Layout(
        "inferbench.report.answers:engines_answer",
        ("p50", "p95", "p99"),
        ("throughput.png",),
    ),
    "seq": Layout(
        "inferbench.report.answers:seq_answer",
        ("p50", "p90", "p99"),
        ("latency_vs_seq.png",),
    ),
    "training": Layout(
        "inferbench.report.answers:training_answer",
        ("p50",),
        (),
    ),
    "generation": Layout(
        "inferbench.scenarios.generation.answer:generation_answer",
        ("p50",),  # of requests; TTFT and TPOT show p50 and p99 of their own samples
        (GENERATION_PLOT,),
    ),
    "serving": Layout(
        "inferbench.scenarios.serving.answer:serving_answer",
        ("p50", "p99"),  # LoadGen's own, over its queries (inferbench.scenarios.serving)
        (SERVING_PLOT,),
    ),
    "llm_load": Layout(
        "inferbench.scenarios.llm_load.answer:llm_load_answer",
        ("p50", "p99"),  # each load's own, over its requests (inferbench.scenarios.llm_load)
        (SERVING_PLOT,),  # for a decoder: TTFT and TPOT percentiles against the request rate
        records=True,
    ),
}


def study_percentiles(study: dict[str, Any]) -> list[str]:
    """The percentiles a study reports: its own list, else its layout's."""
    return list(study.get("percentiles") or LAYOUTS[study.get("layout", "engines")].percentiles)
