"""Which summary rows are a study's cells, and the training cells' speed-ups (the report's first page and
its appendix both read them from here).

A summary row belongs to a study by the rule that made the study's cells (inferbench.plan.grid.in_study),
with the study's devices as resolved where the workflow ran.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from inferbench.analysis.comparison import ClassSpreads
from inferbench.analysis.summary import UNREADABLE, with_scenario
from inferbench.analysis.verdicts import claim, claim_columns
from inferbench.core.cells import CellKey, CellRecord
from inferbench.plan.grid import in_study
from inferbench.report.tables import recipe


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


def row_key(row: Any) -> CellKey:
    """The cell key of a summary row (a namedtuple of its columns)."""
    return CellKey(row.workload, row.engine, row.precision, row.device, int(row.batch_size), int(row.seq_len),
                   int(row.threads), getattr(row, "scenario", "single"))  # fmt: skip


#: where a report's cell records are, beside it (results/cells)
CELLS_DIR = "cells"


def records_beside(cells: pd.DataFrame, report_dir: Path) -> dict[str, CellRecord]:
    """The records of ``cells``'s rows found beside the report (``report_dir``/cells/, where the workflow and
    ``rerender`` keep them), by cell id; one missing or unreadable is left out (the caller says so)."""
    out = {}
    for row in with_scenario(cells).itertuples(index=False):
        key = row_key(row)
        try:
            out[key.cell_id] = CellRecord.load(report_dir / CELLS_DIR / key.relpath)
        except UNREADABLE:
            continue
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


def training_speedups(
    cells: pd.DataFrame, engine_order: Sequence[str] = (), classes: ClassSpreads | None = None
) -> pd.DataFrame:
    """Training cells with two ratios of items/s, each a claim with its 95% interval across processes
    (inferbench.analysis.verdicts; items per call are equal within a pair, so the ratio of items/s is the
    inverse ratio of p50s): against the same cell on the CPU (``speedup_vs_cpu``, end to end), and against
    the plain fp32 baseline of the same workload, engine implementation, device and batch
    (``speedup_vs_baseline``, named in ``baseline``): the first of ``engine_order`` (a study lists its
    baseline first) with an fp32 cell there, else the fp32 cell with the plainest recipe (e.g. the fp32
    step against AMP + channels-last + compile, the plain epoch loop against DataLoader options)."""
    cells = cells.copy()
    ok = cells[cells["status"] == "ok"]
    classes = classes if classes is not None else ClassSpreads.of(ok)
    same = ["workload", "engine", "precision", "batch_size"]
    cpu = {tuple(r[c] for c in same): r for _, r in ok[ok["device"] == "cpu"].iterrows()}
    group = ["workload", "engine_impl", "device", "batch_size"]
    order = {name: i for i, name in enumerate(engine_order)}
    fp32 = ok[ok["precision"] == "fp32"]
    fp32 = fp32.assign(
        rank=[(order.get(r["engine"], len(order)), len(recipe(r)), r["engine"]) for _, r in fp32.iterrows()]
    )
    baselines = {key: frame.sort_values("rank").iloc[0] for key, frame in fp32.groupby(group)} if len(fp32) else {}
    columns: dict[str, list[Any]] = {}
    for _, row in cells.iterrows():
        on_cpu = cpu.get(tuple(row[c] for c in same)) if row["device"] != "cpu" else None
        base = baselines.get(tuple(row[c] for c in group))
        if base is not None and base["engine"] == row["engine"] and base["precision"] == row["precision"]:
            base = None  # the baseline itself
        against = {"cpu": on_cpu, "baseline": base}
        for name, other in against.items():
            found = claim(row, other, classes) if row["status"] == "ok" and other is not None else None
            values = claim_columns(found, prefix := f"speedup_vs_{name}")
            for part in ("", "_low", "_high", "_range_low", "_range_high", "_contended"):
                columns.setdefault(prefix + part, []).append(values[prefix + part])
            for part in ("significant", "verdict", "boundary"):
                columns.setdefault(f"{prefix}_{part}", []).append(values.get(part))
        columns.setdefault("baseline", []).append(
            f"{base['engine']} fp32 ({recipe(base)})" if base is not None else None
        )
    return cells.assign(**columns, recipe=[recipe(r) for _, r in cells.iterrows()])
