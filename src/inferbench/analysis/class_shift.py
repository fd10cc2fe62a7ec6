"""Whether a whole class of cells moved between two runs, which one cell's interval cannot say.

Each cell's interval answers "did this cell change?". A host-bound cell's is wide (its processes move
by 10-75% on shared VMs), so a shift that every host-bound cell shares, set by the run's conditions
(another GPU measuring beside it, a slower host) and not by any engine, hides in them, or shows as a
few cells flagged one way: 2 x H200, gpu=2 against gpu=1, 7 of 27 host-bound cells flagged slower and
none faster. Per class (inferbench.analysis.comparison.spread_class): the median of its cells' B / A
ratios, a 95% interval from resampling the cells, how many cells read slower and faster, and for scale
the class's median spread between processes in each run. A class whose interval excludes 1 moved as
a whole.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from inferbench.analysis.comparison import SPREAD_CLASSES, spread_class
from inferbench.analysis.leases import MIN_CELLS
from inferbench.analysis.summary import KEY_COLUMNS

RESAMPLES = 2000
#: the column of a summary with each cell's spread between its processes ((max - min) / median, %)
SPREAD_COLUMN = "repeat_p50_spread_pct"


@dataclass(frozen=True)
class ClassShift:
    """How one class of cells moved from run A to run B."""

    name: str
    cells: int
    median_ratio: float
    low: float
    high: float
    slower: int
    faster: int
    #: the class's median spread between processes in run A and in run B (%), None where unknown
    spread_a_pct: float | None
    spread_b_pct: float | None

    @property
    def moved(self) -> bool:
        return self.low > 1 or self.high < 1


def class_shifts(
    cells: pd.DataFrame, summary_a: pd.DataFrame, summary_b: pd.DataFrame, seed: int = 0
) -> list[ClassShift]:
    """Per class with at least ``MIN_CELLS`` cells in ``cells`` (compare_cells' rows: the key columns,
    ``bound`` and ``ratio``), in SPREAD_CLASSES' order."""
    if cells.empty or "ratio" not in cells:
        return []
    rng = np.random.default_rng(seed)
    spreads = [_spreads(summary, cells) for summary in (summary_a, summary_b)]
    classes = cells.apply(spread_class, axis=1)
    shifts = []
    for name in SPREAD_CLASSES:
        members = cells[(classes == name) & (cells["ratio"] > 0)]
        if len(members) < MIN_CELLS:
            continue
        logs = np.log(members["ratio"].to_numpy(dtype=float))
        resampled = np.median(logs[rng.integers(0, len(logs), size=(RESAMPLES, len(logs)))], axis=1)
        low, high = np.percentile(resampled, [2.5, 97.5])
        spread_a, spread_b = (_median(s[classes == name]) for s in spreads)
        shifts.append(
            ClassShift(
                name=name,
                cells=len(members),
                median_ratio=math.exp(float(np.median(logs))),
                low=math.exp(float(low)),
                high=math.exp(float(high)),
                slower=int((logs > 0).sum()),
                faster=int((logs < 0).sum()),
                spread_a_pct=spread_a,
                spread_b_pct=spread_b,
            )
        )
    return shifts


def _spreads(summary: pd.DataFrame, cells: pd.DataFrame) -> pd.Series:
    """Each of ``cells``' spread between processes in ``summary`` (NaN where it has none), aligned."""
    if SPREAD_COLUMN not in summary:
        return pd.Series(np.nan, index=cells.index)
    key = [c for c in KEY_COLUMNS if c in summary and c in cells]
    ok = summary[summary["status"] == "ok"] if "status" in summary else summary
    spread = ok[[*key, SPREAD_COLUMN]].drop_duplicates(key)
    merged = cells[key].merge(spread, on=key, how="left")
    return pd.Series(pd.to_numeric(merged[SPREAD_COLUMN], errors="coerce").to_numpy(), index=cells.index)


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
        "Per class, the median B / A over its cells (95% interval from resampling the cells): a class whose "
        "interval excludes 1 moved as a whole, whatever each cell's own interval says.",
        "",
        "| class | cells | median B / A | 95% interval | slower / faster | spread between processes, A / B "
        "(median) | moved as a whole |",
        "| --- | ---: | ---: | --- | ---: | ---: | --- |",
    ]
    for s in shifts:
        lines.append(
            f"| {SPREAD_CLASSES[s.name]} | {s.cells} | {s.median_ratio:.3f} | {s.low:.3f}–{s.high:.3f} | "
            f"{s.slower} / {s.faster} | {pct(s.spread_a_pct)} / {pct(s.spread_b_pct)} | "
            f"{'yes' if s.moved else 'no'} |"
        )
    return [*lines, ""]
