"""The seed studies' tables in each seed's own axes and units, from the cells of the studies that
reproduce them (declared once in ``SEEDS``: which studies, what the table holds).

The study sections (inferbench.report.studies) answer each study's question; these tables lay the
same numbers out as the seed did (e.g. ms per sample against batch 1 to 10,000 per engine), so that a
reader can set them beside the seed's own. Every ratio here is a claim of the run's one verdict rule
(inferbench.analysis.decisions), at the pair's common boundary.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from inferbench.analysis import decisions
from inferbench.analysis.comparison import BOUNDARY_LABELS
from inferbench.analysis.decisions import ClaimBasis
from inferbench.analysis.summary import split_scenarios
from inferbench.report.studies import study_rows, training_speedups
from inferbench.report.tables import fmt, fmt_ms
from inferbench.report.text import escape_markdown

#: seed 001's four rows: (precision, engine) in the seed's order, and what the seed calls them
VISION_ROWS = (
    ("fp32", "torch_eager", "FP32 eager"),
    ("fp16", "torch_eager", "FP16 eager"),
    ("fp32", "torchscript", "FP32 TorchScript"),
    ("fp16", "torchscript", "FP16 TorchScript"),
)


def grid(rows: dict[tuple[str, ...], dict[str, str]], row_titles: tuple[str, ...], columns: list[str]) -> str:
    """A Markdown table: one line per row key (its parts in the first columns), then ``columns``; a
    missing value is –."""
    lines = [
        "| " + " | ".join([*row_titles, *columns]) + " |",
        "|" + "|".join("---" for _ in (*row_titles, *columns)) + "|",
    ]
    for key, values in rows.items():
        lines.append("| " + " | ".join([*map(escape_markdown, key), *(values.get(c, "–") for c in columns)]) + " |")
    return "\n".join(lines)


def _batch_columns(frame: pd.DataFrame) -> list[str]:
    return [f"b{b}" for b in sorted(frame["batch_size"].unique())]


def loan_table(cells: pd.DataFrame, basis: ClaimBasis) -> list[str]:
    """Seed 000: ms per scored loan (end-to-end p50 / batch) per engine and device against batch."""
    ok = decisions.measured(cells)
    ok = ok.assign(per_sample=decisions.e2e_per_item_ms(ok))
    rows: dict[tuple[str, ...], dict[str, str]] = {}
    for row in ok.sort_values(["device", "engine", "batch_size"]).itertuples(index=False):
        threads = f" {row.threads}t" if row.device == "cpu" else ""
        rows.setdefault((row.workload, f"{row.engine} {row.device}{threads}"), {})[f"b{row.batch_size}"] = fmt_ms(
            row.per_sample
        )
    return [
        "ms per sample, end to end (host arrays in and out; the end-to-end p50 of a call divided by its batch):",
        "",
        grid(rows, ("workload", "engine"), _batch_columns(ok)),
    ]


def vision_table(cells: pd.DataFrame, basis: ClaimBasis) -> list[str]:
    """Seed 001: the four rows FP32/FP16 eager and TorchScript per model against batch: p50 and the
    speed-up over FP32 eager."""
    ok = decisions.measured(cells)
    speed = decisions.speedups(cells, basis.floors)
    ratio = {
        (r.workload, r.batch_size, r.engine, r.precision): (r.speedup, r.boundary, r.verdict)
        for r in speed.itertuples(index=False)
    }
    rows: dict[tuple[str, ...], dict[str, str]] = {}
    for workload in sorted(ok["workload"].unique()):
        for precision, engine, name in VISION_ROWS:
            mine = ok[(ok["workload"] == workload) & (ok["engine"] == engine) & (ok["precision"] == precision)]
            if mine.empty:
                continue
            values = rows.setdefault((workload, name), {})
            for row in mine.itertuples(index=False):
                text = fmt_ms(row.latency_p50_ms)
                if (found := ratio.get((workload, row.batch_size, engine, precision))) is not None:
                    speedup, boundary, verdict = found
                    text += f" ({fmt(speedup)}×{'' if boundary == row.timing else ' ' + BOUNDARY_LABELS[boundary]}"
                    text += ", within the spread)" if verdict != "significant" else ")"
                values[f"b{row.batch_size}"] = text
    return [
        "p50 ms per call at the GPU's boundary, and in brackets the speed-up over FP32 eager (the verdict "
        "rule's: at the pair's common boundary, \"within the spread\" where its interval holds 1):",
        "",
        grid(rows, ("model", "row"), _batch_columns(ok)),
    ]


def optimisation_table(cells: pd.DataFrame, basis: ClaimBasis) -> list[str]:
    """Seed 002: each optimisation's speed-up over FP32 eager, inference (per batch) and training."""
    frames = split_scenarios(cells)
    single, training = frames.single, frames.training
    rows: dict[tuple[str, ...], dict[str, str]] = {}
    columns: list[str] = []
    # a seed-002 run of training cells only has no inference speed-ups: an empty table of the same columns
    no_speedups = pd.DataFrame(columns=["batch_size", "speedup"])
    speed = decisions.speedups(single, basis.floors) if not single.empty else no_speedups
    for row in speed.sort_values(["batch_size", "speedup"]).itertuples(index=False):
        column = f"inference b{row.batch_size}"
        columns += [column] if column not in columns else []
        text = f"{fmt(row.speedup)}×" + ("" if row.verdict == "significant" else " (within the spread)")
        rows.setdefault((row.workload, f"{row.engine} {row.precision}"), {})[column] = text
    if not training.empty:
        rated = training_speedups(training)
        for row in rated[rated["status"] == "ok"].itertuples(index=False):
            if pd.isna(row.speedup_vs_baseline) or str(row.baseline).startswith(f"{row.engine} {row.precision} "):
                continue
            column = f"training b{row.batch_size}"
            columns += [column] if column not in columns else []
            rows.setdefault((row.workload, f"{row.engine} {row.precision}"), {})[column] = (
                f"{fmt(row.speedup_vs_baseline)}× (of {row.baseline})"
            )
    return [
        "Speed-up over FP32 eager: inference, p50 per call at the pair's common boundary (the verdict rule's); "
        "training, items/s of an iteration over the plain fp32 step's:",
        "",
        grid(rows, ("model", "optimisation"), columns),
    ]


def transformer_table(cells: pd.DataFrame, basis: ClaimBasis) -> list[str]:
    """Seed 003: p50 / p90 / p99 per model, device and engine, batch against sequence length."""
    ok = decisions.measured(cells)
    rows: dict[tuple[str, ...], dict[str, str]] = {}
    for row in ok.sort_values(["workload", "device", "engine", "batch_size", "seq_len"]).itertuples(index=False):
        tail = " / ".join(fmt_ms(getattr(row, f"latency_{p}_ms", None)) for p in ("p50", "p90", "p99"))
        key = (row.workload, f"{row.engine} {row.device}", f"b{row.batch_size}")
        rows.setdefault(key, {})[f"s{row.seq_len}"] = f"{tail} ({int(row.n_iters)} calls)"
    columns = [f"s{s}" for s in sorted(ok["seq_len"].unique())]
    return [
        "p50 / p90 / p99 ms per call at each cell's own boundary (a percentile with fewer calls than it needs, "
        "p99: 100, is –):",
        "",
        grid(rows, ("model", "engine", "batch"), columns),
    ]


def epoch_table(cells: pd.DataFrame, basis: ClaimBasis) -> list[str]:
    """Seed 004: time per epoch on the CPU and the GPU and the GPU/CPU speed-up, per loop and batch
    (the training section's ratio: items/s, inferbench.report.studies.training_speedups)."""
    training = split_scenarios(cells).training
    rated = training_speedups(training[training["status"] == "ok"])
    rows: dict[tuple[str, ...], dict[str, str]] = {}
    for row in rated.sort_values(["workload", "engine", "batch_size"]).itertuples(index=False):
        values = rows.setdefault((row.workload, row.engine, f"b{row.batch_size}"), {})
        values[f"{row.device} ms per epoch"] = fmt_ms(row.latency_p50_ms)
        if not pd.isna(row.speedup_vs_cpu):
            values["GPU/CPU speed-up"] = f"{fmt(row.speedup_vs_cpu)}×"
    return [
        "p50 ms per epoch (one timed call = one epoch through the loop, end to end from host memory), and the "
        "GPU/CPU speed-up (the GPU's samples per second over the CPU's):",
        "",
        grid(rows, ("model", "loop", "batch"), ["cpu ms per epoch", "cuda ms per epoch", "GPU/CPU speed-up"]),
    ]


@dataclass(frozen=True)
class Seed:
    number: str
    #: what the seed measured, in its words
    subject: str
    #: the studies (config names) whose cells reproduce it
    studies: tuple[str, ...]
    table: Callable[[pd.DataFrame, ClaimBasis], list[str]]


SEEDS = (
    Seed("000", "loan-default MLP, ONNX Runtime / TensorRT, batch 1 to 10,000", ("loan_default",), loan_table),
    Seed("001", "FP16 and TorchScript on ResNet-50 and ViT-B/16", ("vision_fp16",), vision_table),
    Seed(
        "002",
        "AMP, channels-last and torch.compile, inference and training",
        ("gpu_efficiency", "gpu_training"),
        optimisation_table,
    ),
    Seed("003", "BERT / DistilBERT latency against batch and sequence length", ("transformers",), transformer_table),
    Seed("004", "MLP training on the CPU and the GPU", ("heart_training",), epoch_table),
)


def seed_tables_section(summary: pd.DataFrame, studies: dict[str, dict[str, Any]], basis: ClaimBasis) -> list[str]:
    """One table per seed whose studies are in the run and have a measured cell."""
    out: list[str] = []
    for seed in SEEDS:
        present = [studies[name] for name in seed.studies if name in studies]
        if not present:
            continue
        cells = pd.concat([study_rows(summary, study) for study in present]).drop_duplicates(
            subset=["workload", "engine", "precision", "device", "batch_size", "seq_len", "threads"]
        )
        if not (cells["status"].eq("ok") & cells["engine_impl"].ne("noop")).any():
            continue
        out += [f"### Seed {seed.number}: {seed.subject}", "", *seed.table(cells, basis), ""]
    return ["## The seeds' tables", "", *out] if out else []
