"""Collect cell records into one table (CSV and Parquet), one row per cell."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from inferbench.core.cells import CellRecord
from inferbench.core.errors import UserError
from inferbench.core.fsutil import atomic_path

KEY_COLUMNS = ["workload", "engine", "precision", "device", "batch_size", "seq_len", "threads", "scenario"]


def with_scenario(summary: pd.DataFrame) -> pd.DataFrame:
    """A summary with its ``scenario`` column (summaries written before scenarios: all ``single``)."""
    return summary if "scenario" in summary else summary.assign(scenario="single")


def split_scenarios(summary: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The cells timed one call at a time (``single``: every latency table, decision and plot) and the
    LoadGen serving cells (``server``, ``offline``: their own section), apart: a serving cell's latency
    includes queueing and batching, and is never compared with a single call's."""
    summary = with_scenario(summary)
    single = summary["scenario"].eq("single")
    return summary[single].reset_index(drop=True), summary[~single].reset_index(drop=True)


#: what reading a damaged or foreign record raises (JSONDecodeError and a wrong schema are ValueErrors)
UNREADABLE = (OSError, ValueError, KeyError, TypeError)


def load_records(record_paths: Iterable[str | Path]) -> list[CellRecord]:
    """The records at ``record_paths``; a UserError naming every one that cannot be read, and the
    command that removes them (their cells are then measured again), rather than stopping at the first."""
    records, unreadable = [], []
    for path in record_paths:
        try:
            records.append(CellRecord.load(path))
        except UNREADABLE as error:
            unreadable.append(f"  {path}: {type(error).__name__}: {str(error)[:200]}")
    if unreadable:
        raise UserError(
            f"{len(unreadable)} cell record(s) cannot be read:\n" + "\n".join(unreadable) + "\n"
            "Remove them, and the next run measures those cells again: python -m inferbench clean --status unreadable"
        )
    return records


def summary_frame(record_paths: Iterable[str | Path]) -> pd.DataFrame:
    rows = [record.flatten() for record in load_records(record_paths)]
    frame = pd.DataFrame(rows)
    if frame.empty:
        raise ValueError("no cell records to summarise")
    return frame.sort_values(KEY_COLUMNS, kind="stable").reset_index(drop=True)


def write_summary(record_paths: Iterable[str | Path], csv_path: str | Path, parquet_path: str | Path) -> pd.DataFrame:
    frame = summary_frame(record_paths)
    with atomic_path(csv_path) as tmp:
        frame.to_csv(tmp, index=False)
    with atomic_path(parquet_path) as tmp:
        frame.to_parquet(tmp, index=False)
    return frame


def remove_records(cells_dir: str | Path, statuses: set[str]) -> list[Path]:
    """Delete the records (and their samples) whose status is in ``statuses``; the status
    ``unreadable`` stands for records that cannot be read (damaged, or of another schema)."""
    removed = []
    for path in sorted(Path(cells_dir).rglob("*.json")):
        try:
            status = CellRecord.load(path).status
        except UNREADABLE:
            status = "unreadable"
        if status in statuses:
            path.unlink()
            for suffix in (".samples.npy", ".e2e_samples.npy"):
                path.with_suffix(suffix).unlink(missing_ok=True)
            removed.append(path)
    return removed
