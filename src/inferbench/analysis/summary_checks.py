"""A summary checked before anything is made from it (``checked_summary``): by aggregate, the report,
rerender and compare alike. Refused by file, row and cell, with how to fix it: a summary that has no row,
repeats a column or a cell, lacks a column, has a field that is not a number where a number belongs or a
number out of its range (a latency not above 0, a batch of 1e30, NaN or infinity), a cell measured ok
without a p50, a name with a line break, or more rows or longer fields than ``MAX_ROWS`` and
``MAX_FIELD_CHARS``."""

from __future__ import annotations

import csv
import math
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from inferbench.analysis.comparison import COLUMNS
from inferbench.analysis.summary import KEY_COLUMNS, read_summary_csv, with_scenario
from inferbench.catalog.scenarios import declared_targets
from inferbench.catalog.targets import load_target
from inferbench.core.errors import UserError

#: per boundary, the p50 of a cell's calls pooled: its saved samples' median (its p50 is the median of its
#: processes' p50s; a summary from before it had none, and its p50 was the pooled one)
POOLED_P50_COLUMNS = {"device": "latency_p50_pooled_ms", "end_to_end": "e2e_latency_p50_pooled_ms"}
#: what a summary must have for compare: each cell's dimensions (``scenario`` aside: summaries from
#: before scenarios are all single calls), its status and its p50
REQUIRED_COLUMNS = [*KEY_COLUMNS[:7], "status", "latency_p50_ms"]
#: what compare reads where a summary has it; a summary from before a column existed gets it empty
OPTIONAL_COLUMNS = [
    "engine_impl",
    "mode",
    "timing",
    "bound",
    "n_iters",
    "e2e_n_iters",
    *(column for columns in COLUMNS.values() for column in columns),
    *POOLED_P50_COLUMNS.values(),
]
#: columns of numbers: a field in one that is not a number is a damaged summary, refused by name
NUMERIC_COLUMNS = [
    "latency_p50_ms",
    "latency_p50_ci95_low_ms",
    "latency_p50_ci95_high_ms",
    "e2e_latency_p50_ms",
    "e2e_latency_p50_ci95_low_ms",
    "e2e_latency_p50_ci95_high_ms",
    *POOLED_P50_COLUMNS.values(),
    "n_iters",
    "e2e_n_iters",
    "throughput_per_s",
    "e2e_throughput_per_s",
    # and those the scenarios declare (their ``numeric``), once each
    *dict.fromkeys(column for target in declared_targets("numeric") for column in load_target(target)),
]
#: the cell's dimensions that are whole numbers (they name its record's path), and their range: the
#: config's own limits (src/inferbench/config.schema.yaml: size_list, threads; 0: no sequence, or a
#: GPU cell's threads)
INTEGER_COLUMNS = ["batch_size", "seq_len", "threads"]
DIMENSION_RANGES = {"batch_size": (1, 1_048_576), "seq_len": (0, 1_048_576), "threads": (0, 1024)}
#: no timed call lasts longer than a day (the stall watchdog's longest setting, measure.stall_timeout_s): a
#: latency beyond it is a unit or a typo, not a measurement
MAX_LATENCY_MS = 86_400_000.0
#: the columns of NUMERIC_COLUMNS that are latencies (ms, above 0), whole counts of calls (from 1); the
#: others are rates (per second, from 0)
LATENCY_COLUMNS = [c for c in NUMERIC_COLUMNS if c.endswith("_ms")]
COUNT_COLUMNS = ["n_iters", "e2e_n_iters"]
#: the text columns that name a cell, and its status: never empty
NAME_COLUMNS = [*KEY_COLUMNS[:4], "scenario", "status"]
#: each process's p50, ';'-separated numbers
BY_PROCESS_COLUMNS = ["p50_by_process_ms", "e2e_p50_by_process_ms"]
#: a summary's size, refused beyond (a run has one row per cell; a field is a name, a reason, an option)
MAX_ROWS = 100_000
MAX_FIELD_CHARS = 100_000
#: statuses of a cell that measured something (an invalid one measured, and failed its check)
MEASURED_STATUSES = ("ok", "invalid")
REMAKE_FROM_RECORDS = (
    "re-make the summary from the run's records (python -m inferbench aggregate RESULTS/cells/*/*/*/*.json "
    "--out-csv RESULTS/summary.csv --out-parquet RESULTS/summary.parquet)"
)
REMAKE_SUMMARY = f"{REMAKE_FROM_RECORDS}, or compare the results directory"


def cell_name(row: pd.Series | dict) -> str:
    """A summary row's cell, as its record's path names it (what a person finds in cells/); a line break or
    another control character in it is shown escaped (``\\n``), so that a message stays one line."""
    workload, engine, precision, device, batch, seq, threads = (row.get(c) for c in KEY_COLUMNS[:7])
    name = f"{workload}/{engine}-{precision}/{device}/b{batch}-s{seq}-t{threads}"
    return re.sub(r"[\x00-\x1f\x7f]", lambda control: repr(control.group())[1:-1], name)


def _shown(value: object) -> str:
    """A field as a message quotes it: text in quotes, a number as written (not ``np.float64(1.5)``)."""
    return repr(value) if isinstance(value, str) else str(value)


def _not_number(value: object) -> bool:
    try:
        float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return True
    return False


def read_summary(path: Path, fix: str = REMAKE_SUMMARY) -> pd.DataFrame:
    """A summary CSV, or a UserError naming it, with ``fix``, where it cannot be read as one, or its header
    names a column twice (pandas would read the second as ``NAME.1`` and use the first, unsaid)."""
    try:
        summary = read_summary_csv(path)
        with open(path, newline="", encoding="utf-8", errors="replace") as text:
            header = next(csv.reader(text), [])
    except (OSError, ValueError, csv.Error) as error:  # empty (no header), malformed rows, not text at all
        raise UserError(
            f"{path} cannot be read as a summary CSV ({type(error).__name__}: {str(error)[:200]}); {fix}"
        ) from error
    repeated = [name for name, count in Counter(header).items() if count > 1]
    if repeated:
        where = "; ".join(
            f"{name!r} in columns {', '.join(str(i + 1) for i, c in enumerate(header) if c == name)}"
            for name in repeated
        )
        raise UserError(
            f"{path} names a column more than once in its header ({where}): there is no telling which one is "
            f"the cells'. Keep one column of each name, or {fix}"
        )
    return summary


def _refuse_row(
    summary: pd.DataFrame, source: Path, bad: pd.Series, column: str, what: str, fix: str = REMAKE_SUMMARY
) -> None:
    """A UserError naming the first row of ``bad`` (a mask over ``summary``): its cell, ``column``'s field
    as written and ``what`` the field must be; nothing where no row is bad."""
    if not bad.any():
        return
    index = bad.idxmax()
    value = summary.at[index, column]
    shown = "empty" if value is None or (isinstance(value, float) and math.isnan(value)) else _shown(value)
    shown = shown if len(shown) <= 200 else f"{shown[:200]}... ({len(shown):,} characters)"
    more = f" ({int(bad.sum()) - 1} more rows like it)" if bad.sum() > 1 else ""
    raise UserError(
        f"{source}: column {column} of row {index + 1} (cell {cell_name(summary.loc[index])}) is {shown}, not "
        f"{what}{more}; correct or empty that field, or {fix}"
    )


def _numbers_problem(
    summary: pd.DataFrame, source: Path, column: str, values: pd.Series, fix: str = REMAKE_SUMMARY
) -> None:
    """A UserError where a field of a column of numbers (``values``: the column parsed, NaN where it is
    not a number) is not a number, or a number outside the column's range. Empty fields are left."""
    written = summary[column].notna()
    if column in INTEGER_COLUMNS:  # a cell's dimension: present, whole and within the config's limits
        low, high = DIMENSION_RANGES[column]
        outside = ~values.between(low, high) | (values % 1 != 0)
        _refuse_row(summary, source, values.isna() | outside, column, f"a whole number from {low} to {high:,}", fix)
    elif column in COUNT_COLUMNS:
        _refuse_row(summary, source, written & ~((values >= 1) & (values % 1 == 0) & np.isfinite(values)), column,
                    "a whole number of calls from 1", fix)  # fmt: skip
    elif column in LATENCY_COLUMNS:
        _refuse_row(summary, source, written & ~((values > 0) & (values <= MAX_LATENCY_MS)), column,
                    f"a latency in ms above 0 and at most {MAX_LATENCY_MS:,.0f} (a day)", fix)  # fmt: skip
    else:
        _refuse_row(summary, source, written & ~((values >= 0) & np.isfinite(values)), column,
                    "a finite rate per second from 0", fix)  # fmt: skip


def _by_process_problem(summary: pd.DataFrame, source: Path, column: str, fix: str = REMAKE_SUMMARY) -> None:
    """A UserError where a field of a by-process column is not ';'-separated latencies above 0 (one that is
    not would be left out of the cell's spread, unsaid)."""
    for index, value in summary[column].dropna().items():
        parts = [part for part in str(value).split(";") if part]
        if not parts or any(_not_number(part) or not 0 < float(part) <= MAX_LATENCY_MS for part in parts):
            bad = pd.Series(summary.index == index, index=summary.index)
            _refuse_row(summary, source, bad, column, "';'-separated numbers (each process's p50 in ms, above 0)", fix)


def _repeated_cells_problem(
    summary: pd.DataFrame, source: Path, fix: str = REMAKE_SUMMARY, use: str = "compare"
) -> None:
    """A UserError where a cell (its key) is in more than one row: compare would count each copy (two runs'
    summaries pasted into one read as twice the cells, a cell repeated with another p50 judged twice)."""
    repeated = summary.duplicated(KEY_COLUMNS, keep=False)
    if not repeated.any():
        return
    groups = summary[repeated].groupby(KEY_COLUMNS, sort=False, dropna=False).indices
    positions = next(iter(groups.values()))
    rows = summary[repeated].iloc[positions]
    first = rows.iloc[0]
    p50s = ", ".join("empty" if pd.isna(v) else f"{v:g}" for v in rows["latency_p50_ms"])
    # (a run's cells/ cannot repeat one: a record not at its own cell's path is refused as it is read)
    count = f"{len(groups)} cells are" if len(groups) > 1 else "it is the only cell"
    raise UserError(
        f"{source}: cell {cell_name(first)} (scenario {first['scenario']}) is in rows "
        f"{', '.join(str(i + 1) for i in rows.index)} (p50 {p50s} ms); {count} repeated. A summary has one row per "
        f"cell, and {use} would count each copy (two summaries pasted into one?). Keep one row per cell, or {fix}"
    )


def checked_summary(
    summary: pd.DataFrame, source: Path, use: str = "compare", fix: str = REMAKE_SUMMARY, need_measured: bool = True
) -> pd.DataFrame:
    """``summary`` (read from ``source``) with every column ``use`` (compare, the report, aggregate) reads, its
    numbers as numbers; a UserError naming ``source``, the row, its cell, what is wrong and how to ``fix`` it
    where it has no row, lacks a column, has an empty name, a field that is not a number or a number out of its
    range in a column of numbers, a cell measured ok without a p50, a cell in two rows, or (``need_measured``)
    no cell that measured anything. Nothing is dropped without a word."""
    if summary.empty:
        raise UserError(f"{source} has no cells (a header and no rows): nothing to {use}; {fix}")
    if len(summary) > MAX_ROWS:
        raise UserError(
            f"{source} has {len(summary):,} rows: a summary holds one row per cell, and {use} reads at most "
            f"{MAX_ROWS:,} (the largest preset has a few hundred); {fix}"
        )
    for column in summary.select_dtypes(include=["object", "string"]).columns:
        long = summary[column].map(lambda value: isinstance(value, str) and len(value) > MAX_FIELD_CHARS)
        _refuse_row(summary, source, long.astype(bool), column, f"a field of at most {MAX_FIELD_CHARS:,} characters",
                    fix)  # fmt: skip
    missing = [column for column in REQUIRED_COLUMNS if column not in summary]
    if missing:
        raise UserError(
            f"{source} has no column {', '.join(missing)} ({use} needs {', '.join(REQUIRED_COLUMNS)}): it is "
            f"not a summary inferbench wrote, or a damaged one; {fix}"
        )
    summary = with_scenario(summary).copy()  # columns are added and converted below, not in the caller's
    for column in OPTIONAL_COLUMNS:
        if column not in summary:  # empty: numbers where numbers belong, else text (None)
            summary[column] = np.nan if column in NUMERIC_COLUMNS else pd.Series(None, summary.index, object)
    for column in NAME_COLUMNS:
        empty = summary[column].isna() | (summary[column].astype(str) == "")
        _refuse_row(summary, source, empty, column, "a name", fix)
        # a line break or a control character in a name breaks every table and path that shows it
        controls = summary[column].astype(str).str.contains(r"[\x00-\x1f\x7f]", regex=True)
        _refuse_row(summary, source, controls, column, "a name without line breaks or control characters", fix)
    for column in [*INTEGER_COLUMNS, *(c for c in NUMERIC_COLUMNS if c in summary)]:
        values = pd.to_numeric(summary[column], errors="coerce").astype(float)
        not_number = summary[column].notna() & values.isna()
        _refuse_row(summary, source, not_number, column, "a whole number" if column in INTEGER_COLUMNS else "a number",
                    fix)  # fmt: skip
        _numbers_problem(summary, source, column, values, fix)
        summary[column] = values.astype(int) if column in INTEGER_COLUMNS else values
    for column in BY_PROCESS_COLUMNS:
        _by_process_problem(summary, source, column, fix)
    measured_single = summary["status"].isin(MEASURED_STATUSES) & (summary["scenario"] == "single")
    _refuse_row(summary, source, measured_single & summary["latency_p50_ms"].isna(), "latency_p50_ms",
                "a number: the cell measured (its status says so), so it has a p50", fix)  # fmt: skip
    _repeated_cells_problem(summary, source, fix, use)
    if need_measured and not summary["status"].isin(MEASURED_STATUSES).any():
        counts = ", ".join(f"{n} {status}" for status, n in summary["status"].value_counts().items())
        reasons = summary["reason"].dropna() if "reason" in summary else pd.Series(dtype=object)
        first = f"; the first reason: {str(reasons.iloc[0])[:300]}" if not reasons.empty else ""
        raise UserError(
            f"{source}: none of its {len(summary)} cells measured anything ({counts}{first}): nothing to compare. "
            "Fix what stopped them and measure them again (python -m inferbench clean removes the failed records, "
            "the same snakemake command then re-runs those cells)"
        )
    return summary
