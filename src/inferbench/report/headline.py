"""The report's first lines: per workload, the engine to pick at batch 1 (the run's fastest cell there,
the decisions' own claim) and the peak throughput, each with its boundary, its bound and how far it
moved between processes; then, for a few p99 latency budgets, the highest-throughput cell that meets
each (end to end: what a caller waits for)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from inferbench.analysis.comparison import BOUNDARY_LABELS, boundary_of, p50_at, rate_at, spread_at
from inferbench.analysis.decisions import ClaimBasis, measured, row_of
from inferbench.core.workloads import ordered
from inferbench.report.tables import fmt, fmt_ms, markdown_table, recipe
from inferbench.report.text import escape_markdown

#: the p99 budgets the table tries, ms; each workload keeps those between its fastest and slowest cells
BUDGETS_MS = (0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
#: text workloads are summarised at this sequence length where it was measured
HEADLINE_SEQ = 128


def _column(frame: pd.DataFrame, name: str) -> pd.Series:
    """A summary column, all missing where an older summary has none."""
    return frame[name] if name in frame else pd.Series(index=frame.index, dtype=float)


def _cell_name(row: Any) -> str:
    threads = f" {int(row['threads'])}t" if row["device"] == "cpu" else ""
    return f"{row['engine']} {row['precision']} {row['device']}{threads}"


def _bound(row: Any) -> str:
    bound = row.get("bound")
    return f", {bound}-bound" if isinstance(bound, str) else ""


def _processes_range(row: Any, boundary: str) -> str:
    spread = spread_at(row, boundary)
    by_process = row.get("p50_by_process_ms" if boundary == "device" else "e2e_p50_by_process_ms")
    if spread is None or spread.n < 2 or not isinstance(by_process, str):
        return "1 process"
    values = sorted(float(v) for v in by_process.split(";") if v)
    return f"{spread.n} processes: {fmt_ms(values[0])} – {fmt_ms(values[-1])}"


def _headline_cells(ok: pd.DataFrame) -> pd.DataFrame:
    """One sequence length per text workload (128 where measured, else the shortest)."""
    if ok.empty or not ok["seq_len"].gt(0).any():
        return ok
    chosen = ok.groupby("workload")["seq_len"].agg(lambda s: HEADLINE_SEQ if HEADLINE_SEQ in set(s) else s.min())
    return ok[ok["seq_len"] == ok["workload"].map(chosen)]


def best_at_smallest_batch(cells: pd.DataFrame, basis: ClaimBasis) -> str:
    """The run's fastest cell at the workload's smallest batch and its margin over the runner-up: the
    same claim as the decisions' table for that shape (``ClaimBasis.best``)."""
    batch = int(cells["batch_size"].min())
    seq = int(cells["seq_len"].iloc[0])
    best = basis.fastest(cells["workload"].iloc[0], batch, seq)
    row = row_of(cells, best)
    text = (
        f"at batch {batch}: **{escape_markdown(_cell_name(row))}** ({escape_markdown(recipe(row))}), "
        f"p50 {fmt_ms(best['p50_ms'])} "
        f"{BOUNDARY_LABELS[best['boundary']]}{_bound(row)} ({_processes_range(row, best['boundary'])})"
    )
    if isinstance(best["runner_up"], str) and pd.notna(best["margin"]):
        text += f"; {fmt(float(best['margin']))}× ahead of {escape_markdown(best['runner_up'])}, {best['verdict']}"
    return text


def peak_throughput(cells: pd.DataFrame) -> str:
    """The most items per second of any cell, at the workload's common boundary: items per call over
    the p50 (the same statistic as the range of each process's figure beside it)."""
    boundary = boundary_of(cells)
    items = _column(cells, "items_per_call").fillna(cells["batch_size"]).astype(float)
    rated = cells.assign(rate=1e3 * items / p50_at(cells, boundary), items=items)
    top = rated.sort_values("rate", ascending=False).iloc[0]
    text = (
        f"peak **{fmt(float(top['rate']))} items/s** {BOUNDARY_LABELS[boundary]} (items per call / p50) with "
        f"{escape_markdown(_cell_name(top))} ({escape_markdown(recipe(top))}) at batch {int(top['batch_size'])}"
        f"{_bound(top)}"
    )
    by_process = top.get("p50_by_process_ms" if boundary == "device" else "e2e_p50_by_process_ms")
    if isinstance(by_process, str) and ";" in by_process:
        rates = sorted(1e3 * float(top["items"]) / float(v) for v in by_process.split(";") if v)
        text += f" (each process: {fmt(rates[0])} – {fmt(rates[-1])} items/s)"
    return text


def latency_budgets(ok: pd.DataFrame) -> pd.DataFrame:
    """Per workload and p99 budget (end to end), the highest-throughput cell whose end-to-end p99 is
    within it; a budget is listed only where its answer differs from the next smaller one's."""
    rows = []
    # a pipelined loop's end-to-end figure is its time per call, not a request's latency: no budget answer
    pipelined = _column(ok, "host_input").astype("string").str.contains("overlapped", na=False)
    frame = (
        ok[~pipelined]
        .assign(e2e_p99=_column(ok, "e2e_latency_p99_ms"), e2e_rate=rate_at(ok, "end_to_end"))
        .dropna(subset=["e2e_p99"])
    )
    for workload, cells in frame.groupby("workload", sort=False):
        previous = None
        for budget in BUDGETS_MS:
            within = cells[cells["e2e_p99"] <= budget]
            if within.empty:
                continue
            best = within.sort_values("e2e_rate", ascending=False).iloc[0]
            name = f"{_cell_name(best)} b{int(best['batch_size'])}" + (
                f" s{int(best['seq_len'])}" if best["seq_len"] else ""
            )
            if name != previous:
                rows.append(
                    {
                        "workload": workload,
                        "budget_ms": float(budget),
                        "cell": name,
                        "recipe": recipe(best),
                        "e2e_p99_ms": best["e2e_p99"],
                        "e2e_items_per_s": best["e2e_rate"],
                        "bound": best.get("bound"),
                    }
                )
            previous = name
            if budget >= cells["e2e_p99"].max():
                break
    return pd.DataFrame(rows)


BUDGET_COLUMNS = [
    ("workload", "workload"),
    ("budget_ms", "p99 budget"),
    ("cell", "cell (highest throughput within it)"),
    ("recipe", "recipe"),
    ("e2e_p99_ms", "p99 end to end"),
    ("e2e_items_per_s", "items/s end to end"),
    ("bound", "bound"),
]


def headline_section(summary: pd.DataFrame, basis: ClaimBasis) -> list[str]:
    ok = measured(summary)
    if ok.empty:
        return []
    out = ["## Headline", ""]
    workloads = ordered(ok["workload"])
    for workload in workloads:
        cells = _headline_cells(ok[ok["workload"] == workload])
        seq = int(cells["seq_len"].iloc[0])
        where = f" (sequence {seq})" if seq else ""
        name = escape_markdown(workload)
        out.append(f"- **{name}**{where}: {best_at_smallest_batch(cells, basis)}. {peak_throughput(cells)}.")
    out += [
        "",
        "Each figure is compared like with like: at the device boundary where all cells ran on one device "
        "and timed there, else end to end (host arrays in, host arrays out). `bound`: whether the GPU "
        "(device) or the host thread launching its kernels (host) set the pace; a host-bound figure moves "
        "with the host's CPU from process to process. A margin is called significant when its 95% interval, "
        "which counts the spread between fresh processes, excludes 1.",
        "",
    ]
    budgets = latency_budgets(ok)
    if not budgets.empty:
        out += [
            "**Within a latency budget**: for each p99 budget (end to end), the cell with the highest "
            "end-to-end throughput whose p99 meets it (cells with fewer than 100 timed calls have no p99 "
            "and are not candidates):",
            "",
            markdown_table(budgets, BUDGET_COLUMNS),
            "",
        ]
    return out
