"""The summary as files: one row per cell (inferbench.analysis.summary), as CSV and as Parquet."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from inferbench.analysis.summary import summary_frame
from inferbench.core.fsutil import atomic_path


def write_summary(record_paths: Iterable[str | Path], csv_path: str | Path, parquet_path: str | Path) -> pd.DataFrame:
    frame = summary_frame(record_paths)
    with atomic_path(csv_path) as tmp:
        frame.to_csv(tmp, index=False)
    with atomic_path(parquet_path) as tmp:
        frame.to_parquet(tmp, index=False)
    return frame
