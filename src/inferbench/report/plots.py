"""Per-workload plots: latency per item vs batch (log-log), throughput vs batch, latency vs sequence length.

Every curve of a plot is at one boundary, end to end (host arrays in, host arrays out): the one a CPU
and a GPU cell, or a device-boundary engine and a host-to-host one, share. One colour per engine
variant (engine_colour), one line style per device and one marker per precision, kept the same in
every plot of every run.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from inferbench.analysis.comparison import p50_at, rate_at
from inferbench.analysis.decisions import cpu_gpu_crossovers
from inferbench.analysis.summary import measured, split_scenarios
from inferbench.catalog.layouts import GENERATION_PLOT
from inferbench.catalog.scenarios import PLAIN
from inferbench.catalog.workloads import ordered, workload_info
from inferbench.core.cells import CellRecord
from inferbench.core.fsutil import atomic_path

_PALETTE = plt.get_cmap("tab20").colors
_STYLES = {"cpu": "-", "cuda": "--"}
_MARKERS = {"fp32": "o", "fp16": "s", "bf16": "^", "int8": "D"}
_BATCH_MARKERS = ["o", "s", "^", "D", "v", "P"]


def engine_colour(engine: str, variants: Sequence[str] = ()) -> tuple[float, float, float]:
    """One colour per engine variant, the same in every plot of a run: the variants in the order the
    config declares them (``variants``, config `engines`) take the palette in turn; a variant not
    declared there gets one from a stable hash of its name (never from which engines a plot shows)."""
    if engine in variants:
        return _PALETTE[list(variants).index(engine) % len(_PALETTE)]
    return _PALETTE[zlib.crc32(engine.encode()) % len(_PALETTE)]


def _series(frame: pd.DataFrame, variants: Sequence[str] = ()) -> list[tuple[str, dict, pd.DataFrame]]:
    out = []
    for (engine, precision, device, threads), group in frame.groupby(
        ["engine", "precision", "device", "threads"], sort=True
    ):
        label = f"{engine} {precision} {device}" + (f" {threads}t" if threads else "")
        style = {
            "color": engine_colour(engine, variants),
            "linestyle": _STYLES.get(device, ":"),
            "marker": _MARKERS.get(precision, "x"),
        }
        out.append((label, style, group))
    return out


def _save(fig: plt.Figure, path: Path) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)


def _log_axes(ax: plt.Axes, xs: list[float]) -> None:
    """Log-log axes labelled with plain numbers: the measured x values, and y values in a readable form."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    if xs:
        ax.set_xticks(sorted(set(xs)))
    ax.xaxis.set_major_formatter(plain)
    ax.xaxis.set_minor_formatter(NullFormatter())
    low, high = ax.get_ylim()
    if high / low < 1e3:  # a few decades: 1, 2, 5 of each labelled, not a lone power of ten
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(plain)
    # within one decade matplotlib has no major tick: label the minor ones instead
    ax.yaxis.set_minor_formatter(plain if high / low < 3 else NullFormatter())


def _empty(ax: plt.Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)


SWEEPS = {"batch": ["latency_per_item.png", "throughput.png"], "seq": ["latency_vs_seq.png"]}


def plot_workload(
    summary: pd.DataFrame, workload: str, out_dir: str | Path, kind: str = "batch", variants: Sequence[str] = ()
) -> list[Path]:
    """Write the ``kind`` sweep's plots (``batch`` or ``seq``) of one workload into ``out_dir``;
    ``variants``: the config's engine variants in order (their colours)."""
    out_dir = Path(out_dir)
    # serving cells' latencies include queueing, training cells' a backward pass: not on these curves
    # and the no-op engine's overhead is a baseline, not an engine
    frame = measured(summary)
    frame = frame[frame["workload"] == workload]
    frame = frame.assign(e2e_p50_ms=p50_at(frame, "end_to_end"), e2e_items_per_s=rate_at(frame, "end_to_end"))
    frame = frame.assign(e2e_per_item_ms=frame["e2e_p50_ms"] / frame["batch_size"])
    text = workload_info(workload).has_seq_len
    # per-batch plots use the longest measured sequence length; the seq plot the largest batch
    batch_frame = frame[frame["seq_len"] == frame["seq_len"].max()] if text and not frame.empty else frame
    seq_note = f" (seq {int(batch_frame['seq_len'].max())})" if text and not frame.empty else ""
    written = []
    for name in SWEEPS[kind]:
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        if name == "latency_vs_seq.png":
            sub = frame[frame["batch_size"] == seq_plot_batch(frame)] if not frame.empty else frame
            for label, style, group in _series(sub, variants):
                group = group.sort_values("seq_len")
                ax.plot(group["seq_len"], group["e2e_p50_ms"], label=label, **style)
            _log_axes(ax, list(sub["seq_len"]))
            ax.set(
                xlabel="sequence length (tokens)",
                ylabel="p50 latency, end to end (ms)",
                title=f"{workload}: latency vs sequence length"
                + (f" (batch {int(sub['batch_size'].max())})" if not sub.empty else ""),
            )
        else:
            column, ylabel = (
                ("e2e_per_item_ms", "p50 latency per item, end to end (ms)")
                if name == "latency_per_item.png"
                else ("e2e_items_per_s", "throughput, end to end (items/s)")
            )
            for label, style, group in _series(batch_frame, variants):
                group = group.sort_values("batch_size")
                ax.plot(group["batch_size"], group[column], label=label, **style)
            if name == "latency_per_item.png":
                _mark_crossover(ax, batch_frame)
            title = "latency per item" if name == "latency_per_item.png" else "throughput"
            _log_axes(ax, list(batch_frame["batch_size"]))
            ax.set(xlabel="batch size", ylabel=ylabel, title=f"{workload}: {title} vs batch size{seq_note}")
        if ax.lines:
            ax.legend(fontsize=8)
            ax.grid(True, which="both", alpha=0.3)
        else:
            _empty(ax, "no ok cells")
        path = out_dir / name
        _save(fig, path)
        written.append(path)
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


def plot_generation(summary: pd.DataFrame, workload: str, out: str | Path, variants: Sequence[str] = ()) -> Path:
    """A decoder's generation cells against the batch size: time per output token (p50, the decode step a
    user waits for) on the left, time to first token (p50, the prefill) on the right; colour: the engine
    variant, as in every plot; marker and line: the prompt length."""
    frame = split_scenarios(summary).generation
    # one request at a time: a cell under load (llm_load) has its own plot (plot_llm_load)
    frame = frame[(frame["workload"] == workload) & (frame["status"] == "ok") & (frame["scenario"] == PLAIN)]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    prompts = sorted(frame["seq_len"].unique()) if not frame.empty else []
    prompt_style = {
        n: (_BATCH_MARKERS[i % len(_BATCH_MARKERS)], ["--", "-", ":", "-."][i % 4]) for i, n in enumerate(prompts)
    }
    for ax, column, what in (
        (axes[0], "gen_tpot_p50_ms", "time per output token, p50 (ms)"),
        (axes[1], "gen_ttft_p50_ms", "time to first token, p50 (ms)"),
    ):
        rows = frame.dropna(subset=[column]) if column in frame else frame.iloc[0:0]
        by = ["engine", "precision", "device", "threads", "seq_len"]
        for (engine, precision, device, threads, prompt), group in rows.groupby(by):
            marker, line = prompt_style[prompt]
            group = group.sort_values("batch_size")
            label = f"{engine} {precision} {device}" + (f" {threads}t" if threads else "") + f", prompt {int(prompt)}"
            ax.plot(group["batch_size"], group[column], color=engine_colour(engine, variants), marker=marker,
                    linestyle=line, label=label)  # fmt: skip
        if ax.lines:
            _log_axes(ax, list(rows["batch_size"]))
            ax.grid(True, which="both", alpha=0.3)
        else:
            _empty(ax, "no ok generation cells")
        ax.set(xlabel="batch size (sequences decoded together)", ylabel=what)
    if axes[0].lines:
        axes[0].legend(fontsize=7)
    fig.suptitle(f"{workload}: generation against the batch size")
    out = Path(out)
    _save(fig, out)
    return out


def plot_every_workload(summary: pd.DataFrame, out_dir: str | Path, variants: Sequence[str] = ()) -> list[Path]:
    """Every sweep's plots of every workload in ``summary``, under ``out_dir/<workload>/`` (what the
    workflow's plot rules make one job per workload and sweep)."""
    written: list[Path] = []
    scenarios = split_scenarios(summary)  # serving cells: plot_serving, from their records
    for workload in ordered(scenarios.single["workload"]):
        for kind in ["batch", "seq"] if workload_info(workload).has_seq_len else ["batch"]:
            written += plot_workload(summary, workload, Path(out_dir) / workload, kind, variants)
    one_at_a_time = scenarios.generation[scenarios.generation["scenario"] == PLAIN]
    for workload in ordered(one_at_a_time["workload"]):
        written.append(plot_generation(summary, workload, Path(out_dir) / workload / GENERATION_PLOT, variants))
    return written


#: the serving plot of a workload with server cells (report.serving shows it)


def plot_serving(records: Sequence[CellRecord], workload: str, out: str | Path, variants: Sequence[str] = ()) -> Path:
    """p99 latency against the QPS LoadGen completed, for every run of every server cell's search of
    ``workload`` (filled: valid runs, hollow: not valid), one line per engine and largest batch, the
    cells' latency bounds as horizontal lines: where each configuration crosses its bound. A decoder's
    serving plot is its llm_load cells' (``plot_llm_load``)."""
    if any(r.key.workload == workload and r.key.scenario == LLM_LOAD for r in records):
        return plot_llm_load(records, workload, out, variants)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    bounds = set()
    cells = [r for r in records if r.key.workload == workload and r.key.scenario == "server" and r.serving]
    # colour: the engine variant, as in every plot; marker: the largest batch
    batch_marker = {
        b: _BATCH_MARKERS[i % len(_BATCH_MARKERS)] for i, b in enumerate(sorted({r.key.batch_size for r in cells}))
    }
    for record in sorted(cells, key=lambda r: (r.key.engine, r.key.precision, r.key.device, r.key.batch_size)):
        runs = sorted(
            (s for s in record.serving.get("search") or [] if s.get("p99_ms")), key=lambda s: s["completed_qps"]
        )
        if not runs:
            continue
        key = record.key
        colour = engine_colour(key.engine, variants)
        label = f"{key.engine} {key.precision} {key.device}, max batch {key.batch_size}"
        qps, p99 = [s["completed_qps"] for s in runs], [s["p99_ms"] for s in runs]
        marker = batch_marker[key.batch_size]
        ax.plot(qps, p99, color=colour, linestyle=_STYLES.get(key.device, ":"), alpha=0.6)
        for s in runs:
            face = colour if s["valid"] else "none"
            ax.plot(s["completed_qps"], s["p99_ms"], marker=marker, color=colour, mfc=face, linestyle="none")
        ax.plot([], [], color=colour, marker=marker, label=label)
        if record.serving.get("latency_bound_ms"):
            bounds.add(record.serving["latency_bound_ms"])
    for bound in sorted(bounds):
        ax.axhline(bound, color="black", linewidth=0.8, linestyle=":")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("queries per second completed (LoadGen server, Poisson arrivals)")
    ax.set_ylabel("p99 latency, ms (issue to completion)")
    ax.set_title(f"{workload}: p99 against load, every run of the search (hollow: not valid)")
    if ax.lines:
        ax.legend(fontsize=7, loc="best")
    out = Path(out)
    _save(fig, out)
    return out


#: the scenario of a decoder's cells under load (inferbench.scenarios.llm_load)
LLM_LOAD = "llm_load"


def plot_llm_load(records: Sequence[CellRecord], workload: str, out: str | Path, variants: Sequence[str] = ()) -> Path:
    """A decoder's llm_load cells: the objective's percentile of TTFT (left) and of TPOT (right) against the
    request rate of every load of each cell's sweep (offered; served at a fixed concurrency), filled where the
    load met the objective, hollow where not; each cell's bounds as horizontal lines and its capacity as a
    vertical one. Colour: the engine variant, as in every plot; marker: the cell's largest running batch."""
    cells = [r for r in records if r.key.workload == workload and r.key.scenario == LLM_LOAD and r.serving]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    batch_marker = {
        b: _BATCH_MARKERS[i % len(_BATCH_MARKERS)] for i, b in enumerate(sorted({r.key.batch_size for r in cells}))
    }
    levels = sorted({r.serving["objective"]["percentile"] for r in cells})
    for record in sorted(cells, key=lambda r: (r.key.engine, r.key.precision, r.key.device, r.key.batch_size)):
        serving, key = record.serving, record.key
        level = serving["objective"]["percentile"]
        colour, marker = engine_colour(key.engine, variants), batch_marker[key.batch_size]
        rates = [
            s["offered_per_s"] if s.get("offered_per_s") is not None else s["request_per_s"] for s in serving["sweep"]
        ]
        label = f"{key.engine} {key.precision} {key.device}, up to {key.batch_size} running, prompt {key.seq_len}"
        for ax, figure, bound in ((axes[0], "ttft", "ttft_ms"), (axes[1], "tpot", "tpot_ms")):
            values = [s[f"{figure}_ms"][level] for s in serving["sweep"]]
            points = [(x, y, s.get("objective_met")) for x, y, s in zip(rates, values, serving["sweep"], strict=True)
                      if y is not None]  # fmt: skip
            if not points:
                continue
            line = _STYLES.get(key.device, ":")
            ax.plot([p[0] for p in points], [p[1] for p in points], color=colour, linestyle=line, alpha=0.6)
            for x, y, met in points:
                ax.plot(x, y, marker=marker, color=colour, mfc=colour if met else "none", linestyle="none")
            ax.axhline(serving["objective"][bound], color=colour, linewidth=0.8, linestyle=":")
            ax.axvline(serving["capacity"]["request_per_s"], color=colour, linewidth=0.8, linestyle="-.", alpha=0.5)
        axes[0].plot([], [], color=colour, marker=marker, label=label)
    level_text = "/".join(levels) or "p99"
    for ax, what in (
        (axes[0], f"time to first token, {level_text} (ms)"),
        (axes[1], f"time per output token, {level_text} (ms)"),
    ):
        if ax.lines:
            ax.set_xscale("log")
            ax.set_yscale("log")
            plain = FuncFormatter(lambda v, _: f"{v:g}")
            for axis, (low, high) in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
                axis.set_major_formatter(plain)  # plain numbers, not powers of ten
                # within a decade or so there is no major tick to read: label the minor ones then
                axis.set_minor_formatter(plain if high / low < 12 else NullFormatter())
            ax.grid(True, which="both", alpha=0.3)
        else:
            _empty(ax, "no llm_load cell with a sweep")
        ax.set(xlabel="request rate (requests/s; dash-dot: capacity)", ylabel=what)
    if axes[0].lines:
        axes[0].legend(fontsize=7, loc="best")
    fig.suptitle(
        f"{workload}: TTFT and TPOT against the request rate (hollow: the objective missed; dotted: its bound)"
    )
    out = Path(out)
    _save(fig, out)
    return out
