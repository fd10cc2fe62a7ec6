"""Markdown tables and number formatting shared by the report's sections."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd


def fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float):
        if value == 0 or abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) < 0.001:
            return f"{value:.3g}"
        digits = max(0, 2 - math.floor(math.log10(abs(value))))  # three significant digits
        return f"{value:.{digits}f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def interval(low: Any, high: Any) -> str | None:
    if pd.isna(low) or pd.isna(high):  # None or NaN: no interval
        return None
    return f"{fmt(float(low))}–{fmt(float(high))}"


#: columns that count things: shown as integers even where a missing value made the column float
COUNT_COLUMNS = {"n_iters", "items_per_call", "batch_size", "seq_len", "threads", "repeats", "points"}


def _count(value: Any) -> Any:
    return int(value) if isinstance(value, float) and not math.isnan(value) and value.is_integer() else value


def intervals(frame: pd.DataFrame, low: str, high: str) -> list[str | None]:
    """``interval`` of each row's ``low`` and ``high`` columns."""
    return [interval(lo, hi) for lo, hi in zip(frame[low], frame[high], strict=True)]


def markdown_table(frame: pd.DataFrame, columns: Sequence[tuple[str, str]]) -> str:
    if "latency_p50_ci95_low_ms" in frame:
        frame = frame.assign(latency_p50_ci95=intervals(frame, "latency_p50_ci95_low_ms", "latency_p50_ci95_high_ms"))
    lines = ["| " + " | ".join(title for _, title in columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    for row in frame.itertuples(index=False):
        values = row._asdict()
        cells = [fmt(_count(values.get(col)) if col in COUNT_COLUMNS else values.get(col)) for col, _ in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def rows_or_none(frame: pd.DataFrame, columns: Sequence[tuple[str, str]]) -> list[str]:
    return [markdown_table(frame, columns) if not frame.empty else "None in this run.", ""]
