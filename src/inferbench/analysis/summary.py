"""Collect cell records into one table (CSV and Parquet), one row per cell."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from inferbench.cells import CellRecord
from inferbench.fsutil import atomic_path

KEY_COLUMNS = ["workload", "engine", "precision", "device", "batch_size", "seq_len", "threads"]


def summary_frame(record_paths: Iterable[str | Path]) -> pd.DataFrame:
    rows = [CellRecord.load(p).flatten() for p in record_paths]
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
    """Delete the records (and their samples) whose status is in ``statuses``."""
    removed = []
    for path in sorted(Path(cells_dir).rglob("*.json")):
        try:
            status = CellRecord.load(path).status
        except (ValueError, KeyError, TypeError):
            continue  # not a record of this schema: leave it alone
        if status in statuses:
            path.unlink()
            for suffix in (".samples.npy", ".e2e_samples.npy"):
                path.with_suffix(suffix).unlink(missing_ok=True)
            removed.append(path)
    return removed
