"""The LoadGen scenarios' face in the report: the answer of a serving study (layout ``serving``) and the
appendix's section. Per workload and engine, the QPS that
LoadGen's server scenario sustained with p99 within the bound, the offline QPS, and what the dynamic
batcher's largest batch and queue delay change. Serving cells never enter the latency tables and
decisions of single-call cells: their latency includes queueing and batching."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from inferbench.analysis.summary import KEY_COLUMNS, split_scenarios
from inferbench.catalog.scenarios import PLAIN
from inferbench.report.tables import fmt, fmt_ms, markdown_table
from inferbench.report.text import escape_markdown

if TYPE_CHECKING:
    from inferbench.analysis.compare_runs import Run

#: the appendix's "What was measured" paragraph of these cells
SERVING_MEASURED = (
    "Serving cells (`server`, `offline`; their own study sections) are MLPerf LoadGen runs through a "
    "dynamic batcher in front of the engine, in one fresh process under the machine-wide lock, after the "
    "same preparation and parity check: each query is timed by LoadGen from its issue to its completion "
    "(queueing, a batch run as soon as the engine is free, padded only to the next prepared size where the "
    "engine's shapes are fixed, host-to-host copies, compute); a server cell's QPS is the highest target whose "
    "run LoadGen judged valid with p99 within the study's bound, with the lowest invalid one beside it."
)

SERVING_COLUMNS = [
    ("engine", "engine"),
    ("precision", "precision"),
    ("device", "device"),
    ("seq_len", "seq"),
    ("batch_size", "max batch"),
    ("serving_max_queue_delay_ms", "queue delay"),
    ("server_qps", "server QPS, p99 within bound"),
    ("server_p99_ms", "its p99"),
    ("server_p50_ms", "its p50"),
    ("server_harness_p99_ms", "harness p99"),
    ("server_harness_share", "harness share of p99"),
    ("server_mean_batch", "mean batch"),
    ("server_padded_share", "padded rows"),
    ("server_lowest_invalid_qps", "lowest invalid QPS"),
    ("server_md1_qps", "queueing limit (M/D/1)"),
    ("server_batcher_p99_ms", "p99 from issue callback"),
    ("server_slowest", "slowest 1% of batches: longest phase"),
    ("offline_qps", "offline QPS"),
    ("capacity_qps", "back-to-back QPS"),
    ("server_verdict", "server run"),
]


def side_by_side(cells: pd.DataFrame) -> pd.DataFrame:
    """One row per engine configuration (workload, engine, precision, device, shape, max batch): its
    server cell's QPS within the bound beside its offline cell's QPS."""
    keys = ["workload", "engine", "precision", "device", "seq_len", "threads", "batch_size"]
    server = cells[cells["scenario"] == "server"].set_index(keys)
    offline = cells[cells["scenario"] == "offline"].set_index(keys)
    table = pd.DataFrame(index=server.index.union(offline.index))
    if not server.empty:
        ok = server["status"] == "ok"
        table["server_qps"] = server["serving_qps"].where(ok)
        table["server_p99_ms"] = server["serving_p99_ms"].where(ok)
        table["server_p50_ms"] = server["serving_p50_ms"].where(ok)
        table["server_mean_batch"] = server["serving_mean_batch"].where(ok)
        for column in ("harness_p99_ms", "padded_share", "lowest_invalid_qps", "batcher_p99_ms", "md1_qps"):
            table[f"server_{column}"] = server.get(f"serving_{column}", pd.Series(index=server.index, dtype=float))
        table["server_harness_share"] = table["server_harness_p99_ms"] / table["server_p99_ms"]
        # by index, as every other column: a configuration may have an offline cell and no server cell
        table["server_slowest"] = pd.Series([slowest_phase(row) for _, row in server.iterrows()], index=server.index)
        table["latency_bound_ms"] = server["serving_latency_bound_ms"]
        table["server_verdict"] = server["status"].map({"ok": "valid"}).fillna(server["status"])
    if not offline.empty:
        table["offline_qps"] = offline["serving_qps"].where(offline["status"] == "ok")
    first = pd.concat([server, offline])
    first = first[~first.index.duplicated()]
    table["serving_max_queue_delay_ms"] = first["serving_max_queue_delay_ms"]
    table["capacity_qps"] = first["serving_capacity_qps"]
    return table.reset_index()


def slowest_phase(row: pd.Series) -> str | None:
    """Where the answering run's slowest 1% of batches spent their time, e.g. "fetch 11.2 of 12.5 ms"
    (valid or not: a tail is placed either way); None where the record has no batch phases."""
    phase, phase_ms, total_ms = (row.get(f"serving_slowest{k}") for k in ("_phase", "_phase_ms", "_ms"))
    if not isinstance(phase, str) or pd.isna(phase_ms) or pd.isna(total_ms):
        return None
    return f"{phase} {phase_ms:.3g} of {total_ms:.3g} ms"


def serving_answer(cells: pd.DataFrame, study: dict[str, Any], basis: Any = None) -> list[str]:
    """The answer of a serving study (layout ``serving``) from its rows: the best QPS within the bound per
    workload."""
    cells = split_scenarios(cells).served
    table = side_by_side(cells)
    out: list[str] = []
    for workload, rows in table.groupby("workload", sort=False):
        best = rows.dropna(subset=["server_qps"]) if "server_qps" in rows else rows.iloc[0:0]
        if not best.empty:
            top = best.loc[best["server_qps"].idxmax()]
            bound = fmt_ms(top["latency_bound_ms"])
            out.append(
                f"- **{escape_markdown(workload)}**: {fmt(top['server_qps'])} queries/s with p99 "
                f"{fmt_ms(top['server_p99_ms'])} within {bound}: {escape_markdown(top['engine'])} "
                f"{top['precision']} {top['device']}, max batch {int(top['batch_size'])}, queue delay "
                f"{fmt(top['serving_max_queue_delay_ms'])} ms."
            )
        else:
            out.append(f"- **{escape_markdown(workload)}**: no server cell met its p99 bound.")
        if len(rows) > 1:  # the study's configurations side by side: what batching or waiting changes
            others = "; ".join(
                f"{escape_markdown(r.engine)} max batch {int(r.batch_size)}, delay {fmt(r.serving_max_queue_delay_ms)} "
                f"ms: "
                + (f"{fmt(q)} queries/s" if not pd.isna(q := getattr(r, "server_qps", None)) else "no server QPS")
                + (f", offline {fmt(o)}" if not pd.isna(o := getattr(r, "offline_qps", None)) else "")
                for r in rows.sort_values(["engine", "batch_size"]).itertuples(index=False)
            )
            out.append(f"- Every configuration of {escape_markdown(workload)}: {others}.")
    return [*out, ""]


def details_section(rows: pd.DataFrame, report_dir: Path) -> list[str]:
    """The appendix's section of the server and offline cells, heading included."""
    return ["## Serving", "", *serving_section(rows, {})]


def serving_section(cells: pd.DataFrame, study: dict[str, Any], basis: Any = None) -> list[str]:
    """A serving study's detail: every engine configuration's server and offline figures side by side."""
    table = side_by_side(split_scenarios(cells).served)
    out: list[str] = []
    for workload, rows in table.groupby("workload", sort=False):
        out += [f"**{escape_markdown(workload)}**:", "", markdown_table(rows, SERVING_COLUMNS), ""]
    out += [
        "Server: LoadGen's Poisson arrivals, single-sample queries; the QPS is the highest target of the "
        "cell's search (log scale, then bisection) whose run LoadGen judged valid (p99 within the bound, "
        "early stopping, minimum duration and query count), as completed. Offline: every query at once. "
        "The search ends once its highest valid and lowest invalid targets are within 1.25x: the QPS within "
        "the bound lies between the two columns. "
        "Back-to-back: batches of the max batch, end to end, one after another (the batcher's ceiling). "
        "Each query is timed from its issue to its completion: queueing, batching, host-to-host copies and "
        "compute. An engine that takes any batch runs each batch as it is; one fixed to its prepared shapes "
        "(CUDA graphs, compiled and TensorRT engines), or slower at other shapes (ONNX Runtime's CUDA provider), "
        "is prepared at batch 1, 2, 4, ... and the max batch and "
        "pads a batch to the next of these (padded rows: their share of the rows run). Harness p99: the "
        "no-op engine served through the same path (batcher, padding, gathering the samples, LoadGen's "
        "callbacks) at the answer's target; its share of the engine's p99 is what the harness, not the "
        "engine, costs. Slowest 1% of batches: of the answering run's batches, the slowest by their first "
        "query's time, and the phase that took most of it: `wait` (from the batcher's issue callback: in "
        "the queue, or the server thread waking; a late LoadGen issue thread counts in the p99 but in no "
        "phase), "
        "`stage` (gathering, copying in), `call` (the engine's call), `fetch` (the output to the host, waiting "
        "for the GPU) or `complete` (LoadGen's callback). p99 from issue callback: the same queries timed "
        "from the batcher's issue callback to their completion; what lies between it and LoadGen's p99 is "
        "LoadGen's issuing thread running late (e.g. waiting for Python's GIL). Queueing limit (largest batch "
        "1): the QPS within the bound of an ideal server of one query at a time with Poisson arrivals (an "
        "M/D/1 queue) whose constant service is the run's median batch through the serving path; a QPS near "
        "it is set by queueing, one far below it by stalls. "
        "LoadGen's logs are beside each record (`<cell>.loadgen/`).",
        "",
    ]
    return out


#: how far a serving cell's QPS may move between two runs of the same code and still count as reproduced
#: (issue 31's targets): a server cell's answer is known to within its search's 1.25x bracket at best
SERVING_TOLERANCE = {"cuda": 0.15, "cpu": 0.20}
#: a server cell's harness floor (the no-op engine's p99 through the same path) "moved" between two runs
#: beyond this ratio and this many ms: the floor itself moves between runs of the same cells (docs/serving.md)
HARNESS_MOVED_RATIO, HARNESS_MOVED_MS = 2.0, 0.5


def compare_serving(run_a: Run, run_b: Run) -> pd.DataFrame:
    """One row per serving cell in both runs: each run's verdict and QPS (within the bound for a server
    cell: the highest valid target, beside the lowest invalid one), the ratio B / A, whether the verdict
    changed, whether the QPS moved beyond ``SERVING_TOLERANCE`` and, for a server cell, whether the two
    searches' brackets overlap (None where a run knows neither end)."""
    columns = ["status", "serving_qps", "serving_target_qps", "serving_lowest_invalid_qps", "serving_p99_ms",
               "serving_harness_p99_ms"]  # fmt: skip
    # reindex: a summary from before a column existed gets it empty
    a, b = (run.summary[run.summary["scenario"] != PLAIN] for run in (run_a, run_b))
    a, b = a.reindex(columns=KEY_COLUMNS + columns), b.reindex(columns=KEY_COLUMNS + columns)
    both = a.merge(b, on=KEY_COLUMNS, suffixes=("_a", "_b"))
    if both.empty:
        return both
    ratio_b_a = both["serving_qps_b"] / both["serving_qps_a"]
    tolerance = both["device"].map(SERVING_TOLERANCE).fillna(SERVING_TOLERANCE["cpu"])
    harness_a, harness_b = both["serving_harness_p99_ms_a"], both["serving_harness_p99_ms_b"]
    harness_ratio = harness_b / harness_a
    # a server search places the QPS within the bound between its highest valid target (none: 0) and its
    # lowest invalid one (none: unbounded); two runs agree as far as the searches resolve where these meet.
    # Targets on both ends (a run completes ~1% below its target); a summary without them: the completed QPS
    server = both["scenario"] == "server"
    low_a, low_b = (
        both[f"serving_target_qps_{s}"].fillna(both[f"serving_qps_{s}"]).where(both[f"status_{s}"] == "ok").fillna(0.0)
        for s in "ab"
    )
    high_a, high_b = (both[f"serving_lowest_invalid_qps_{s}"].fillna(np.inf) for s in "ab")
    known = server & ~((low_a == 0) & np.isinf(high_a)) & ~((low_b == 0) & np.isinf(high_b))
    return both.assign(
        qps_ratio=ratio_b_a,
        verdict_changed=both["status_a"] != both["status_b"],
        beyond_tolerance=(np.log(ratio_b_a).abs() > np.log1p(tolerance)).where(ratio_b_a.notna()),
        tolerance=tolerance,
        # the no-op engine through the same path moved too: the host, not only the engine, differed
        harness_moved=(
            (np.log(harness_ratio).abs() > np.log(HARNESS_MOVED_RATIO))
            & ((harness_b - harness_a).abs() > HARNESS_MOVED_MS)
        ).where(harness_ratio.notna()),
        brackets_overlap=(np.maximum(low_a, low_b) < np.minimum(high_a, high_b)).where(known),
    )


def serving_markdown(serving: pd.DataFrame) -> list[str]:
    """The serving cells of two runs side by side, with lines counting what did not reproduce, per
    scenario (an offline run's throughput and a server run's p99 verdict reproduce differently), and in
    how many server cells the harness floor itself moved."""
    changed, beyond = int(serving["verdict_changed"].sum()), int(serving["beyond_tolerance"].fillna(False).sum())
    by_scenario = [
        f"{scenario} {int(rows['beyond_tolerance'].fillna(False).sum())} of {len(rows)} beyond the tolerance, "
        f"{int(rows['verdict_changed'].sum())} verdicts changed"
        for scenario, rows in serving.groupby("scenario", sort=True)
    ]
    server = serving[serving["scenario"] == "server"]
    moved = int(server["harness_moved"].fillna(False).astype(bool).sum())
    bracketed = server["brackets_overlap"].dropna().astype(bool)
    columns = [("workload", "workload"), ("engine", "engine"), ("precision", "precision"), ("device", "device"),
               ("batch_size", "max batch"), ("seq_len", "seq"), ("scenario", "scenario"), ("status_a", "A"),
               ("status_b", "B"), ("serving_qps_a", "QPS A"), ("serving_qps_b", "QPS B"), ("qps_ratio", "B / A"),
               ("serving_lowest_invalid_qps_a", "lowest invalid A"),
               ("serving_lowest_invalid_qps_b", "lowest invalid B"),
               ("serving_harness_p99_ms_a", "harness p99 A"), ("serving_harness_p99_ms_b", "harness p99 B"),
               ("harness_moved", "harness moved"), ("verdict_changed", "verdict changed"),
               ("beyond_tolerance", "beyond tolerance"), ("brackets_overlap", "brackets overlap")]  # fmt: skip
    return [
        "## Serving cells",
        "",
        f"{len(serving)} serving cells in both runs: {changed} change their verdict, {beyond} their QPS beyond "
        "the tolerance (15% on a GPU, 20% on the CPU; a server cell's QPS is the highest valid target of its "
        "search, known to within its 1.25x bracket). By scenario: " + "; ".join(by_scenario) + ".",
        "",
        *(
            [
                f"Harness moved: in {moved} of {len(server)} server cells the no-op engine's p99 through the same "
                f"path differs more than {HARNESS_MOVED_RATIO:g}x and by over {HARNESS_MOVED_MS:g} ms between the "
                "runs: there the host's share of the tail changed too, not only the engine's (each at its own "
                "run's answer).",
                "",
                *(
                    [
                        f"Brackets: in {int(bracketed.sum())} of the {len(bracketed)} server cells with one in both "
                        "runs the two searches' brackets (highest valid to lowest invalid target; none valid: from 0) "
                        "overlap: there the runs agree as far as their searches resolve, whatever the QPS ratio.",
                        "",
                    ]
                    if len(bracketed)
                    else []
                ),
            ]
            if len(server)
            else []
        ),
        markdown_table(serving.sort_values(KEY_COLUMNS), columns),
        "",
    ]


def compared_cells(run_a: Run, run_b: Run) -> list[str]:
    """What `inferbench compare` says of two runs' cells of every scenario but single calls: nothing where they
    share none."""
    serving = compare_serving(run_a, run_b)
    return serving_markdown(serving) if not serving.empty else []
