"""Like with like: the one rule for the timing boundary at which two (or more) cells are compared,
and their p50 ratio with an interval that counts the spread between processes.

Every cell is timed at its engine's own boundary (``device``: inputs already where the engine
computes, outputs left there; or ``end_to_end`` for engines that only have that) and end to end
(host arrays in, a host array out). Cells are compared at ``device`` only when they all ran on one
device and every one's own boundary is ``device``; otherwise end to end, the only boundary that
includes the copies a device change or a host-to-host engine pays.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pandas as pd

from inferbench.analysis.uncertainty import CellSpread, Ratio, SpreadFloor, ratio

if TYPE_CHECKING:
    from inferbench.analysis.leases import LeaseSpread

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


def _get(row: Any, column: str) -> Any:
    """A field of a summary row (a Series, a dict or a namedtuple), None where missing or NaN."""
    value = getattr(row, column, None) if isinstance(row, tuple) else row.get(column)
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def boundary_of(cells: pd.DataFrame | Iterable[Any]) -> str:
    """The boundary at which ``cells`` (summary rows) are compared: ``device`` when all ran on one
    device and every engine's own boundary is ``device``, else ``end_to_end``."""
    if isinstance(cells, pd.DataFrame):
        devices = set(cells["device"])
        timings = set(cells["timing"].fillna("device")) if "timing" in cells else {"device"}
    else:
        rows = list(cells)
        devices = {_get(r, "device") for r in rows}
        timings = {_get(r, "timing") or "device" for r in rows}
    return "device" if len(devices) <= 1 and timings <= {"device"} else "end_to_end"


def p50_at(frame: pd.DataFrame, boundary: str) -> pd.Series:
    """Each row's p50 (ms) at ``boundary``; end to end falls back to the engine's own p50 where that
    boundary is already end to end (no second loop was needed)."""
    if boundary == "device":
        return frame["latency_p50_ms"]
    e2e = frame["e2e_latency_p50_ms"] if "e2e_latency_p50_ms" in frame else pd.Series(index=frame.index, dtype=float)
    return e2e.fillna(frame["latency_p50_ms"])


def items_per_call(frame: pd.DataFrame) -> pd.Series:
    """Items one timed call handles: the record's count (an epoch's samples), else the batch."""
    items = frame["items_per_call"] if "items_per_call" in frame else pd.Series(index=frame.index, dtype=float)
    return pd.to_numeric(items, errors="coerce").fillna(frame["batch_size"]).astype(float)


def rate_at(frame: pd.DataFrame, boundary: str) -> pd.Series:
    """Each row's items/s at ``boundary``: items per call over the p50 there (``p50_at``). The report's one
    throughput: the same cell never shows two (a record's ``throughput_per_s`` is items over the mean)."""
    return items_per_call(frame) / p50_at(frame, boundary) * 1e3


def p50_of(row: Any, boundary: str) -> float | None:
    """One row's p50 (ms) at ``boundary`` (as ``p50_at``)."""
    value = _get(row, "e2e_latency_p50_ms") if boundary == "end_to_end" else None
    value = value if value is not None else _get(row, "latency_p50_ms")
    return float(value) if value is not None else None


#: what each class of cells (``spread_class``) is, in words
SPREAD_CLASSES = {
    "device": "device-bound GPU cells",
    "host": "host-bound GPU cells (the GPU waits for the thread launching its kernels)",
    "cpu": "CPU cells",
}


def spread_class(row: Any) -> str:
    """``device`` for a GPU cell found device-bound, ``host`` for another GPU cell (host-bound or not
    classified: its time follows the host thread launching its kernels), ``cpu`` for a CPU cell."""
    if _get(row, "device") != "cuda":
        return "cpu"
    return "device" if _get(row, "bound") == "device" else "host"


class SpreadFloors:
    """Per class (``spread_class``) and boundary, the between-process spread pooled over the class's
    cells of one run: the least spread a cell of that class is taken to have. With ``leases`` (the
    spread between leases measured on earlier runs: inferbench.analysis.leases), each cell's spread
    also counts how far its class moves from one lease to the next."""

    def __init__(self, floors: dict[tuple[str, str], SpreadFloor], leases: LeaseSpread | None = None) -> None:
        self.floors = floors
        self.leases = leases

    @classmethod
    def of(cls, summary: pd.DataFrame, leases: LeaseSpread | None = None) -> SpreadFloors:
        ok = summary[summary["status"] == "ok"] if "status" in summary else summary
        floors: dict[tuple[str, str], SpreadFloor] = {}
        rows = list(ok.itertuples(index=False))
        for boundary in COLUMNS:
            by_class: dict[str, list[CellSpread]] = {}
            for row in rows:
                spread = spread_at(row, boundary)
                if spread is not None and spread.n > 1:
                    by_class.setdefault(spread_class(row), []).append(spread)
            for name, spreads in by_class.items():
                if (floor := SpreadFloor.pooled(spreads)) is not None:
                    floors[(name, boundary)] = floor
        return cls(floors, leases)

    def get(self, row: Any, boundary: str) -> SpreadFloor | None:
        return self.floors.get((spread_class(row), boundary))

    def lease_sd(self, row: Any) -> float:
        """How far a cell of this row's class moves between leases (sd of log p50; 0 where unknown)."""
        return self.leases.sd_log.get(spread_class(row), 0.0) if self.leases is not None else 0.0


def spread_at(row: Any, boundary: str, floors: SpreadFloors | None = None) -> CellSpread | None:
    """A summary row's p50 across its processes at ``boundary`` (see inferbench.analysis.uncertainty),
    never narrower than its class's pooled spread in ``floors``."""
    p50_col, by_process_col, low_col, high_col = COLUMNS[boundary]
    p50 = _get(row, p50_col)
    if p50 is None and boundary == "end_to_end":  # the engine's own boundary is end to end
        p50_col, by_process_col, low_col, high_col = COLUMNS["device"]
        p50 = _get(row, p50_col)
    values = _by_process(row, by_process_col, p50)
    spread = CellSpread.from_processes(values, _get(row, low_col), _get(row, high_col))
    if spread is None or floors is None:
        return spread
    return spread.with_floor(floors.get(row, boundary)).with_lease(floors.lease_sd(row))


def _by_process(row: Any, column: str, p50: Any) -> list[float]:
    by_process = _get(row, column)
    values = [float(v) for v in str(by_process).split(";") if v] if by_process is not None else []
    if not values and p50 is not None:
        values = [float(p50)]  # summaries from before processes were recorded: one process
    return values


def process_p50s(row: Any, boundary: str) -> list[float]:
    """Each process's p50 (ms) of a summary row at ``boundary`` (the engine's own where end to end is it)."""
    p50_col, by_process_col, _, _ = COLUMNS[boundary]
    if boundary == "end_to_end" and _get(row, p50_col) is None:
        p50_col, by_process_col, _, _ = COLUMNS["device"]
    return _by_process(row, by_process_col, _get(row, p50_col))


def compare(faster: Any, slower: Any, boundary: str | None = None, floors: SpreadFloors | None = None) -> Ratio | None:
    """p50 of ``slower`` / p50 of ``faster`` at the common boundary (> 1: ``faster`` is faster), with
    its interval (each cell's spread at least its class's in ``floors``); None where either cell has
    no p50 there."""
    boundary = boundary or boundary_of([faster, slower])
    spread_a, spread_b = spread_at(faster, boundary, floors), spread_at(slower, boundary, floors)
    p50_a, p50_b = p50_of(faster, boundary), p50_of(slower, boundary)
    if spread_a is None or spread_b is None or not p50_a or p50_b is None:
        return None
    return ratio(spread_a, spread_b, p50_b / p50_a)


def _numbers(frame: pd.DataFrame, name: str) -> pd.Series:
    """A summary column as numbers (missing, or an older summary without it: NaN)."""
    return pd.to_numeric(frame.get(name, pd.Series(index=frame.index)), errors="coerce")


def inverted_boundaries(summary: pd.DataFrame) -> pd.DataFrame:
    """The ok cells timed at the device boundary whose end-to-end p50 is below their device p50. One cell
    cannot return host arrays sooner than it computes on inputs already staged, so there its two
    boundaries disagree: the host moved between the two loops (before they alternated in rounds), or the
    two loops cost the host differently. Columns added: ``e2e_over_device``, and ``beyond_intervals``:
    True where the two p50s' 95% intervals do not overlap, False where they do (the order is noise), None
    where a record (or a summary older than its interval columns) has no intervals."""
    columns = ("status", "timing", "latency_p50_ms", "e2e_latency_p50_ms")
    if summary.empty or any(c not in summary for c in columns):
        return summary.iloc[0:0]
    device = summary[(summary["status"] == "ok") & (summary["timing"] == "device")]
    # a copy: one block per column (as read_csv leaves a wide summary) warns on every column added
    inverted = device[_numbers(device, "e2e_latency_p50_ms") < _numbers(device, "latency_p50_ms")].copy()
    e2e_high = _numbers(inverted, "e2e_latency_p50_ci95_high_ms")
    device_low = _numbers(inverted, "latency_p50_ci95_low_ms")
    known = e2e_high.notna() & device_low.notna()
    return inverted.assign(
        e2e_over_device=inverted["e2e_latency_p50_ms"] / inverted["latency_p50_ms"],
        beyond_intervals=(e2e_high < device_low).astype(object).where(known, None),
    )
