"""Whether a whole class of cells moved between two runs, which one cell's interval cannot say.

Each cell's interval answers "did this cell change?". A host-bound cell's is wide (its processes move
by 10-75% on shared VMs), so a shift that every host-bound cell shares, set by the run's conditions
(another GPU measuring beside it, a slower host) and not by any engine, hides in them, or shows as a
few cells flagged one way (docs/results/h200x2/multi-gpu-partitioned). Per class
(inferbench.analysis.comparison.spread_class): the median of its cells' B / A
ratios, a distribution-free 95% interval of that median, how many cells read slower and faster, and
for scale the class's median spread between processes in each run. A class whose interval excludes 1 moved as
a whole. A cell counts in a class only where both runs put it there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from inferbench.analysis.comparison import SPREAD_CLASSES, spread_classes
from inferbench.analysis.leases import MIN_CELLS
from inferbench.analysis.summary import KEY_COLUMNS
from inferbench.core.stats import order_statistic_ranks

#: the order-statistic interval of a median has at least this coverage
CONFIDENCE = 0.95
#: the column of a summary with each cell's spread between its processes ((max - min) / median, %)
SPREAD_COLUMN = "repeat_p50_spread_pct"


@dataclass(frozen=True)
class ClassShift:
    """How one class of cells moved from run A to run B."""

    name: str
    cells: int
    median_ratio: float
    #: the median's 95% interval; None with fewer than six cells (no order-statistic interval reaches 95%)
    low: float | None
    high: float | None
    slower: int
    faster: int
    #: the class's median spread between processes in run A and in run B (%), None where unknown
    spread_a_pct: float | None
    spread_b_pct: float | None
    #: cells of this class in one run and of another in the other, left out (a host slow enough makes a
    #: device-bound cell host-bound: the class would follow the very shift it measures)
    changed_class: int = 0

    @property
    def moved(self) -> bool:
        return self.low is not None and self.high is not None and (self.low > 1 or self.high < 1)


def median_interval(values: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """A distribution-free interval of the median of ``values``: the order statistics that bound it with
    at least ``confidence`` (no bootstrap: with few cells its percentiles cover less than they claim).
    None where even the smallest and largest cover less (fewer than six values at 95%)."""
    n = values.size
    low_rank, high_rank = order_statistic_ranks(n, 0.5, confidence)
    if low_rank < 0 or high_rank > n - 1:
        return None
    ordered = np.sort(values)
    return float(ordered[low_rank]), float(ordered[high_rank])


def class_shifts(cells: pd.DataFrame, summary_a: pd.DataFrame, summary_b: pd.DataFrame) -> list[ClassShift]:
    """Per class with at least ``MIN_CELLS`` cells in ``cells`` (compare_cells' rows: the key columns
    and ``ratio``) of that class in both runs, in SPREAD_CLASSES' order."""
    if cells.empty or "ratio" not in cells:
        return []
    # each run's own view of every cell: its class and its spread between processes
    runs = [_aligned(summary, cells, ["bound", SPREAD_COLUMN]).assign(device=cells["device"]) for summary in
            (summary_a, summary_b)]  # fmt: skip
    class_a, class_b = (spread_classes(run) for run in runs)
    spreads = [pd.to_numeric(run[SPREAD_COLUMN], errors="coerce") for run in runs]
    ratios = pd.to_numeric(cells["ratio"], errors="coerce")
    shifts = []
    for name in SPREAD_CLASSES:
        members = (class_a == name) & (class_b == name) & (ratios > 0)
        if members.sum() < MIN_CELLS:
            continue
        logs = np.log(ratios[members].to_numpy(dtype=float))
        interval = median_interval(logs)
        spread_a, spread_b = (_median(spread[members]) for spread in spreads)
        shifts.append(
            ClassShift(
                name=name,
                cells=int(members.sum()),
                median_ratio=math.exp(float(np.median(logs))),
                low=None if interval is None else math.exp(interval[0]),
                high=None if interval is None else math.exp(interval[1]),
                slower=int((logs > 0).sum()),
                faster=int((logs < 0).sum()),
                spread_a_pct=spread_a,
                spread_b_pct=spread_b,
                changed_class=int(((class_a == name) ^ (class_b == name)).sum()),
            )
        )
    return shifts


def _aligned(summary: pd.DataFrame, cells: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """``columns`` of ``summary``'s row of each of ``cells`` (its ok rows, by the key columns both have),
    on ``cells``' index, one merge for all of them; NaN where the summary has no such row or column."""
    key = [c for c in KEY_COLUMNS if c in summary and c in cells]
    present = [c for c in columns if c in summary]
    aligned = pd.DataFrame(np.nan, index=cells.index, columns=columns, dtype=object)
    if not key or not present:
        return aligned
    ok = summary[summary["status"] == "ok"] if "status" in summary else summary
    # keys compared as text: a column read as numbers in one table and as text in the other still matches
    right = ok[[*key, *present]].astype({c: str for c in key}).drop_duplicates(key)
    merged = cells[key].astype(str).merge(right, on=key, how="left")
    for column in present:
        aligned[column] = merged[column].to_numpy()
    return aligned


def _median(values: pd.Series) -> float | None:
    present = values.dropna()
    return float(present.median()) if len(present) else None


def shifts_markdown(shifts: list[ClassShift]) -> list[str]:
    """The table and one line on how to read it; nothing where no class has cells enough."""
    if not shifts:
        return []

    def pct(value: float | None) -> str:
        return "–" if value is None else f"{value:.0f}%"

    lines = [
        "Per class, the median B / A over its cells and the median's 95% interval (order statistics: none "
        "below six cells): a class whose interval excludes 1 moved as a whole, whatever each cell's own "
        "interval says. A cell of one class in one run and another in the other is left out.",
        "",
        "| class | cells | median B / A | 95% interval | slower / faster | spread between processes, A / B "
        "(median) | left out (class changed) | moved as a whole |",
        "| --- | ---: | ---: | --- | ---: | ---: | ---: | --- |",
    ]
    for s in shifts:
        interval = "–" if s.low is None or s.high is None else f"{s.low:.3f}–{s.high:.3f}"
        moved = "yes" if s.moved else ("too few cells to tell" if s.low is None else "no")
        lines.append(
            f"| {SPREAD_CLASSES[s.name]} | {s.cells} | {s.median_ratio:.3f} | {interval} | {s.slower} / {s.faster} "
            f"| {pct(s.spread_a_pct)} / {pct(s.spread_b_pct)} | {s.changed_class} | {moved} |"
        )
    return [*lines, ""]
