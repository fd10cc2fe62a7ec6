"""One report section per study of the run: its question, the answer computed from its cells, and its
tables in the shape of the study it reproduces (``layout`` in the study's config: inferbench.report.layouts).

A summary row belongs to a study by the rule that made the study's cells (inferbench.plan.grid.in_study),
with the study's devices as resolved where the workflow ran.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from inferbench.analysis import decisions
from inferbench.analysis.comparison import BOUNDARY_LABELS, rate_at
from inferbench.analysis.decisions import ClaimBasis
from inferbench.analysis.summary import split_scenarios, with_scenario
from inferbench.core.cells import CellKey
from inferbench.core.percentiles import samples_needed
from inferbench.plan.grid import in_study
from inferbench.report.layouts import LAYOUTS, study_percentiles
from inferbench.report.tables import fmt, fmt_ms, intervals, markdown_table, recipe
from inferbench.report.text import escape_markdown, inline_code


def study_rows(summary: pd.DataFrame, study: dict[str, Any]) -> pd.DataFrame:
    """The summary rows that are cells of ``study`` (its ``devices`` already resolved: no ``auto``)."""
    if summary.empty:
        return summary
    keys = summary[["workload", "engine", "precision", "device", "batch_size", "seq_len", "threads"]].itertuples(
        index=False
    )
    scenarios = with_scenario(summary)["scenario"]
    mask = [
        in_study(CellKey(*map(str, key[:4]), *map(int, key[4:]), scenario), study)
        for key, scenario in zip(keys, scenarios, strict=True)
    ]
    return summary[mask]


def _label(row: Any) -> str:
    return f"{row.engine} {row.precision} {row.device}" + (f" {row.threads}t" if row.device == "cpu" else "")


def _pivot(frame: pd.DataFrame, index: Sequence[tuple[str, str]], value: str, unit: str = "") -> str:
    """A table with one row per ``index`` value and one column per engine variant (its label)."""
    frame = frame.assign(label=[_label(r) for r in frame.itertuples(index=False)])
    table = frame.pivot_table(index=[c for c, _ in index], columns="label", values=value, aggfunc="first")
    table = table.reindex(sorted(table.columns), axis=1)
    show = fmt_ms if unit == "ms" else fmt
    lines = ["| " + " | ".join([*(t for _, t in index), *map(escape_markdown, table.columns)]) + " |"]
    lines.append("|" + "|".join("---" for _ in range(len(index) + len(table.columns))) + "|")
    for key, values in table.iterrows():
        key = key if isinstance(key, tuple) else (key,)
        lines.append("| " + " | ".join([*(fmt(k) for k in key), *(show(v) for v in values)]) + " |")
    return "\n".join(lines)


def _peak_mb(frame: pd.DataFrame) -> pd.Series:
    """NVML's per-process GPU memory on the GPU (the allocator's peak where NVML has none), RSS on the CPU."""
    gpu = frame.get("gpu_process_peak_mb", pd.Series(index=frame.index, dtype=float))
    gpu = gpu.fillna(frame.get("gpu_peak_allocated_mb", pd.Series(index=frame.index, dtype=float)))
    host = frame.get("host_peak_rss_mb", pd.Series(index=frame.index, dtype=float))
    return gpu.where(frame["device"] == "cuda", host)


def _one_device_note(ok: pd.DataFrame, what: str) -> list[str]:
    devices = sorted(ok["device"].unique())
    if len(devices) == 1:
        return [f"- Only {escape_markdown(devices[0])} cells were measured in this run: {what} needs both devices."]
    return []


def _verdict(row: Any) -> str:
    """How the fastest cell's margin over the runner-up holds (best_cells' claim), in a few words."""
    if not isinstance(row.runner_up, str) or pd.isna(row.margin):
        return ""
    return f", {fmt(float(row.margin))}× ahead of {escape_markdown(row.runner_up)} ({row.verdict})"


def by_batch_section(cells: pd.DataFrame, study: dict[str, Any], basis: ClaimBasis) -> list[str]:
    """Latency per item against batch size, one column per engine variant, and the CPU/GPU crossover,
    end to end (the one boundary a CPU and a GPU cell share); the fastest cell per batch at the batch's
    common boundary (``decisions.best_cells``: the device boundary where all its cells ran on one device)."""
    ok = decisions.measured(cells)
    out: list[str] = _one_device_note(ok, "the CPU/GPU crossover")
    for cross in decisions.cpu_gpu_crossovers(cells).itertuples():
        workload = escape_markdown(cross.workload)
        out.append(f"- **{workload}**: {cross.verdict} (end-to-end p50 per item, each device's best engine).")
    e2e = ok.assign(p50_e2e=decisions.e2e_p50_ms(ok))
    ok = e2e.assign(per_item_ms=e2e["p50_e2e"] / e2e["batch_size"], e2e_items_per_s=rate_at(e2e, "end_to_end"))
    for workload, best in decisions.best_cells(cells, basis.floors).groupby("workload", sort=False):
        fastest = "; ".join(
            f"b{r.batch_size}: {escape_markdown(_label(r))} "
            f"({BOUNDARY_LABELS[r.boundary]}{_verdict(r)}{_faster_elsewhere(r, basis)})"
            for r in best.itertuples()
        )
        out.append(f"- **{escape_markdown(workload)}**, fastest of this study's cells at each batch: {fastest}.")
    out.append("")
    for workload, frame in ok.groupby("workload", sort=False):
        name = escape_markdown(workload)
        out += [
            f"**{name}: p50 per item, end to end** (host arrays in, host arrays out, divided by the batch):",
            "",
            _pivot(frame, [("batch_size", "batch")], "per_item_ms", unit="ms"),
            "",
            f"**{name}: items/s, end to end**:",
            "",
            _pivot(frame, [("batch_size", "batch")], "e2e_items_per_s"),
            "",
        ]
    return out


def percentile_columns(percentiles: Sequence[str], prefix: str = "latency") -> list[tuple[str, str]]:
    return [(f"{prefix}_{p}_ms", p) for p in percentiles]


def engine_columns(percentiles: Sequence[str]) -> list[tuple[str, str]]:
    return [
        ("engine", "engine"),
        ("precision", "precision"),
        ("device", "device"),
        ("recipe", "recipe"),
        ("timing", "boundary"),
        ("bound", "bound"),
        ("latency_mean_ms", "mean"),
        *percentile_columns(percentiles),
        ("e2e_latency_p50_ms", "p50 end to end"),
        ("throughput_per_s", "items/s"),
        ("peak_mb", "peak MB"),
        ("speedup", "× FP32 eager"),
        ("speedup_interval", "95% interval"),
        ("speedup_boundary", "compared"),
        ("own_fp32", "× own fp32"),
        ("n_iters", "calls"),
        ("repeats", "processes"),
    ]


def own_fp32_ratio(ok: pd.DataFrame) -> pd.Series:
    """p50 of the same engine variant at fp32 (same workload, device, batch, length, threads) over the
    cell's p50, at their shared boundary (one engine, one device: its own): what a lower precision
    buys that engine (e.g. ORT int8 against ORT fp32)."""
    shape = ["workload", "engine", "device", "batch_size", "seq_len", "threads"]
    fp32 = ok[ok["precision"] == "fp32"].set_index(shape)["latency_p50_ms"]
    return pd.Series(
        [
            fp32[key] / row.latency_p50_ms
            if row.precision != "fp32" and (key := tuple(getattr(row, c) for c in shape)) in fp32.index
            else None
            for row in ok.itertuples(index=False)
        ],
        index=ok.index,
        dtype=float,
    )


STEP_COLUMNS = [
    ("workload", "workload"),
    ("device", "device"),
    ("batch_size", "batch"),
    ("seq_len", "seq"),
    ("from_cell", "from"),
    ("to_cell", "to"),
    ("change", "the one change"),
    ("speedup", "×"),
    ("interval", "95% interval"),
    ("verdict", "verdict"),
    ("boundary", "compared"),
]


def option_steps_section(cells: pd.DataFrame, basis: ClaimBasis) -> list[str]:
    """What each single option adds: pairs of cells that differ in exactly one knob."""
    steps = decisions.option_steps(cells, basis.floors)
    if steps.empty:
        return []
    steps = steps.assign(
        from_cell=steps["from_engine"] + " " + steps["from_precision"],
        to_cell=steps["to_engine"] + " " + steps["to_precision"],
        interval=intervals(steps, "speedup_low", "speedup_high"),
        boundary=steps["boundary"].map(BOUNDARY_LABELS),
    )
    return [
        "**What each option adds**: pairs of cells that differ in exactly one option (precision, how the "
        "model runs, channels-last, IO binding); `×` = p50 before the change / p50 after it, at the pair's "
        "common boundary. Speed-ups of cells that differ in more than one option are not split here.",
        "",
        markdown_table(steps, STEP_COLUMNS),
        "",
    ]


def engines_section(cells: pd.DataFrame, study: dict[str, Any], basis: ClaimBasis) -> list[str]:
    """Engines and precisions side by side per workload, batch and sequence length."""
    percentiles = study_percentiles(study)
    ok = decisions.measured(cells)
    speed = decisions.speedups(cells, basis.floors)
    key = ["workload", "device", "batch_size", "seq_len", "threads", "engine", "precision"]
    if not speed.empty:
        speed = speed.assign(
            speedup_interval=intervals(speed, "speedup_low", "speedup_high"),
            speedup_boundary=speed["boundary"].map(BOUNDARY_LABELS),
        )
        ok = ok.merge(speed[[*key, "speedup", "speedup_interval", "speedup_boundary"]], on=key, how="left")
    ok = ok.assign(peak_mb=_peak_mb(ok), own_fp32=own_fp32_ratio(ok), recipe=[recipe(r) for _, r in ok.iterrows()])
    out: list[str] = []
    for best in decisions.best_cells(cells, basis.floors).itertuples():
        shape = f"{escape_markdown(best.workload)} b{best.batch_size}" + (f" s{best.seq_len}" if best.seq_len else "")
        gains = []
        row = decisions.row_of(ok, best._asdict())
        if _known(row.get("speedup")):
            gains.append(f"{fmt(float(row['speedup']))}× FP32 eager")
        if _known(row.get("own_fp32")):
            gains.append(f"{fmt(float(row['own_fp32']))}× its own fp32")
        bound = f", {best.bound}-bound" if isinstance(best.bound, str) else ""
        variant = escape_markdown(f"{best.engine} {best.precision} {best.device}")
        out.append(
            f"- **{shape}**: fastest of this study's cells {variant} ({BOUNDARY_LABELS[best.boundary]}{bound})"
            + "".join(f", {g}" for g in gains)
            + _verdict(best)
            + _faster_elsewhere(best, basis)
            + "."
        )
    out.append("")
    for (workload, batch, seq), frame in ok.groupby(["workload", "batch_size", "seq_len"], sort=True):
        shape = f"{escape_markdown(workload)}, batch {batch}" + (f", sequence {seq}" if seq else "")
        table = markdown_table(frame.sort_values("latency_p50_ms"), engine_columns(percentiles))
        out += [f"**{shape}** (mean and percentiles at each cell's own boundary, column `boundary`):", "", table, ""]
    out += [
        f"Percentiles: {_percentile_note(percentiles)} (`calls`: the processes' calls together; a percentile "
        "with fewer is –). `peak MB`: the process's GPU memory from NVML (the allocator's peak where NVML has "
        "none) for GPU cells, resident host memory for CPU cells. `× FP32 eager`: p50 of torch_eager fp32 on "
        "the same device and shape over this cell's, at the pair's common boundary (`compared`), with a 95% "
        "interval that counts the spread between processes; `× own fp32`: the same engine variant's fp32 p50 "
        "over this cell's. `bound` (GPU cells): whether the GPU or the host thread launching its kernels set "
        "the pace.",
        "",
    ]
    out += option_steps_section(cells, basis)
    return out


def _faster_elsewhere(best: Any, basis: ClaimBasis) -> str:
    """Where the run's fastest cell at this shape is not this study's (a cell of another study): its name,
    so that the section and the headline never seem to disagree."""
    run_best = basis.fastest(best.workload, best.batch_size, best.seq_len)
    if run_best is None or (run_best["engine"], run_best["precision"], run_best["device"]) == (
        best.engine,
        best.precision,
        best.device,
    ):
        return ""
    name = escape_markdown(f"{run_best['engine']} {run_best['precision']} {run_best['device']}")
    return f" (the run's fastest here is {name}, a cell of another study)"


def _percentile_note(percentiles: Sequence[str]) -> str:
    """How many timed calls the study's percentiles rest on (the grid sized every cell for them)."""
    needed = samples_needed(percentiles)
    if needed <= 1:
        return f"{', '.join(percentiles)} from every timed call"
    return f"{', '.join(percentiles)}, each from at least {needed} timed calls per cell"


def seq_columns(percentiles: Sequence[str]) -> list[tuple[str, str]]:
    return [
        ("batch_size", "batch"),
        ("seq_len", "seq"),
        ("engine", "engine"),
        ("device", "device"),
        ("threads", "threads"),
        ("timing", "boundary"),
        ("bound", "bound"),
        *percentile_columns(percentiles),
        ("e2e_latency_p50_ms", "p50 end to end"),
        ("throughput_per_s", "items/s"),
        ("n_iters", "calls"),
    ]


GAP_COLUMNS = [("workload", "workload"), ("batch_size", "batch"), ("seq_len", "seq"), ("cpu_ms", "best CPU"),
               ("cuda_ms", "best GPU"), ("gap", "CPU / GPU")]  # fmt: skip


def cpu_gpu_gap(cells: pd.DataFrame) -> pd.DataFrame:
    """Per workload, batch and sequence length: each device's best end-to-end p50 and their ratio."""
    ok = decisions.measured(cells)
    shape = ["workload", "batch_size", "seq_len", "device"]
    best = ok.assign(e2e=decisions.e2e_p50_ms(ok)).groupby(shape)["e2e"].min().unstack("device")
    if not {"cpu", "cuda"} <= set(best.columns):
        return pd.DataFrame(columns=[c for c, _ in GAP_COLUMNS])
    best = best[["cpu", "cuda"]].dropna().reset_index()
    return best.assign(gap=best["cpu"] / best["cuda"]).rename(columns={"cpu": "cpu_ms", "cuda": "cuda_ms"})


def seq_section(cells: pd.DataFrame, study: dict[str, Any], basis: ClaimBasis) -> list[str]:
    """Latency against batch and sequence length, the scaling exponent per series, the CPU/GPU gap."""
    percentiles = study_percentiles(study)
    ok = decisions.measured(cells)
    scaling = decisions.seq_scaling(cells)
    gap = cpu_gpu_gap(cells)
    out: list[str] = _one_device_note(ok, "the CPU/GPU gap")
    fitted = scaling.dropna(subset=["exponent"]) if not scaling.empty else scaling
    if not fitted.empty:
        for (workload, device), series in fitted.groupby(["workload", "device"], sort=False):
            agreed = series[~series["boundaries_disagree"].astype(bool)]
            series_of = escape_markdown(f"{workload} on {device}")
            if not agreed.empty:
                low, high = agreed["exponent"].min(), agreed["exponent"].max()
                spread = f"{fmt(low)}" if abs(high - low) < 0.005 else f"{fmt(low)} to {fmt(high)}"
                out.append(f"- **{series_of}**: p50 grows as length^k, k = {spread} ({len(agreed)} series).")
            for row in series[series["boundaries_disagree"].astype(bool)].itertuples():
                out.append(
                    f"- **{series_of}**, {escape_markdown(row.engine)} b{row.batch_size}: the boundaries disagree, "
                    f"k = {fmt(row.exponent)} at the engine's own boundary and {fmt(row.exponent_e2e)} end to end: "
                    "no exponent is its answer."
                )
    if not scaling.empty and len(fitted) < len(scaling):
        lengths = int(scaling["points"].max())
        out.append(
            f"- No scaling exponent where a series has fewer than {decisions.MIN_SCALING_LENGTHS} lengths "
            f"(here up to {lengths}): a power law always fits two points."
        )
    if not gap.empty:
        for workload, frame in gap.groupby("workload", sort=False):
            out.append(
                f"- **{escape_markdown(workload)}**: the GPU is {fmt(frame['gap'].min())}× to "
                f"{fmt(frame['gap'].max())}× faster than the CPU end to end (each device's best engine)."
            )
    out.append("")
    for workload, frame in ok.groupby("workload", sort=False):
        frame = frame.sort_values(["batch_size", "seq_len", "device", "engine"])
        out += [
            f"**{escape_markdown(workload)}** ({', '.join(percentiles)} at each cell's own boundary, column "
            f"`boundary`; {_percentile_note(percentiles)}):",
            "",
            markdown_table(frame, seq_columns(percentiles)),
            "",
        ]
    if not scaling.empty:
        columns = [("workload", "workload"), ("engine", "engine"), ("device", "device"), ("batch_size", "batch"),
                   ("exponent", "k"), ("exponent_e2e", "k end to end"), ("r2", "R²"),
                   ("points", "lengths")]  # fmt: skip
        out += ["**Scaling exponent** (p50 at the engine's own boundary ∝ length^k, least squares in log-log):", ""]
        out += [markdown_table(scaling, columns), ""]
    if not gap.empty:
        out += ["**CPU/GPU gap** (p50, end to end):", "", markdown_table(gap, GAP_COLUMNS), ""]
    return out


TRAINING_COLUMNS = [
    ("engine", "engine"),
    ("precision", "precision"),
    ("device", "device"),
    ("batch_size", "batch"),
    ("recipe", "recipe"),
    ("status", "status"),
    ("timing", "boundary"),
    ("latency_p50_ms", "p50 per call"),
    ("latency_p50_ci95", "p50 95% CI"),
    ("items_per_call", "items per call"),
    ("throughput_per_s", "items/s"),
    ("speedup_vs_cpu", "GPU/CPU speed-up"),
    ("speedup_vs_baseline", "× baseline"),
    ("baseline", "baseline"),
    ("energy_per_item_mj", "energy mJ/item"),
    ("n_iters", "calls"),
]


def training_speedups(cells: pd.DataFrame, engine_order: Sequence[str] = ()) -> pd.DataFrame:
    """Training cells with two ratios of items/s: against the same cell on the CPU (``speedup_vs_cpu``),
    and against the plain fp32 baseline of the same workload, engine implementation, device and batch
    (``speedup_vs_baseline``, named in ``baseline``): the first of ``engine_order`` (a study lists its
    baseline first) with an fp32 cell there, else the fp32 cell with the plainest recipe (e.g. the
    fp32 step against AMP + channels-last + compile, the plain epoch loop against DataLoader options)."""
    cells = cells.copy()
    ok = cells[cells["status"] == "ok"]
    same = ["workload", "engine", "precision", "batch_size"]
    cpu = ok[ok["device"] == "cpu"].set_index(same)["throughput_per_s"]
    cells["speedup_vs_cpu"] = [
        row.throughput_per_s / cpu[key]
        if row.device != "cpu" and row.status == "ok" and (key := tuple(getattr(row, c) for c in same)) in cpu.index
        else None
        for row in cells.itertuples(index=False)
    ]
    group = ["workload", "engine_impl", "device", "batch_size"]
    order = {name: i for i, name in enumerate(engine_order)}
    fp32 = ok[ok["precision"] == "fp32"]
    fp32 = fp32.assign(
        rank=[(order.get(r["engine"], len(order)), len(recipe(r)), r["engine"]) for _, r in fp32.iterrows()]
    )
    baselines = {key: frame.sort_values("rank").iloc[0] for key, frame in fp32.groupby(group)} if len(fp32) else {}
    ratios, names = [], []
    for _, row in cells.iterrows():
        base = baselines.get(tuple(row[c] for c in group))
        if row["status"] == "ok" and base is not None:
            ratios.append(row["throughput_per_s"] / base["throughput_per_s"])
            names.append(f"{base['engine']} fp32 ({recipe(base)})")
        else:
            ratios.append(None)
            names.append(None)
    return cells.assign(speedup_vs_baseline=ratios, baseline=names, recipe=[recipe(r) for _, r in cells.iterrows()])


def _known(value: Any) -> bool:
    return value is not None and not pd.isna(value)


def training_section(cells: pd.DataFrame, study: dict[str, Any], basis: ClaimBasis | None = None) -> list[str]:
    """Time per training iteration or epoch, with the GPU/CPU and optimised/baseline speed-ups."""
    training = split_scenarios(cells).training
    if training.empty:
        return []
    rated = training_speedups(training, study.get("engines", ()))
    out: list[str] = []
    for row in rated.itertuples(index=False):
        if _known(row.speedup_vs_cpu):
            cell = escape_markdown(f"{row.workload} {row.engine} {row.precision} b{row.batch_size}")
            out.append(f"- {cell}: the GPU trains {fmt(row.speedup_vs_cpu)}× the items/s of the CPU.")
    for row in rated.itertuples(index=False):
        if _known(row.speedup_vs_baseline) and not str(row.baseline).startswith(f"{row.engine} {row.precision} "):
            shape = escape_markdown(f"{row.workload} b{row.batch_size} on {row.device}")
            variant, baseline = escape_markdown(f"{row.engine} {row.precision}"), escape_markdown(row.baseline)
            out.append(f"- {shape}: {variant} trains {fmt(row.speedup_vs_baseline)}× the items/s of the baseline "
                       f"{baseline}.")  # fmt: skip
    out += [
        "",
        "One timed call is one training iteration on a staged batch (`torch_train`: forward, loss, backward, "
        "SGD step) or one epoch over the dataset through a DataLoader (`torch_train_epoch`, end to end from "
        "host memory); items/s counts samples trained on. `× baseline`: items/s over the plain fp32 cell of "
        "the same engine, device and batch named in `baseline`.",
        "",
    ]
    for workload, frame in rated.groupby("workload", sort=False):
        out += [f"**{escape_markdown(workload)}**:", "", markdown_table(frame, TRAINING_COLUMNS), ""]
    return out


def study_heading(name: str, study: dict[str, Any]) -> list[str]:
    """A study section's title, description and question (the config's own words: escaped, so that
    they show as typed)."""
    out = [f"## Study {inline_code(name)}", ""]
    if study.get("description"):
        description = escape_markdown(study["description"])
        out += [description[:1].upper() + description[1:] + ".", ""]
    if study.get("question"):
        out += [f"**Question:** {escape_markdown(study['question'])}", ""]
    return out


def no_cells_here(study: dict[str, Any]) -> list[str]:
    needs = " (it needs a GPU)" if study.get("requires_gpu") else ""
    return [f"No cell of this study ran on this machine{needs}.", ""]


def not_ok_note(cells: pd.DataFrame) -> list[str]:
    """How many of a section's cells have no valid measurement, by status (reasons at the report's end)."""
    not_ok = cells[cells["status"] != "ok"]
    if not_ok.empty:
        return []
    counts = ", ".join(f"{n} {s}" for s, n in not_ok["status"].value_counts().items())
    return [f"Cells without a valid measurement: {counts} (reasons at the end of the report).", ""]


def study_section(
    name: str,
    study: dict[str, Any],
    summary: pd.DataFrame,
    basis: ClaimBasis,
    plots: Sequence[Path] = (),
    report_dir: Path = Path("."),
) -> list[str]:
    """The section of one study: question, the answer its layout computes from its cells, tables, plots,
    and what did not run. ``summary``: every row of the run (each layout picks its scenario's rows);
    ``basis``: what the run's claims rest on (the same for every section)."""
    cells = study_rows(summary, study)
    layout_name = study.get("layout", "engines")
    layout = LAYOUTS[layout_name]
    out = study_heading(name, study)
    if cells.empty:
        return [*out, *no_cells_here(study)]
    out += ["**Answer:**", ""]
    if (cells["status"].eq("ok") & cells["engine_impl"].ne("noop")).any():
        out += layout.answer_function()(cells, study, basis)
        if layout_name != "training":  # a study may also hold training cells: their table follows
            out += training_section(cells, study, basis)
    else:
        out += ["No cell of this study produced a valid measurement.", ""]
    for path in plots:
        if path.parent.name in study["workloads"] and path.name in layout.plots:
            out += [f"![{escape_markdown(path.parent.name)} {path.stem}]({os.path.relpath(path, report_dir)})", ""]
    return out + not_ok_note(cells)
