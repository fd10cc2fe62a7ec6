"""The Markdown report, in two files: ``report.md``, the first page (each study's question and answer,
what was not measured here and why, where the numbers come from: inferbench.report.answers), and
``report_details.md``, the detail per cell (method, environment, datasets and models, every cell by
workload, training, generation and serving tables, start-up payback, profiles, roofline, the cells without
a valid measurement and their reasons)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from inferbench.analysis import decisions
from inferbench.analysis.comparison import BOUNDARY_LABELS, inverted_boundaries, rate_at
from inferbench.analysis.decisions import ClaimBasis
from inferbench.analysis.leases import LeaseSpread
from inferbench.analysis.summary import split_scenarios, with_scenario
from inferbench.analysis.summary_checks import REMAKE_FROM_RECORDS, checked_summary, read_summary
from inferbench.catalog.scenarios import GENERATION, PLAIN, SCENARIOS, scenario_plots
from inferbench.catalog.targets import load_target
from inferbench.catalog.workloads import ordered, workload_info
from inferbench.core.fsutil import atomic_path, read_json
from inferbench.report.answers import answers_section, not_measured_section, summary_line
from inferbench.report.provenance import git_states, libraries_text, package_text, provenance_section
from inferbench.report.roofline import roofline_section
from inferbench.report.studies import TRAINING_COLUMNS, training_speedups
from inferbench.report.tables import distinct, fmt, markdown_table, recipe
from inferbench.report.text import escape_markdown, inline_code, prose_with_code

#: the appendix beside report.md
DETAILS_NAME = "report_details.md"
BOUNDARIES = {
    "device": "inputs staged where the engine computes before timing, outputs left there",
    "end_to_end": "host arrays in, a host float32 array out, copies to and from the device included",
}
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
    ("repeat_p50_min_ms", "lowest process p50"),
    ("repeat_p50_max_ms", "highest process p50"),
    ("latency_p90_ms", "p90"),
    ("latency_p99_ms", "p99"),
    ("latency_mean_ms", "mean"),
    ("e2e_latency_p50_ms", "p50 end to end"),
    ("latency_per_item_p50_ms", "p50 per item"),
    ("items_per_s", "items/s"),
    ("latency_cv", "CV"),
    ("repeats", "processes"),
    ("repeat_p50_spread_pct", "spread of processes %"),
    ("energy_per_item_mj", "energy mJ/item"),
    ("n_iters", "calls"),
]


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
            status, reason = escape_markdown(profile.get("status")), prose_with_code(profile.get("reason"))
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


PAYBACK_COLUMNS = [("workload", "workload"), ("device", "device"), ("batch_size", "batch"), ("seq_len", "seq"),
                   ("engine", "engine"), ("precision", "precision"), ("boundary_label", "compared"),
                   ("extra_cold_start_s", "extra start-up s"), ("saved_per_call_ms", "saved per call"),
                   ("verdict", "pays back")]  # fmt: skip


def payback_section(summary: pd.DataFrame, basis: ClaimBasis) -> list[str]:
    """After how many calls each engine's extra start-up over FP32 eager pays back (decisions.break_even)."""
    payback = decisions.break_even(summary, basis.classes)
    if payback.empty:
        return []
    return [
        "## When start-up pays back",
        "",
        "Extra cold start (preparation with its compile, capture or build, ONNX export and conversion, first "
        "call; library imports left out) over FP32 eager's, divided by the time saved per call:",
        "",
        markdown_table(payback.assign(boundary_label=payback["boundary"].map(BOUNDARY_LABELS)), PAYBACK_COLUMNS),
        "",
    ]


def _inference_and_training(everything: pd.DataFrame) -> pd.DataFrame:
    frames = split_scenarios(everything)
    return pd.concat([frames.single, frames.training], ignore_index=True)


def whole_run_study(everything: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """The one study a report made without the run's studies answers: every cell, engines side by side."""
    axes = {"workloads": "workload", "engines": "engine", "precisions": "precision", "devices": "device",
            "batch_sizes": "batch_size", "seq_lens": "seq_len", "threads": "threads",
            "scenarios": "scenario"}  # fmt: skip
    study = {key: sorted(set(everything[column])) for key, column in axes.items()}
    return {"all": {**study, "question": "how do the cells of this run compare?", "layout": "engines"}}


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
    """The report's first page: each study's question and answer (``studies``: name -> study config with
    devices resolved; without them, one study of every cell), what was not measured here and why, and
    where the numbers come from. Every claim is judged alike (inferbench.analysis.verdicts), over the whole
    run's spread per class, and with ``leases`` (the spread between leases of earlier runs) over the next
    lease's too. The detail per cell is ``build_details``'s."""
    everything = with_scenario(summary)
    basis = ClaimBasis.of(_inference_and_training(everything), leases)
    studies = studies or whole_run_study(everything)
    out = [
        "# inferbench report",
        "",
        f"{summary_line(everything)} Each answer below comes from its study's own cells. Detail per cell: "
        f"[{DETAILS_NAME}]({DETAILS_NAME}); every figure: `summary.csv`.",
        "",
        *answers_section(everything, studies, basis, [Path(p) for p in plots], report_dir),
        *quality_lines(model_meta),
        *not_measured_section(everything, studies),
        *provenance_section(everything, studies, basis, dataset_stats),
    ]
    return "\n".join(out)


def quality_lines(model_meta: Sequence[dict[str, Any]]) -> list[str]:
    """The trained models' held-out quality (random-weight models have none to report)."""
    trained = [m for m in model_meta if (m.get("training") or {}).get("test_auc") is not None]
    if not trained:
        return []
    models = "; ".join(
        f"{escape_markdown(m['name'])} AUC {fmt(m['training']['test_auc'])} on {fmt(m['training'].get('n_test'))} rows"
        for m in trained
    )
    return [
        "## Quality",
        "",
        f"Held-out AUC of the trained MLPs (fp32, as trained): {models}. On generated data it shows that training "
        "ran, not how well a model scores real loans or patients. Every cell above passed the parity "
        "gate against FP32 eager: the engines tables give its relative L2 error and, for an MLP, the held-out AUC "
        "as it ran.",
        "",
    ]


def build_details(
    summary: pd.DataFrame,
    plots: Sequence[Path] = (),
    model_meta: Sequence[dict[str, Any]] = (),
    dataset_stats: Sequence[dict[str, Any]] = (),
    report_dir: Path = Path("results"),
    profiles: Sequence[dict[str, Any]] = (),
    roofline: pd.DataFrame | None = None,
    leases: LeaseSpread | None = None,
) -> str:
    """The report's appendix: what was measured and how, every cell by workload, training, generation and
    serving tables, start-up payback, profiles, the roofline, cells whose boundaries invert, and every cell
    without a valid measurement with its full reason."""
    everything = with_scenario(summary)
    frames = split_scenarios(everything)
    inference_and_training = _inference_and_training(everything)
    basis = ClaimBasis.of(inference_and_training, leases)
    measured = inference_and_training[inference_and_training["status"].isin(["ok", "invalid"])]
    out = ["# inferbench report: detail per cell", "", "The answers are in [report.md](report.md).", ""]
    out += method_section(measured, frames)
    out += environment_section(everything, measured)
    out += datasets_section(dataset_stats) + models_section(model_meta)
    inference = frames.single
    inference = inference.assign(
        recipe=[recipe(r) for _, r in inference.iterrows()], items_per_s=rate_at(inference, "device")
    )
    if not inference.empty:
        out += ["## Every cell by workload", ""]
    answering = scenario_plots()  # shown where they answer a study, on the first page
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
        # linked, not shown: the first page shows each plot that answers a study, once
        links = [f"[{path.stem}]({os.path.relpath(path, report_dir)})" for path in map(Path, plots)
                 if path.parent.name == workload and path.name not in answering]  # fmt: skip
        out += [f"Plots: {', '.join(links)}.", ""] if links else []
    if not frames.training.empty:
        out += ["## Training", "", TRAINING_MEASURED, ""]
        for workload, cells in training_speedups(frames.training, classes=basis.classes).groupby(
            "workload", sort=False
        ):
            out += [f"### {escape_markdown(workload)}", "", markdown_table(cells, TRAINING_COLUMNS), ""]
    # a decoder's requests one at a time; then each section a scenario declares, once for the scenarios that share
    # it (LoadGen's server and offline; a decoder under load: every load of each sweep, from the records and tables
    # beside the summary)
    sections = own_sections()
    one_at_a_time = _one_request_at_a_time(frames)
    if not one_at_a_time.empty:
        out += load_target(GENERATION.details)(one_at_a_time, report_dir)
    for section, names in sections.items():
        rows = everything[everything["scenario"].isin(names)]
        out += load_target(section)(rows, report_dir) if not rows.empty else []
    out += payback_section(inference_and_training, basis)
    out += profile_section(profiles)
    out += roofline_section(roofline)
    out += inverted_boundaries_section(inference_and_training)
    not_ok = everything[everything["status"] != "ok"]
    if not not_ok.empty:
        out += ["## Cells without a valid measurement", ""]
        for status, group in not_ok.groupby("status"):
            out += [f"### {escape_markdown(status)}", "", "| cell | reason |", "|---|---|"]
            for row in group.itertuples(index=False):
                reason = str(row.reason).splitlines()[0][:300]  # cut before escaping: no reference is cut in two
                out.append(f"| {escape_markdown(_cell_key(row))} | {prose_with_code(reason)} |")
            out.append("")
    return "\n".join(out)


def own_sections() -> dict[str, tuple[str, ...]]:
    """The sections of their own the appendix shows cells in: what writes each -> the scenarios it shows."""
    sections: dict[str, tuple[str, ...]] = {}
    for name, info in SCENARIOS.items():
        if info.details:
            sections[info.details] = (*sections.get(info.details, ()), name)
    return sections


def _one_request_at_a_time(frames: Any) -> pd.DataFrame:
    """The generation cells a decoder answers one request at a time: their key's scenario is the plain one (those
    under load have a scenario, and a section, of their own)."""
    return frames.generating[frames.generating["scenario"] == PLAIN]


TRAINING_MEASURED = (
    "One timed call is one training iteration on a staged batch (`torch_train*` variants: forward, loss, "
    "backward, SGD step), or one epoch over the dataset through a DataLoader (`torch_train_epoch`, end to end "
    "from host memory); items/s counts samples trained on. `× baseline`: items/s over the plain fp32 cell of "
    "the same engine, device and batch named in `baseline`."
)


def method_section(measured: pd.DataFrame, frames: Any) -> list[str]:
    """How the cells were measured, said once for the whole report."""
    what = []
    if not measured.empty:
        what += [
            "Each cell is one engine running one workload at one precision, device, batch size, sequence length "
            "and CPU thread count, measured in fresh processes (`processes`; more for GPU cells found host-bound) "
            "while no other job of the workflow measures (machine-wide lock); library imports happen once, "
            "before the processes fork, and are timed apart. In each process, after a warm-up, calls are timed "
            "one at a time until both the minimum time and the process's share of the minimum number of calls "
            "are reached. On the host clock every call is synchronised before the clock is read; on a GPU CUDA "
            "events bracket each call on the engine's stream. Each cell is timed at its engine's boundary and "
            "end to end, in alternating rounds. Boundaries of the ok cells here: "
            + "; ".join(
                f"`{t}`: {BOUNDARIES.get(t, 'see the records')}" for t in sorted(measured["timing"].dropna().unique())
            )
            + ". Percentiles pool the calls of all processes; a percentile from fewer calls than it needs "
            "(p90: 10, p95: 20, p99: 100) is –. `items/s`: items per call over the p50, the one throughput of "
            "the report. `bound` (GPU cells): `host` when the GPU waited for the thread launching its kernels, "
            "`device` otherwise. `recipe`: what the cell computes with.",
        ]
    if not _one_request_at_a_time(frames).empty:
        what += [load_target(GENERATION.method)]
    present = set(frames.served["scenario"]) | set(frames.generating["scenario"])
    # once each: LoadGen's server and offline share theirs
    methods = dict.fromkeys(info.method for name, info in SCENARIOS.items() if name in present and info.method)
    what += [load_target(method) for method in methods if method]
    return [*(["## What was measured", ""] if what else []), *(line for text in what for line in (text, ""))]


def environment_section(everything: pd.DataFrame, measured: pd.DataFrame) -> list[str]:
    """Host, devices, the libraries of the run's engines, and the code (inferbench.report.provenance)."""
    return [
        "## Environment",
        "",
        f"- host: {distinct(everything, 'hostname')}",
        f"- CPU: {distinct(everything, 'cpu')}",
        f"- GPU: {distinct(everything, 'gpu')}",
        f"- Python {distinct(everything, 'python')}; {libraries_text(everything)}",
        f"- GPU driver {distinct(everything, 'gpu_driver')}, CUDA {distinct(everything, 'cuda')}, "
        f"cuDNN {distinct(everything, 'cudnn', integer=True)}",
        f"- inferbench {'; '.join(git_states(everything, named='commit '))}; {package_text(everything)}",
        *_telemetry_lines(measured),
        "",
    ]


def datasets_section(dataset_stats: Sequence[dict[str, Any]]) -> list[str]:
    if not dataset_stats:
        return []
    out = [
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
    return [*out, "", "Positive rate: share of the target class (charged off; heart disease) in the rows used.", ""]


def models_section(model_meta: Sequence[dict[str, Any]]) -> list[str]:
    if not model_meta:
        return []
    out = [
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
    return [*out, "", "Models other than the MLPs have random weights: latency does not depend on the values.", ""]


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
    # refused by file, row and cell before anything is written: an impossible figure is never published
    summary = read_summary(Path(summary_csv))
    checked_summary(summary, Path(summary_csv), use="report", fix=REMAKE_FROM_RECORDS, need_measured=False)
    roofline_table = pd.concat([pd.read_csv(p) for p in roofline]) if roofline else None
    metas, stats, profiled = (
        [read_json(p) for p in model_meta],
        [read_json(p) for p in dataset_stats],
        [read_json(p) for p in profiles],
    )
    leases = LeaseSpread.load(lease_spread) if lease_spread else None
    report_dir = Path(out).parent
    text = build_report(summary, plots, metas, stats, report_dir, profiled, studies, roofline_table, leases)
    details = build_details(summary, plots, metas, stats, report_dir, profiled, roofline_table, leases)
    with atomic_path(report_dir / DETAILS_NAME) as tmp:
        tmp.write_text(details + "\n")
    with atomic_path(out) as tmp:
        tmp.write_text(text + "\n")
