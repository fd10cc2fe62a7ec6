"""The Markdown report: the headline (report.headline), the decisions, one section per study
(report.studies), the method and environment, datasets and models, every cell by workload with its
plots, profiles, and the cells that did not run with their reasons."""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from inferbench.analysis.comparison import BOUNDARY_LABELS, SPREAD_CLASSES, inverted_boundaries
from inferbench.analysis.decisions import ClaimBasis
from inferbench.analysis.leases import LeaseSpread
from inferbench.analysis.summary import read_summary_csv, split_scenarios, with_scenario
from inferbench.core.fsutil import atomic_path, read_json
from inferbench.core.workloads import ordered, workload_info
from inferbench.report.headline import headline_section
from inferbench.report.roofline import roofline_section
from inferbench.report.seeds import seed_tables_section
from inferbench.report.studies import TRAINING_COLUMNS, option_steps_section, study_section, training_speedups
from inferbench.report.tables import fmt, intervals, markdown_table, recipe, rows_or_none
from inferbench.report.text import escape_markdown, inline_code

BOUNDARIES = {
    "device": "inputs staged where the engine computes before timing, outputs left there",
    "end_to_end": "host arrays in, a host float32 array out, copies to and from the device included",
}
SERVING_MEASURED = (
    "Serving cells (`server`, `offline`; their own study sections) are MLPerf LoadGen runs through a "
    "dynamic batcher in front of the engine, in one fresh process under the machine-wide lock, after the "
    "same preparation and parity check: each query is timed by LoadGen from its issue to its completion "
    "(queueing, a batch run as soon as the engine is free, padded only to the next prepared size where the "
    "engine's shapes are fixed, host-to-host copies, compute); a server cell's QPS is the highest target whose "
    "run LoadGen judged valid with p99 within the study's bound, with the lowest invalid one beside it."
)
GENERATION_MEASURED = (
    "Generation cells (a decoder answering requests token by token; their own study sections) are measured "
    "in fresh processes like every cell (`processes`, more for GPU cells found host-bound) under the "
    "machine-wide lock: each process warms up with whole requests, then times requests one after another "
    "until both the minimum time and its share of the minimum number of requests are reached; the time to "
    "first token and each further token are pooled over the processes."
)
TABLE_COLUMNS = [
    ("engine", "engine"),
    ("precision", "precision"),
    ("device", "device"),
    ("batch_size", "batch"),
    ("seq_len", "seq"),
    ("threads", "threads"),
    ("recipe", "recipe"),
    ("attention_kernel", "attention"),
    ("status", "status"),
    ("timing", "boundary"),
    ("bound", "bound"),
    ("latency_p50_ms", "p50"),
    ("latency_p50_ci95", "p50 95% CI (pooled calls)"),
    ("latency_p90_ms", "p90"),
    ("latency_p99_ms", "p99"),
    ("latency_mean_ms", "mean"),
    ("e2e_latency_p50_ms", "p50 end to end"),
    ("latency_per_item_p50_ms", "p50 per item"),
    ("throughput_per_s", "items/s"),
    ("latency_cv", "CV"),
    ("repeats", "processes"),
    ("repeat_p50_spread_pct", "spread of processes %"),
    ("energy_per_item_mj", "energy mJ/item"),
    ("n_iters", "calls"),
]


def _distinct(frame: pd.DataFrame, column: str, integer: bool = False) -> str:
    if column not in frame:
        return "–"
    present = frame[column].dropna()
    if integer:  # a column with gaps reads back as float: cuDNN 91900.0 is version 91900
        present = present.astype(int)
    values = sorted({str(v) for v in present})
    return escape_markdown(", ".join(values)) or "–"  # host and library strings from the records


def _telemetry_lines(measured: pd.DataFrame) -> list[str]:
    if "gpu_sm_clock_mean_mhz" not in measured or measured["gpu_sm_clock_mean_mhz"].dropna().empty:
        return []
    clocks, temperature = measured["gpu_sm_clock_mean_mhz"].dropna(), measured["gpu_temperature_max_c"].dropna()
    line = f"- GPU while measuring (NVML): mean SM clock per cell {clocks.min():,.0f}–{clocks.max():,.0f} MHz"
    if not temperature.empty:
        line += f", hottest {temperature.max():.0f} °C"
    return [line + "; energy per item is the board's energy counter over each cell's timed window."]


def profile_section(profiles: Sequence[dict[str, Any]]) -> list[str]:
    if not profiles:
        return []
    out = ["## Profiles", ""]
    out += [
        "Top operators of the cells named in `profile.cells`, profiled in their own job after a warm-up "
        "(never inside a timed loop). Traces are beside each table's `top_ops.json` under `results/profiles/`.",
        "",
    ]
    for profile in profiles:
        out += [f"### {escape_markdown(profile['cell_id'])}", ""]
        if profile.get("status") != "ok":
            status, reason = escape_markdown(profile.get("status")), escape_markdown(profile.get("reason"))
            out += [f"Not profiled ({status}): {reason}", ""]
            continue
        out += _ops_table(profile, profile["n_calls"])
        if profile.get("nodes"):  # ONNX Runtime on a GPU: the graph's nodes beside the kernels
            out += _ops_table(profile["nodes"], profile["n_calls"])
    return out


def _ops_table(profile: dict[str, Any], n_calls: int) -> list[str]:
    out = [
        f"{escape_markdown(profile['tool'])}, {n_calls} calls; "
        f"time = {escape_markdown(profile.get('time', '?'))}; trace {inline_code(profile.get('trace'))}."
        + (f" {escape_markdown(profile['note'])}." if profile.get("note") else "")
        + _per_call_line(profile.get("per_call")),
        "",
        "| operator | calls per run | ms per run | share |",
        "|---|---|---|---|",
    ]
    for op in profile["top_ops"]:
        name = str(op["name"]).replace("|", "/")[:90]
        share = f"{op['share']:.1%}" if op.get("share") is not None else "–"
        out.append(f"| `{name}` | {fmt(float(op['calls_per_run']))} | {fmt(float(op['ms_per_run']))} | {share} |")
    return [*out, ""]


def _per_call_line(counts: dict[str, Any] | None) -> str:
    """`` 212 kernels per call, 0.81 ms in all, 3.8 µs each on average.``; empty for a profile without it."""
    if not counts or not counts.get("count"):
        return ""
    unit = escape_markdown(counts["unit"])
    return (
        f" {fmt(float(counts['count']))} {unit} per call, {fmt(float(counts['ms']))} ms in all, "
        f"{fmt(float(counts['mean_us']))} µs each on average."
    )


_SHAPE = [("workload", "workload"), ("device", "device"), ("batch_size", "batch"), ("seq_len", "seq")]
_VARIANT = [("engine", "engine"), ("precision", "precision")]
BEST_COLUMNS = [("workload", "workload"), ("batch_size", "batch"), ("seq_len", "seq"), *_VARIANT,
                ("device", "device"), ("boundary_label", "compared"), ("p50_ms", "p50"), ("bound", "bound"),
                ("runner_up", "runner-up"), ("margin", "× ahead"), ("interval", "95% interval"),
                ("verdict", "verdict")]  # fmt: skip
SPEEDUP_COLUMNS = [*_SHAPE, *_VARIANT, ("boundary_label", "compared"), ("speedup", "×"), ("interval", "95% interval"),
                   ("verdict", "verdict"), ("processes", "processes (cell / baseline)")]  # fmt: skip
PAYBACK_COLUMNS = [*_SHAPE, *_VARIANT, ("boundary_label", "compared"), ("extra_cold_start_s", "extra start-up s"),
                   ("saved_per_call_ms", "saved per call"), ("verdict", "pays back")]  # fmt: skip
SCALING_COLUMNS = [("workload", "workload"), *_VARIANT, ("device", "device"), ("batch_size", "batch"),
                   ("exponent", "k"), ("exponent_e2e", "k end to end"), ("r2", "R²"),
                   ("points", "lengths")]  # fmt: skip


def _with_labels(frame: pd.DataFrame, column: str = "boundary") -> pd.DataFrame:
    return frame.assign(boundary_label=frame[column].map(BOUNDARY_LABELS))


def decisions_section(summary: pd.DataFrame, basis: ClaimBasis) -> list[str]:
    """The answers after the headline: fastest cell per shape with its margin, speed-ups with
    intervals, what each option adds, where the GPU starts to pay, after how many calls an
    optimisation's start-up pays back, how latency grows with length, the Pareto fronts. Every
    comparison is made at one boundary (column ``compared``)."""
    from inferbench.analysis import decisions

    best = basis.best
    if best.empty:
        return ["## Decisions", "", "No cell was measured.", ""]
    best = _with_labels(best).assign(interval=intervals(best, "margin_low", "margin_high"))
    out = ["## Decisions", "", *spread_note(basis)]
    out += [
        "**Fastest cell** per workload, batch and sequence length, against the runner-up (cells compared at "
        "the device boundary when all ran on one device and timed there, else end to end; the 95% interval of "
        "the margin counts the spread between fresh processes):",
        "",
    ]
    out += rows_or_none(best, BEST_COLUMNS)

    speed = decisions.speedups(summary, basis.floors)
    if not speed.empty:
        speed = _with_labels(speed).assign(
            interval=intervals(speed, "speedup_low", "speedup_high"),
        )
        speed = speed.sort_values("speedup", ascending=False)
        out += [
            f"**Speed-up over {decisions.BASELINE_ENGINE} {decisions.BASELINE_PRECISION}** (strict fp32; same "
            "workload, device, batch, sequence length and threads; ratio of p50s at the pair's common boundary; "
            "the 95% interval is Welch's on the processes' log p50s, so it includes the spread between fresh "
            "processes; significant when it excludes 1):",
            "",
            *rows_or_none(speed, SPEEDUP_COLUMNS),
        ]
    out += option_steps_section(summary, basis)

    crossings = decisions.cpu_gpu_crossovers(summary)
    if not crossings.empty:
        out += ["**CPU or GPU** (each device's best engine, p50 per item end to end):", ""]
        for r in crossings.itertuples():
            out.append(
                f"- {escape_markdown(r.workload)}" + (f" (seq {r.seq_len})" if r.seq_len else "") + f": {r.verdict}"
            )
        out.append("")

    payback = decisions.break_even(summary, basis.floors)
    if not payback.empty:
        out += [
            "**When start-up pays back**: extra cold start (preparation with its compile, capture or build, ONNX "
            "export and conversion, first call; library imports are timed apart and left out) over the "
            "baseline's, divided by the time saved per call at the pair's common boundary:",
            "",
            *rows_or_none(_with_labels(payback), PAYBACK_COLUMNS),
        ]
    elif "import_s" not in summary:
        out += ["**When start-up pays back**: not computed: these records' cold start includes the library "
                "imports, which vary by seconds from process to process (records made since they are timed "
                "apart have `import_s`).", ""]  # fmt: skip

    scaling = decisions.seq_scaling(summary)
    if not scaling.empty:
        out += [
            "**Sequence-length scaling** (p50 at each engine's own boundary ∝ length^k, least squares in log-log; "
            f"no exponent from fewer than {decisions.MIN_SCALING_LENGTHS} lengths):",
            "",
        ]
        out += rows_or_none(scaling, SCALING_COLUMNS)

    out += ["**Latency/throughput Pareto front** (no other cell is both faster and higher-throughput), "
            "lowest latency first:", ""]  # fmt: skip
    for workload, cells in decisions.measured(summary).groupby("workload", sort=False):
        boundary, front = decisions.workload_front(cells)
        points = ", ".join(f"{r.engine} {r.precision} {r.device} b{r.batch_size}" for r in front.itertuples())
        out.append(f"- {escape_markdown(workload)} ({BOUNDARY_LABELS[boundary]}): {escape_markdown(points)}")
    return [*out, ""]


def spread_note(basis: ClaimBasis) -> list[str]:
    """How far this run's processes spread, per class, and how far cells move between leases: what every
    interval below is built on."""
    floors = basis.floors
    parts = [
        f"{SPREAD_CLASSES[name]} {floor.pct:.1f}% ({floor.cells} cells, {floor.df:.0f} degrees of freedom)"
        for (name, boundary), floor in sorted(floors.floors.items())
        if boundary == "device"
    ]
    if not parts:
        return ["Every cell was measured in one process: the spread between processes is unknown, and no "
                "difference below is called significant.", ""]  # fmt: skip
    leases = (
        f"Every interval also counts how far each class moves from one lease to the next, {floors.leases.describe()}: "
        "a claim called significant held across them."
        if floors.leases is not None
        else "The intervals rest on this lease alone: a cell may move further on another machine or day (host-bound "
        "GPU cells and CPU cells most); a claim meant for the next lease needs runs from two leases "
        "(`inferbench compare --out-leases`, config `report.lease_spread`)."
    )
    return [
        "Spread of p50 between fresh processes, pooled over this run's cells (one standard deviation): "
        + "; ".join(parts)
        + ". A cell's spread is taken as at least its class's: cells whose time follows the host's CPU share "
        "its drift, which one cell's processes, seconds apart, do not show. " + leases,
        "",
    ]


INVERTED_COLUMNS = [
    ("cell", "cell"),
    ("bound", "bound"),
    ("latency_p50_ms", "device p50"),
    ("e2e_latency_p50_ms", "p50 end to end"),
    ("e2e_over_device", "end to end / device"),
    ("beyond", "beyond the 95% intervals"),
    ("repeats", "processes"),
]


def _cell_key(row: Any) -> str:
    """A cell named by its whole key (its scenario where it is not single calls)."""
    scenario = getattr(row, "scenario", "single")
    return (
        f"{row.workload} {row.engine} {row.precision} {row.device} b{row.batch_size} s{row.seq_len} t{row.threads}"
        + ("" if scenario == "single" else f" {scenario}")
    )


def _cells(count: int, more: str = "") -> str:
    return f"{count} {more}cell" + ("" if count == 1 else "s")


def inverted_boundaries_section(summary: pd.DataFrame) -> list[str]:
    """The cells whose end-to-end p50 is below their device p50 (inferbench.analysis.comparison): a table of
    those beyond the two p50s' intervals or without intervals, a count of those within them (their
    order is noise)."""
    inverted = inverted_boundaries(summary)
    if inverted.empty:
        return []
    within = inverted["beyond_intervals"].eq(False)
    listed = inverted[~within]
    out = ["## Cells timed faster end to end than on the device", ""]
    if not listed.empty:
        cells = [_cell_key(r) for r in listed.itertuples(index=False)]
        judged = ["yes" if beyond else "no intervals" for beyond in listed["beyond_intervals"]]
        out += [
            f"In {_cells(len(listed))} the end-to-end p50 (host arrays in and out) is below the device p50 "
            "(inputs already staged) beyond the two p50s' 95% intervals, or with no intervals to judge it by. "
            "One cell cannot do that: the host differed between the two boundaries' calls, or their loops "
            "cost it differently. Read either figure with care.",
            "",
            markdown_table(listed.assign(cell=cells, beyond=judged), INVERTED_COLUMNS),
            "",
        ]
    if within.any():
        out += [
            f"In {_cells(int(within.sum()), 'more ' if not listed.empty else '')} the end-to-end p50 is below the "
            "device p50 within the two p50s' 95% intervals: their order is noise (on the CPU the two boundaries "
            "differ by a copy at most).",
            "",
        ]
    return out


def build_report(
    summary: pd.DataFrame,
    plots: Sequence[Path] = (),
    model_meta: Sequence[dict[str, Any]] = (),
    dataset_stats: Sequence[dict[str, Any]] = (),
    report_dir: Path = Path("results"),
    profiles: Sequence[dict[str, Any]] = (),
    studies: dict[str, dict[str, Any]] | None = None,
    roofline: pd.DataFrame | None = None,
    leases: LeaseSpread | None = None,
) -> str:
    """The report: decisions first, then one section per study of the run (``studies``: name -> study
    config with devices resolved), the method and environment, every cell by workload, profiles, and
    the cells that did not produce a valid measurement. Every claim in it is judged alike
    (inferbench.analysis.verdicts), over the whole run's spread per class, and with ``leases`` (the
    spread between leases of earlier runs) over the next lease's too."""
    everything = with_scenario(summary)
    # serving cells (LoadGen) have their own sections: their latency includes queueing
    frames = split_scenarios(everything)
    # generation cells (a request, token by token) have theirs: their study section (report.generation)
    summary, serving, generation = (
        pd.concat([frames.single, frames.training], ignore_index=True),
        frames.serving,
        frames.generation,
    )
    counts = everything["status"].value_counts().to_dict()
    measured = summary[summary["status"].isin(["ok", "invalid"])]
    basis = ClaimBasis.of(summary, leases)
    out = [
        "# inferbench report",
        "",
        f"Generated {datetime.now(UTC).isoformat(timespec='seconds')} from {len(everything)} cells: "
        + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        + ".",
        "",
        *headline_section(summary, basis),
        # (serving and generation cells answer in their studies' sections, with yardsticks of their own)
        *(decisions_section(summary, basis) if not summary.empty or (serving.empty and generation.empty) else []),
    ]
    plot_paths = [Path(p) for p in plots]
    for name, study in (studies or {}).items():
        out += study_section(name, study, everything, basis, plot_paths, report_dir)
    out += seed_tables_section(everything, studies or {}, basis)
    what = []
    if not summary.empty:
        what += [
            "Each cell is one engine running one workload at one precision, device, batch size, sequence length "
            "and CPU thread count, measured in fresh processes (`processes`; more for GPU cells found host-bound) "
            "while no other job of the workflow measures (machine-wide lock); library imports happen once, "
            "before the processes fork, and are timed apart. In each process, after a warm-up, calls are timed "
            "one at a time until both the minimum time and the process's share of the minimum number of calls "
            "are reached; on the host clock every call is synchronised before the clock is read; on a GPU CUDA events "
            "bracket each call on the engine's stream, the next call queued while the device runs it. Each cell is "
            "timed at its engine's boundary (the p50 ... columns) and end to end on the host clock "
            "(`end_to_end`: host arrays in, a host array out), in alternating rounds of each (device, end to end, "
            "end to end, device, ...), unless its engine's boundary is already end to end; GPU telemetry is read "
            "only at the two ends of each round of device-boundary calls. Boundaries of the ok cells here: "
            + "; ".join(
                f"`{t}`: {BOUNDARIES.get(t, 'see the records')}" for t in sorted(measured["timing"].dropna().unique())
            )
            + ". Percentiles and CIs pool the calls of all processes; percentiles from fewer calls than they need "
            "(p90: 10, p95: 20, p99: 100) are shown as –; `calls` is the number of timed calls. `bound` (GPU "
            "cells): `host` when the GPU waited for the thread launching its kernels (an asynchronous `run` that "
            "returns at >= 50% of the call, or, for engines whose `run` waits for the GPU, the GPU busy < 70% of "
            "the loop), `device` otherwise. `recipe`: "
            "what the cell computes with (graph, precision and how it is reached, TF32 or strict fp32, "
            "channels-last, CUDA graph, IO binding).",
        ]
    if not serving.empty:
        what += [SERVING_MEASURED]
    if not generation.empty:
        what += [GENERATION_MEASURED]
    out += [
        *(["## What was measured", ""] if what else []),
        *(line for text in what for line in (text, "")),
        "## Environment",
        "",
        f"- host: {_distinct(everything, 'hostname')}",
        f"- CPU: {_distinct(everything, 'cpu')}",
        f"- GPU: {_distinct(everything, 'gpu')}",
        f"- Python {_distinct(everything, 'python')}, torch {_distinct(everything, 'torch')}, "
        f"onnxruntime {_distinct(everything, 'onnxruntime')}"
        + (
            f", openvino {_distinct(everything, 'openvino')}"
            if everything.get("openvino", pd.Series()).notna().any()
            else ""
        ),
        f"- GPU driver {_distinct(everything, 'gpu_driver')}, CUDA {_distinct(everything, 'cuda')}, "
        f"cuDNN {_distinct(everything, 'cudnn', integer=True)}; inferbench commit {_distinct(everything, 'git_commit')}"
        + (" with uncommitted changes" if "git_dirty" in everything and everything["git_dirty"].eq(True).any() else ""),
        *_telemetry_lines(measured),
        "",
    ]
    if dataset_stats:
        out += [
            "## Datasets",
            "",
            "| dataset | source | raw rows | rows after cleaning | rows used for training | positive rate | features |",
            "|---|---|---|---|---|---|---|",
        ]
        for s in dataset_stats:
            used = s.get("rows_used", s["rows_clean"])
            name, source = escape_markdown(s["dataset"]), escape_markdown(s.get("source", "–"))
            out.append(
                f"| {name} | {source} | {s['rows_raw']:,} | {s['rows_clean']:,} | {used:,} | "
                f"{fmt(s['positive_rate'])} | {s['n_features']} |"
            )
        out += ["", "Positive rate: share of the target class (charged off; heart disease) in the rows used.", ""]
    if model_meta:
        out += [
            "## Models",
            "",
            "| model | parameters | held-out AUC | held-out accuracy | test rows |",
            "|---|---|---|---|---|",
        ]
        for m in model_meta:
            t = m.get("training") or {}
            out.append(
                f"| {escape_markdown(m['name'])} | {m['n_params']:,} | {fmt(t.get('test_auc'))} | "
                f"{fmt(t.get('test_accuracy'))} | {fmt(t.get('n_test'))} |"
            )
        out += ["", "Models other than the MLPs have random weights: latency does not depend on the values.", ""]

    inference = frames.single
    inference = inference.assign(recipe=[recipe(r) for _, r in inference.iterrows()])
    if not inference.empty:
        out += ["## All cells by workload", ""]
    for workload in ordered(inference["workload"]):
        cells = inference[inference["workload"] == workload]
        out += [
            f"### {escape_markdown(workload)}",
            "",
            escape_markdown(workload_info(workload).description) + ".",
            "",
            markdown_table(cells, TABLE_COLUMNS),
            "",
        ]
        for path in plot_paths:
            if path.parent.name == workload:
                rel = os.path.relpath(path, report_dir)
                out += [f"![{escape_markdown(workload)} {path.stem}]({rel})", ""]

    training = frames.training
    if not training.empty:
        out += [
            "### Training",
            "",
            "One timed call is one training iteration on a staged batch (`torch_train*` variants: forward, "
            "loss, backward, SGD step), or one epoch over the dataset through a DataLoader "
            "(`torch_train_epoch`, end to end from host memory); items/s counts samples trained on.",
            "",
        ]
        for workload, cells in training_speedups(training).groupby("workload", sort=False):
            out += [f"#### {escape_markdown(workload)}", "", markdown_table(cells, TRAINING_COLUMNS), ""]
    out += profile_section(profiles)
    out += roofline_section(roofline)

    out += inverted_boundaries_section(summary)
    not_ok = everything[everything["status"] != "ok"]
    out += ["## Cells that did not produce a valid measurement", ""]
    if not_ok.empty:
        out += ["None: every cell is `ok`.", ""]
    else:
        for status, group in not_ok.groupby("status"):
            out += [f"### {escape_markdown(status)}", "", "| cell | reason |", "|---|---|"]
            for row in group.itertuples(index=False):
                cell = _cell_key(row)
                reason = str(row.reason).splitlines()[0][:300]  # cut before escaping: no reference is cut in two
                out.append(f"| {escape_markdown(cell)} | {escape_markdown(reason)} |")
            out.append("")
    return "\n".join(out)


def write_report(
    summary_csv: str | Path,
    out: str | Path,
    plots: Sequence[Path] = (),
    model_meta: Sequence[Path] = (),
    dataset_stats: Sequence[Path] = (),
    profiles: Sequence[Path] = (),
    studies: dict[str, dict[str, Any]] | None = None,
    roofline: Sequence[Path] = (),
    lease_spread: Path | None = None,
) -> None:
    summary = read_summary_csv(summary_csv)
    roofline_table = pd.concat([pd.read_csv(p) for p in roofline]) if roofline else None
    text = build_report(
        summary,
        plots,
        [read_json(p) for p in model_meta],
        [read_json(p) for p in dataset_stats],
        Path(out).parent,
        [read_json(p) for p in profiles],
        studies,
        roofline_table,
        LeaseSpread.load(lease_spread) if lease_spread else None,
    )
    with atomic_path(out) as tmp:
        tmp.write_text(text + "\n")
