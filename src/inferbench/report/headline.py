"""The report's first lines: per workload, the engine to pick at batch 1 and the peak throughput, each
with its boundary, its bound and how far it moved between processes; then, for a few p99 latency
budgets, the highest-throughput cell that meets each (end to end: what a caller waits for)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from inferbench.analysis.comparison import (
    BOUNDARY_LABELS,
    SpreadFloors,
    boundary_of,
    compare,
    p50_at,
    rate_at,
    spread_at,
)
from inferbench.analysis.decisions import measured
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


def best_at_smallest_batch(cells: pd.DataFrame, floors: SpreadFloors | None = None) -> str:
    """The fastest cell at the workload's smallest batch, compared like with like, and its margin."""
    batch = int(cells["batch_size"].min())
    group = cells[cells["batch_size"] == batch]
    boundary = boundary_of(group)
    ranked = group.assign(p50_ms=p50_at(group, boundary)).sort_values("p50_ms")
    best = ranked.iloc[0]
    text = (
        f"at batch {batch}: **{escape_markdown(_cell_name(best))}** ({escape_markdown(recipe(best))}), "
        f"p50 {fmt_ms(best['p50_ms'])} "
        f"{BOUNDARY_LABELS[boundary]}{_bound(best)} ({_processes_range(best, boundary)})"
    )
    if len(ranked) > 1:
        second = ranked.iloc[1]
        margin = compare(best, second, boundary, floors)
        if margin is not None:
            text += f"; {fmt(margin.value)}× ahead of {escape_markdown(_cell_name(second))}, {margin.describe()}"
    return text


def peak_throughput(cells: pd.DataFrame) -> str:
    """The most items per second of any cell, at the workload's common boundary."""
    boundary = boundary_of(cells)
    top = cells.assign(rate=rate_at(cells, boundary)).sort_values("rate", ascending=False).iloc[0]
    items = top.get("items_per_call") if pd.notna(top.get("items_per_call")) else top["batch_size"]
    text = (
        f"peak **{fmt(float(top['rate']))} items/s** {BOUNDARY_LABELS[boundary]} with "
        f"{escape_markdown(_cell_name(top))} ({escape_markdown(recipe(top))}) at batch {int(top['batch_size'])}"
        f"{_bound(top)}"
    )
    by_process = top.get("p50_by_process_ms" if boundary == "device" else "e2e_p50_by_process_ms")
    if isinstance(by_process, str) and ";" in by_process:
        rates = sorted(1e3 * float(items) / float(v) for v in by_process.split(";") if v)
        text += f" (batch / each process's p50: {fmt(rates[0])} – {fmt(rates[-1])} items/s)"
    return text


def latency_budgets(ok: pd.DataFrame) -> pd.DataFrame:
    """Per workload and p99 budget (end to end), the highest-throughput cell whose end-to-end p99 is
    within it; a budget is listed only where its answer differs from the next smaller one's."""
    rows = []
    frame = ok.assign(
        e2e_p99=_column(ok, "e2e_latency_p99_ms"),
        e2e_rate=rate_at(ok, "end_to_end"),
    ).dropna(subset=["e2e_p99"])
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


def headline_section(summary: pd.DataFrame) -> list[str]:
    ok = measured(summary)
    if ok.empty:
        return []
    out = ["## Headline", ""]
    floors = SpreadFloors.of(ok)
    workloads = ordered(ok["workload"])
    for workload in workloads:
        cells = _headline_cells(ok[ok["workload"] == workload])
        seq = int(cells["seq_len"].iloc[0])
        where = f" (sequence {seq})" if seq else ""
        name = escape_markdown(workload)
        out.append(f"- **{name}**{where}: {best_at_smallest_batch(cells, floors)}. {peak_throughput(cells)}.")
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
