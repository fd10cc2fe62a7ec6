"""Markdown tables and number formatting shared by the report's sections.

Latencies carry their unit per value, chosen by magnitude (ms, µs, ns), so that a 96 ns per-item
latency and a 75 ms batch sit in one column without scientific notation. A column whose name ends
in ``_ms`` holds milliseconds and is formatted so; other numbers get three significant digits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from inferbench.catalog.engines import COMPUTATION_KEYS, tf32_setting
from inferbench.report.text import escape_markdown


def _significant(value: float, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits in positional notation (never 1e-05), thousands
    separated."""
    if value == 0 or not math.isfinite(value):
        return "0" if value == 0 else str(value)
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    return f"{value:,.{decimals}f}"


def fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, float | np.floating):
        return _significant(float(value))
    if isinstance(value, int | np.integer):
        return f"{int(value):,}"
    return str(value)


def fmt_ms(value: Any) -> str:
    """Milliseconds in the unit that suits the magnitude: 12.3 ms, 96.4 µs, 412 ns."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    ms = float(value)
    if abs(ms) >= 1 or ms == 0:
        return f"{_significant(ms)} ms"
    if abs(ms) >= 1e-3:
        return f"{_significant(ms * 1e3)} µs"
    return f"{_significant(ms * 1e6)} ns"


def fmt_ratio(value: Any) -> str:
    return "–" if value is None or pd.isna(value) else f"{_significant(float(value))}×"


def interval(low: Any, high: Any, unit: str = "") -> str | None:
    if low is None or high is None or pd.isna(low) or pd.isna(high):  # None or NaN: no interval
        return None
    if unit == "ms":
        return f"{fmt_ms(float(low))} – {fmt_ms(float(high))}"
    return f"{fmt(float(low))}–{fmt(float(high))}"


#: columns that count things: shown as integers even where a missing value made the column float
COUNT_COLUMNS = {"n_iters", "e2e_n_iters", "items_per_call", "batch_size", "seq_len", "threads", "repeats", "points"}


def _count(value: Any) -> Any:
    return int(value) if isinstance(value, float) and not math.isnan(value) and value.is_integer() else value


def intervals(frame: pd.DataFrame, low: str, high: str, unit: str = "") -> list[str | None]:
    """``interval`` of each row's ``low`` and ``high`` columns."""
    return [interval(lo, hi, unit) for lo, hi in zip(frame[low], frame[high], strict=True)]


def cell_text(column: str, value: Any) -> str:
    """One table cell: milliseconds with their unit, counts as integers, the rest as ``fmt``."""
    if column.endswith("_ms"):
        return fmt_ms(value)
    if column in COUNT_COLUMNS:
        return fmt(_count(value))
    return fmt(value)


def _cell(column: str, value: Any) -> str:
    """``cell_text``, escaped where the value is text (names from the config or the records, reasons):
    the package's numbers need no escaping, and text must neither split the row nor become markup."""
    text = cell_text(column, value)
    return escape_markdown(text) if isinstance(value, str) else text


def markdown_table(frame: pd.DataFrame, columns: Sequence[tuple[str, str]]) -> str:
    if "latency_p50_ci95_low_ms" in frame:
        frame = frame.assign(
            latency_p50_ci95=intervals(frame, "latency_p50_ci95_low_ms", "latency_p50_ci95_high_ms", "ms")
        )
    lines = ["| " + " | ".join(title for _, title in columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    for row in frame.itertuples(index=False):
        values = row._asdict()
        lines.append("| " + " | ".join(_cell(col, values.get(col)) for col, _ in columns) + " |")
    return "\n".join(lines)


def rows_or_none(frame: pd.DataFrame, columns: Sequence[tuple[str, str]]) -> list[str]:
    return [markdown_table(frame, columns) if not frame.empty else "None in this run.", ""]


def distinct(frame: pd.DataFrame, column: str, integer: bool = False) -> str:
    """The distinct values of a summary column, sorted and escaped (host and library strings from the
    records); – where there are none."""
    if column not in frame:
        return "–"
    present = frame[column].dropna()
    if integer:  # a column with gaps reads back as float: cuDNN 91900.0 is version 91900
        present = present.astype(int)
    values = sorted({str(v) for v in present})
    return escape_markdown(", ".join(values)) or "–"


#: fp32's TF32 settings in a label; PyTorch's default (TF32 in convolutions only) goes unsaid
TF32_WORDS = {"strict": "TF32 off", "all": "TF32 everywhere"}


def recipe(row: Any) -> str:
    """What a cell computes with, in a few words (e.g. ``torchscript · fp16 cast · channels-last``):
    its precision and how it is reached, then every computation option that is not the plain one."""
    values = row if isinstance(row, dict) else (row.to_dict() if isinstance(row, pd.Series) else row._asdict())
    if not any(key in values for key in COMPUTATION_KEYS):
        return str(values.get("precision", "–"))
    known = {k: values.get(k) for k in COMPUTATION_KEYS}
    known = {k: (None if v is None or (isinstance(v, float) and math.isnan(v)) else v) for k, v in known.items()}
    parts = []
    if known["graph"] not in (None, "eager", "none"):
        parts.append(str(known["graph"]) + (f" {known['compile_mode']}" if known["compile_mode"] else ""))
    precision = str(values.get("precision", ""))
    parts.append(precision + (f" {known['precision_mode']}" if known["precision_mode"] else ""))
    tf32 = TF32_WORDS.get(tf32_setting(known["tf32"])) if precision == "fp32" else None
    parts += [tf32] if tf32 else []
    if known["channels_last"] is True or str(known["channels_last"]).lower() == "true":
        parts.append("channels-last")
    if str(known["cuda_graph"]).lower() == "true" and known["graph"] != "cuda_graph":
        parts.append("CUDA graph")
    if known["io_binding"] is not None:
        parts.append("IO binding" if str(known["io_binding"]).lower() == "true" else "host arrays")
    if str(known["fusions"]).lower() == "true":
        parts.append("transformer fusions")
    if known.get("host_input"):
        parts.append(f"{known['host_input']} host input")
    return " · ".join(parts)


def cell_name(row: Any) -> str:
    """``engine precision device`` (and ``Nt``, the CPU threads, on the CPU)."""
    get = row.get if isinstance(row, dict | pd.Series) else row._asdict().get
    threads = f" {int(get('threads'))}t" if get("device") == "cpu" else ""
    return f"{get('engine')} {get('precision')} {get('device')}{threads}"
