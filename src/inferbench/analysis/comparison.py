"""Like with like: the one rule for the timing boundary at which two (or more) cells are compared,
and their p50 ratio with an interval that counts the spread between processes.

Every cell is timed at its engine's own boundary (``device``: inputs already where the engine
computes, outputs left there; or ``end_to_end`` for engines that only have that) and end to end
(host arrays in, a host array out). Cells are compared at ``device`` only when they all ran on one
device and every one's own boundary is ``device``; otherwise end to end, the only boundary that
includes the copies a device change or a host-to-host engine pays.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd

from inferbench.analysis.uncertainty import CellSpread, Ratio, ratio

BOUNDARY_LABELS = {"device": "device boundary", "end_to_end": "end to end"}
#: per boundary: the p50 column, each process's p50 (';'-separated), and the pooled p50's 95% CI
COLUMNS = {
    "device": ("latency_p50_ms", "p50_by_process_ms", "latency_p50_ci95_low_ms", "latency_p50_ci95_high_ms"),
    "end_to_end": (
        "e2e_latency_p50_ms",
        "e2e_p50_by_process_ms",
        "e2e_latency_p50_ci95_low_ms",
        "e2e_latency_p50_ci95_high_ms",
    ),
}


def boundary_of(cells: pd.DataFrame | Iterable[Any]) -> str:
    """The boundary at which ``cells`` (summary rows) are compared: ``device`` when all ran on one
    device and every engine's own boundary is ``device``, else ``end_to_end``."""
    frame = cells if isinstance(cells, pd.DataFrame) else pd.DataFrame([_as_dict(c) for c in cells])
    if frame.empty:
        return "device"
    timings = frame["timing"] if "timing" in frame else pd.Series("device", index=frame.index)
    same_device = frame["device"].nunique() == 1
    return "device" if same_device and bool(timings.fillna("device").eq("device").all()) else "end_to_end"


def p50_at(frame: pd.DataFrame, boundary: str) -> pd.Series:
    """Each row's p50 (ms) at ``boundary``; end to end falls back to the engine's own p50 where that
    boundary is already end to end (no second loop was needed)."""
    if boundary == "device":
        return frame["latency_p50_ms"]
    e2e = frame["e2e_latency_p50_ms"] if "e2e_latency_p50_ms" in frame else pd.Series(index=frame.index, dtype=float)
    return e2e.fillna(frame["latency_p50_ms"])


def _as_dict(row: Any) -> dict[str, Any]:
    if isinstance(row, dict):
        return row
    if isinstance(row, pd.Series):
        return row.to_dict()
    return row._asdict()


def _value(row: dict[str, Any], column: str) -> Any:
    value = row.get(column)
    return None if value is None or (isinstance(value, float) and pd.isna(value)) else value


def spread_at(row: Any, boundary: str) -> CellSpread | None:
    """A summary row's p50 across its processes at ``boundary`` (see inferbench.analysis.uncertainty)."""
    row = _as_dict(row)
    p50_col, by_process_col, low_col, high_col = COLUMNS[boundary]
    p50 = _value(row, p50_col)
    if p50 is None and boundary == "end_to_end":  # the engine's own boundary is end to end
        p50_col, by_process_col, low_col, high_col = COLUMNS["device"]
        p50 = _value(row, p50_col)
    by_process = _value(row, by_process_col)
    values = [float(v) for v in str(by_process).split(";") if v] if by_process is not None else []
    if not values and p50 is not None:
        values = [float(p50)]  # summaries from before processes were recorded: one process
    return CellSpread.from_processes(values, _value(row, low_col), _value(row, high_col))


def compare(faster: Any, slower: Any, boundary: str | None = None) -> Ratio | None:
    """p50 of ``slower`` / p50 of ``faster`` at the common boundary (> 1: ``faster`` is faster), with
    its interval; None where either cell has no p50 there."""
    a, b = _as_dict(faster), _as_dict(slower)
    boundary = boundary or boundary_of([a, b])
    spread_a, spread_b = spread_at(a, boundary), spread_at(b, boundary)
    if spread_a is None or spread_b is None:
        return None
    p50_a = float(p50_at(pd.DataFrame([a]), boundary).iloc[0])
    p50_b = float(p50_at(pd.DataFrame([b]), boundary).iloc[0])
    return ratio(spread_a, spread_b, p50_b / p50_a)
