"""Per-workload plots: latency per item vs batch (log-log), throughput vs batch, latency vs sequence length.

Every figure of a sweep plot is the report's own: p50 and items/s (items per call / p50) at the boundary its
tables use for those cells (``boundary_of``: the device boundary where every cell ran on one device at it,
else end to end), named on the axis, with times in the unit the tables print (``answers.time_unit``). A
sweep that measured one x value is drawn as bars, one per cell. One colour per engine variant
(engine_colour), one line style per device and one marker per precision, kept the same in every plot of
every run.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from inferbench.analysis.comparison import BOUNDARY_LABELS, boundary_of, items_per_call, p50_at, rate_at
from inferbench.analysis.decisions import cpu_gpu_crossovers
from inferbench.analysis.summary import measured, split_scenarios
from inferbench.catalog.scenarios import GENERATION, PLAIN, drawers
from inferbench.catalog.targets import load_target
from inferbench.catalog.workloads import ordered, workload_info
from inferbench.core.cells import CellRecord
from inferbench.report.answers import time_unit
from inferbench.report.plot_axes import (
    DEVICE_STYLES,
    bars,
    empty_axes,
    engine_colour,
    log_log_axes,
    save_figure,
)

_MARKERS = {"fp32": "o", "fp16": "s", "bf16": "^", "int8": "D"}


def _series(frame: pd.DataFrame, variants: Sequence[str] = ()) -> list[tuple[str, dict, pd.DataFrame]]:
    out = []
    for (engine, precision, device, threads), group in frame.groupby(
        ["engine", "precision", "device", "threads"], sort=True
    ):
        label = f"{engine} {precision} {device}" + (f" {threads}t" if threads else "")
        style = {
            "color": engine_colour(engine, variants),
            "linestyle": DEVICE_STYLES.get(device, ":"),
            "marker": _MARKERS.get(precision, "x"),
        }
        out.append((label, style, group))
    return out


SWEEPS = {"batch": ["latency_per_item.png", "throughput.png"], "seq": ["latency_vs_seq.png"]}
#: per plot: its x column, what its y is (a column of ``at_boundary``) and how the title names it
_PLOTS = {
    "latency_per_item.png": ("batch_size", "per_item_ms", "latency per item"),
    "throughput.png": ("batch_size", "items_per_s", "throughput"),
    "latency_vs_seq.png": ("seq_len", "p50_ms", "latency"),
}


def sweep_cells(summary: pd.DataFrame, workload: str) -> tuple[pd.DataFrame, str]:
    """The ok cells a workload's sweep plots draw, and what they are: its inference cells timed one call at
    a time; where it has none, its training cells (the workflow plots every workload with single-scenario
    cells, a training call being one: without them a workload trained only, as mlp_heart, read "no ok
    cells"). Never both on one curve: a training call's time includes its backward pass."""
    frame = measured(summary)
    frame = frame[frame["workload"] == workload]
    if not frame.empty:
        return frame, "inference"
    training = split_scenarios(summary).training
    return training[(training["workload"] == workload) & (training["status"] == "ok")].copy(), "training"


def at_boundary(frame: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """``frame`` with the report's figures at its one boundary (``boundary_of``, as the report's tables):
    p50 per call (``p50_at``), per item, and items/s = items per call / p50 (``rate_at``, never the mean's
    ``throughput_per_s``); and that boundary."""
    boundary = boundary_of(frame)
    p50 = p50_at(frame, boundary)
    return frame.assign(
        p50_ms=p50, per_item_ms=p50 / items_per_call(frame), items_per_s=rate_at(frame, boundary)
    ), boundary


def y_label(column: str, boundary: str, values_ms: pd.Series) -> tuple[str, float]:
    """The y axis's label, naming the boundary and the unit, and the factor from the column's own unit:
    a time in the unit the report's tables use for these values (answers.time_unit)."""
    where = BOUNDARY_LABELS[boundary]
    if column == "items_per_s":
        return f"throughput, {where} (items/s = items per call / p50)", 1.0
    unit, factor = time_unit(values_ms)
    what = "p50 latency per item" if column == "per_item_ms" else "p50 latency per call"
    return f"{what}, {where} ({unit})", factor


#: each sweep's x column, in words
_X_NAMES = {"batch_size": "batch size", "seq_len": "sequence length (tokens)"}


def draw_sweep(ax: plt.Axes, frame: pd.DataFrame, x: str, column: str, variants: Sequence[str] = ()) -> str:
    """Draw ``frame``'s ``column`` against ``x`` at its boundary: one line per cell series, or one bar per
    cell where the sweep measured one x value; label both axes; return the boundary."""
    frame, boundary = at_boundary(frame)
    label, factor = y_label(column, boundary, frame[column])
    series = [(name, style, group.sort_values(x)) for name, style, group in _series(frame, variants)]
    if frame[x].nunique() == 1:
        rows = [(name, style["color"], value * factor) for name, style, g in series for value in g[column]]
        bars(ax, [r[0] for r in rows], [r[2] for r in rows], [r[1] for r in rows])
        ax.set_xlabel(f"cell, at {_X_NAMES[x].split(' (')[0]} {int(frame[x].iloc[0]):,}")
    else:
        for name, style, group in series:
            ax.plot(group[x], group[column] * factor, label=name, **style)
        log_log_axes(ax, list(frame[x]))
        ax.set_xlabel(_X_NAMES[x])
    ax.set_ylabel(label)
    return boundary


def workload_figures(
    summary: pd.DataFrame, workload: str, kind: str = "batch", variants: Sequence[str] = ()
) -> dict[str, plt.Figure]:
    """The ``kind`` sweep's figures (``batch`` or ``seq``) of one workload, by file name."""
    # serving cells' latencies include queueing, and the no-op engine's overhead is a baseline, not an engine
    frame, what = sweep_cells(summary, workload)
    text = workload_info(workload).has_seq_len
    # per-batch plots use the longest measured sequence length; the seq plot the batch with the most lengths
    batch_frame = frame[frame["seq_len"] == frame["seq_len"].max()] if text and not frame.empty else frame
    seq_note = f" (seq {int(batch_frame['seq_len'].max())})" if text and not frame.empty else ""
    trained = " (training calls)" if what == "training" else ""
    figures = {}
    for name in SWEEPS[kind]:
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        x, column, title = _PLOTS[name]
        if name == "latency_vs_seq.png":
            sub = frame[frame["batch_size"] == seq_plot_batch(frame)] if not frame.empty else frame
            note = f" (batch {int(sub['batch_size'].max())})" if not sub.empty else ""
            ax.set_title(f"{workload}: {title} vs sequence length{note}{trained}")
        else:
            sub = batch_frame
            ax.set_title(f"{workload}: {title} vs batch size{seq_note}{trained}")
        ax.set_xlabel(_X_NAMES[x])
        if sub.empty:
            empty_axes(ax, "no ok cells")
        else:
            draw_sweep(ax, sub, x, column, variants)
        if ax.lines:
            if name == "latency_per_item.png":
                _mark_crossover(ax, sub)
            ax.legend(fontsize=8)
            ax.grid(True, which="both", alpha=0.3)
        figures[name] = fig
    return figures


def plot_workload(
    summary: pd.DataFrame, workload: str, out_dir: str | Path, kind: str = "batch", variants: Sequence[str] = ()
) -> list[Path]:
    """Write the ``kind`` sweep's plots (``batch`` or ``seq``) of one workload into ``out_dir``;
    ``variants``: the config's engine variants in order (their colours)."""
    written = []
    for name, fig in workload_figures(summary, workload, kind, variants).items():
        save_figure(fig, Path(out_dir) / name)
        written.append(Path(out_dir) / name)
    return written


def seq_plot_batch(frame: pd.DataFrame) -> int:
    """The batch a sequence plot shows: the one measured at the most lengths (the smallest of a tie)."""
    lengths = frame.groupby("batch_size")["seq_len"].nunique()
    return int(lengths[lengths == lengths.max()].index.min())


def _mark_crossover(ax: plt.Axes, frame: pd.DataFrame) -> None:
    """A vertical line where the GPU's best p50 per item falls below the CPU's (decisions.cpu_gpu_crossovers)."""
    for cross in cpu_gpu_crossovers(frame).itertuples():
        if cross.crossover_batch is not None and not pd.isna(cross.crossover_batch):
            ax.axvline(cross.crossover_batch, color="black", linewidth=0.9, linestyle=":",
                       label=f"CPU/GPU crossover, batch ~{cross.crossover_batch:,.0f}")  # fmt: skip


def plot_every_workload(summary: pd.DataFrame, out_dir: str | Path, variants: Sequence[str] = ()) -> list[Path]:
    """Every sweep's plots of every workload in ``summary``, under ``out_dir/<workload>/`` (what the
    workflow's plot rules make one job per workload and sweep)."""
    written: list[Path] = []
    scenarios = split_scenarios(summary)  # serving cells: plot_declared, from their records
    for workload in ordered(scenarios.single["workload"]):
        for kind in ["batch", "seq"] if workload_info(workload).has_seq_len else ["batch"]:
            written += plot_workload(summary, workload, Path(out_dir) / workload, kind, variants)
    one_at_a_time = scenarios.generating[scenarios.generating["scenario"] == PLAIN]
    for workload in ordered(one_at_a_time["workload"]):
        for name, drawer in GENERATION.summary_plots:
            written.append(load_target(drawer)(summary, workload, Path(out_dir) / workload / name, variants))
    return written


def plot_declared(records: Sequence[CellRecord], workload: str, out: str | Path, variants: Sequence[str] = ()) -> Path:
    """The plot a scenario declares under ``out``'s file name (``ScenarioInfo.plots``), of ``workload``, drawn by the
    first scenario among its cells' that declares it: the serving plot of LoadGen's server search or of a
    decoder's cells under load, or a plot of a scenario's own."""
    plot = Path(out).name
    scenarios = {r.key.scenario for r in records if r.key.workload == workload}
    own = [target for name, target in drawers(plot).items() if name in scenarios]
    if not own:
        declared = ", ".join(drawers(plot)) or "no scenario"
        raise ValueError(f"no cell of {workload} among the records is of a scenario that draws {plot} ({declared})")
    return load_target(own[0])(records, workload, out, variants)
