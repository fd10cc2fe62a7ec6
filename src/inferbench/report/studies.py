"""One report section per study of the run: its question, the answer computed from its cells, and its
tables in the shape of the study it reproduces (``layout`` in the study's config).

A summary row belongs to a study when every axis of the row is one of the study's values (devices as
resolved where the workflow ran; sequence length 0 for non-text workloads, threads 0 on the GPU),
the same rule that made the study's cells (inferbench.grid).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from inferbench.analysis import decisions
from inferbench.report.tables import fmt, intervals, markdown_table
from inferbench.workloads import WORKLOADS

#: plots shown in a study's section, by layout (the files are made per workload, see report.plots)
LAYOUT_PLOTS = {
    "by_batch": ["latency_per_item.png", "throughput.png"],
    "engines": ["throughput.png"],
    "seq": ["latency_vs_seq.png", "latency_per_item.png"],
    "training": [],
}


def study_rows(summary: pd.DataFrame, study: dict[str, Any]) -> pd.DataFrame:
    """The summary rows that are cells of ``study`` (its ``devices`` already resolved: no ``auto``)."""
    text = summary["workload"].map(lambda w: WORKLOADS[w].has_seq_len if w in WORKLOADS else False)
    mask = (
        summary["workload"].isin(study["workloads"])
        & summary["engine"].isin(study["engines"])
        & summary["precision"].isin(study.get("precisions", ["fp32"]))
        & summary["device"].isin(study["devices"])
        & summary["batch_size"].isin(study["batch_sizes"])
        & summary["seq_len"].where(text, -1).isin([*study.get("seq_lens", [128]), -1])
        & (~text | (summary["seq_len"] > 0))
        & (~summary["device"].eq("cpu") | summary["threads"].isin(study.get("threads", [2])))
        & (summary["device"].eq("cpu") | summary["threads"].eq(0))
    )
    return summary[mask]


def _label(row: Any) -> str:
    return f"{row.engine} {row.precision} {row.device}" + (f" {row.threads}t" if row.device == "cpu" else "")


def _pivot(frame: pd.DataFrame, index: Sequence[tuple[str, str]], value: str) -> str:
    """A table with one row per ``index`` value and one column per engine variant (its label)."""
    frame = frame.assign(label=[_label(r) for r in frame.itertuples(index=False)])
    table = frame.pivot_table(index=[c for c, _ in index], columns="label", values=value, aggfunc="first")
    table = table.reindex(sorted(table.columns), axis=1)
    lines = ["| " + " | ".join([*(t for _, t in index), *table.columns]) + " |"]
    lines.append("|" + "|".join("---" for _ in range(len(index) + len(table.columns))) + "|")
    for key, values in table.iterrows():
        key = key if isinstance(key, tuple) else (key,)
        lines.append("| " + " | ".join([*(fmt(k) for k in key), *(fmt(v) for v in values)]) + " |")
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
        return [f"- Only {devices[0]} cells were measured in this run: {what} needs both devices."]
    return []


def by_batch_section(cells: pd.DataFrame) -> list[str]:
    """Latency per item against batch size, one column per engine variant, and the CPU/GPU crossover."""
    ok = decisions.measured(cells)
    out: list[str] = _one_device_note(ok, "the CPU/GPU crossover")
    for verdict in decisions.cpu_gpu_crossovers(cells).itertuples():
        out.append(f"- **{verdict.workload}**: {verdict.verdict} (end-to-end p50 per item, each device's best engine).")
    ok = ok.assign(per_item_ms=decisions.e2e_per_item_ms(ok))
    for workload, frame in ok.groupby("workload", sort=False):
        best = frame.loc[frame.groupby("batch_size")["per_item_ms"].idxmin()]
        fastest = "; ".join(f"b{r.batch_size}: {r.engine} {r.precision} {r.device}" for r in best.itertuples())
        out.append(f"- **{workload}**, fastest per item at each batch: {fastest}.")
    out.append("")
    for workload, frame in ok.groupby("workload", sort=False):
        out += [
            f"**{workload}: end-to-end p50 per item (ms)**: host arrays in, host arrays out, divided by the batch.",
            "",
            _pivot(frame, [("batch_size", "batch")], "per_item_ms"),
            "",
            f"**{workload}: items/s** (at each engine's own boundary):",
            "",
            _pivot(frame, [("batch_size", "batch")], "throughput_per_s"),
            "",
        ]
    return out


ENGINE_COLUMNS = [
    ("engine", "engine"),
    ("precision", "precision"),
    ("device", "device"),
    ("latency_mean_ms", "mean ms"),
    ("latency_p50_ms", "p50 ms"),
    ("latency_p95_ms", "p95 ms"),
    ("latency_p99_ms", "p99 ms"),
    ("throughput_per_s", "items/s"),
    ("peak_mb", "peak MB"),
    ("speedup", "× FP32 eager"),
    ("speedup_interval", "interval"),
    ("own_fp32", "× own fp32"),
]


def own_fp32_ratio(ok: pd.DataFrame) -> pd.Series:
    """p50 of the same engine variant at fp32 (same workload, device, batch, length, threads) over the
    cell's p50: what a lower precision buys that engine (e.g. ORT int8 against ORT fp32)."""
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


def engines_section(cells: pd.DataFrame) -> list[str]:
    """Engines and precisions side by side per workload, batch and sequence length."""
    ok = decisions.measured(cells)
    speed = decisions.speedups(cells)
    key = ["workload", "device", "batch_size", "seq_len", "threads", "engine", "precision"]
    if not speed.empty:
        speed = speed.assign(speedup_interval=intervals(speed, "speedup_low", "speedup_high"))
        ok = ok.merge(speed[[*key, "speedup", "speedup_interval"]], on=key, how="left")
    ok = ok.assign(peak_mb=_peak_mb(ok), own_fp32=own_fp32_ratio(ok))
    out: list[str] = []
    for (workload, batch, seq), frame in ok.groupby(["workload", "batch_size", "seq_len"], sort=True):
        best = frame.loc[frame["latency_p50_ms"].idxmin()]
        gains = []
        if _known(best.get("speedup")):
            gains.append(f"{fmt(float(best['speedup']))}× FP32 eager")
        if _known(best.get("own_fp32")):
            gains.append(f"{fmt(float(best['own_fp32']))}× its own fp32")
        shape = f"{workload} b{batch}" + (f" s{seq}" if seq else "")
        variant = f"{best['engine']} {best['precision']} {best['device']}"
        out.append(f"- **{shape}**: fastest {variant}" + "".join(f", {g}" for g in gains) + ".")
    out.append("")
    for (workload, batch, seq), frame in ok.groupby(["workload", "batch_size", "seq_len"], sort=True):
        shape = f"{workload}, batch {batch}" + (f", sequence {seq}" if seq else "")
        table = markdown_table(frame.sort_values("latency_p50_ms"), ENGINE_COLUMNS)
        out += [f"**{shape}** (latencies at each engine's timing boundary):", "", table, ""]
    out += [
        "`peak MB`: the process's GPU memory from NVML (the allocator's peak where NVML has none) for GPU "
        "cells, resident host memory for CPU cells. `× FP32 eager`: p50 of torch_eager fp32 on the same "
        "device and shape over this cell's, with an interval from both 95% CIs; `× own fp32`: the same "
        "engine variant's fp32 p50 over this cell's.",
        "",
    ]
    return out


SEQ_COLUMNS = [
    ("batch_size", "batch"),
    ("seq_len", "seq"),
    ("engine", "engine"),
    ("device", "device"),
    ("threads", "threads"),
    ("latency_p50_ms", "p50 ms"),
    ("latency_p90_ms", "p90 ms"),
    ("latency_p99_ms", "p99 ms"),
    ("e2e_latency_p50_ms", "end-to-end p50 ms"),
    ("throughput_per_s", "items/s"),
]
GAP_COLUMNS = [("workload", "workload"), ("batch_size", "batch"), ("seq_len", "seq"), ("cpu", "best CPU ms"),
               ("cuda", "best GPU ms"), ("gap", "CPU / GPU")]  # fmt: skip


def cpu_gpu_gap(cells: pd.DataFrame) -> pd.DataFrame:
    """Per workload, batch and sequence length: each device's best end-to-end p50 and their ratio."""
    ok = decisions.measured(cells)
    shape = ["workload", "batch_size", "seq_len", "device"]
    best = ok.assign(e2e=decisions.e2e_p50_ms(ok)).groupby(shape)["e2e"].min().unstack("device")
    if not {"cpu", "cuda"} <= set(best.columns):
        return pd.DataFrame(columns=[c for c, _ in GAP_COLUMNS])
    best = best[["cpu", "cuda"]].dropna().reset_index()
    return best.assign(gap=best["cpu"] / best["cuda"])


def seq_section(cells: pd.DataFrame) -> list[str]:
    """Latency against batch and sequence length, the scaling exponent per series, the CPU/GPU gap."""
    ok = decisions.measured(cells)
    scaling = decisions.seq_scaling(cells)
    gap = cpu_gpu_gap(cells)
    out: list[str] = _one_device_note(ok, "the CPU/GPU gap")
    if not scaling.empty:
        for (workload, device), series in scaling.groupby(["workload", "device"], sort=False):
            low, high = series["exponent"].min(), series["exponent"].max()
            spread = f"{fmt(low)}" if abs(high - low) < 0.005 else f"{fmt(low)} to {fmt(high)}"
            out.append(f"- **{workload} on {device}**: p50 grows as length^k, k = {spread} ({len(series)} series).")
    if not gap.empty:
        for workload, frame in gap.groupby("workload", sort=False):
            out.append(
                f"- **{workload}**: the GPU is {fmt(frame['gap'].min())}× to {fmt(frame['gap'].max())}× faster than "
                "the CPU end to end (each device's best engine)."
            )
    out.append("")
    for workload, frame in ok.groupby("workload", sort=False):
        frame = frame.sort_values(["batch_size", "seq_len", "device", "engine"])
        out += [f"**{workload}** (p50/p90/p99 at the engine's boundary):", "", markdown_table(frame, SEQ_COLUMNS), ""]
    if not scaling.empty:
        columns = [("workload", "workload"), ("engine", "engine"), ("device", "device"), ("batch_size", "batch"),
                   ("exponent", "k"), ("r2", "R²"), ("points", "lengths")]  # fmt: skip
        out += ["**Scaling exponent** (p50 ∝ length^k, least squares in log-log):", ""]
        out += [markdown_table(scaling, columns), ""]
    if not gap.empty:
        out += ["**CPU/GPU gap** (end to end):", "", markdown_table(gap, GAP_COLUMNS), ""]
    return out


TRAINING_COLUMNS = [
    ("engine", "engine"),
    ("precision", "precision"),
    ("device", "device"),
    ("batch_size", "batch"),
    ("status", "status"),
    ("latency_p50_ms", "p50 ms per call"),
    ("latency_p50_ci95", "p50 95% CI"),
    ("items_per_call", "items per call"),
    ("throughput_per_s", "items/s"),
    ("speedup_vs_cpu", "GPU/CPU speed-up"),
    ("speedup_vs_fp32", "× baseline"),
    ("baseline", "baseline"),
    ("energy_per_item_mj", "energy mJ/item"),
    ("n_iters", "n"),
]


def training_speedups(cells: pd.DataFrame) -> pd.DataFrame:
    """Training cells with two ratios of items/s: against the same cell on the CPU (``speedup_vs_cpu``),
    and against the slowest fp32 cell of the same workload, engine implementation, device and batch
    (``speedup_vs_fp32``, that cell's variant in ``baseline``): e.g. AMP + channels-last + compile over
    the fp32 step, or the plain epoch loop against the DataLoader options."""
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
    fp32 = ok[ok["precision"] == "fp32"]
    slowest = fp32.loc[fp32.groupby(group)["throughput_per_s"].idxmin()].set_index(group) if not fp32.empty else fp32
    ratios, baselines = [], []
    for row in cells.itertuples(index=False):
        key = tuple(getattr(row, c) for c in group)
        if row.status == "ok" and key in slowest.index:
            ratios.append(row.throughput_per_s / slowest.loc[key, "throughput_per_s"])
            baselines.append(f"{slowest.loc[key, 'engine']} fp32")
        else:
            ratios.append(None)
            baselines.append(None)
    return cells.assign(speedup_vs_fp32=ratios, baseline=baselines)


def _known(value: Any) -> bool:
    return value is not None and not pd.isna(value)


def training_section(cells: pd.DataFrame) -> list[str]:
    """Time per training iteration or epoch, with the GPU/CPU and optimised/baseline speed-ups."""
    training = cells[cells["mode"] == "train"] if "mode" in cells else cells.iloc[0:0]
    if training.empty:
        return []
    rated = training_speedups(training)
    out: list[str] = []
    for row in rated.itertuples(index=False):
        if _known(row.speedup_vs_cpu):
            out.append(f"- {row.workload} {row.engine} {row.precision} b{row.batch_size}: the GPU trains "
                       f"{fmt(row.speedup_vs_cpu)}× the items/s of the CPU.")  # fmt: skip
    for row in rated.itertuples(index=False):
        if _known(row.speedup_vs_fp32) and row.baseline != f"{row.engine} {row.precision}":
            out.append(f"- {row.workload} b{row.batch_size} on {row.device}: {row.engine} {row.precision} trains "
                       f"{fmt(row.speedup_vs_fp32)}× the items/s of {row.baseline}.")  # fmt: skip
    out += [
        "",
        "One timed call is one training iteration on a staged batch (`torch_train`: forward, loss, backward, "
        "SGD step) or one epoch over the dataset through a DataLoader (`torch_train_epoch`, end to end from "
        "host memory); items/s counts samples trained on. `× baseline`: items/s over the slowest fp32 variant "
        "of the same engine, device and batch.",
        "",
    ]
    for workload, frame in rated.groupby("workload", sort=False):
        out += [f"**{workload}**:", "", markdown_table(frame, TRAINING_COLUMNS), ""]
    return out


LAYOUTS: dict[str, Callable[[pd.DataFrame], list[str]]] = {
    "by_batch": by_batch_section,
    "engines": engines_section,
    "seq": seq_section,
    "training": training_section,
}


def study_section(
    name: str, study: dict[str, Any], summary: pd.DataFrame, plots: Sequence[Path] = (), report_dir: Path = Path(".")
) -> list[str]:
    """The section of one study: question, computed answer, tables, plots, and what did not run."""
    cells = study_rows(summary, study)
    layout = study.get("layout", "engines")
    out = [f"## Study `{name}`", ""]
    if study.get("description"):
        out += [study["description"][0].upper() + study["description"][1:] + ".", ""]
    if study.get("question"):
        out += [f"**Question:** {study['question']}", ""]
    if cells.empty:
        needs = " (it needs a GPU)" if study.get("requires_gpu") else ""
        return [*out, f"No cell of this study ran on this machine{needs}.", ""]
    out += ["**Answer:**", ""]
    answer = LAYOUTS[layout](cells)
    if layout != "training":  # a study may also hold training cells: their table follows
        answer += training_section(cells)
    if not decisions.measured(cells).empty or layout == "training":
        out += answer
    else:
        out += ["No cell of this study produced a valid measurement.", ""]
    for path in plots:
        if path.parent.name in study["workloads"] and path.name in LAYOUT_PLOTS[layout]:
            out += [f"![{path.parent.name} {path.stem}]({os.path.relpath(path, report_dir)})", ""]
    not_ok = cells[cells["status"] != "ok"]
    if not not_ok.empty:
        counts = ", ".join(f"{n} {s}" for s, n in not_ok["status"].value_counts().items())
        out += [f"Cells without a valid measurement: {counts} (reasons at the end of the report).", ""]
    return out
