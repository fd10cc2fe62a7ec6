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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from itertools import chain
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from inferbench.analysis.uncertainty import CellSpread, ClassSpread, Ratio, Ratios, Spreads, ratios
from inferbench.core.stats import fast_mode_p50s

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


def _missing(value: Any) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _get(row: Any, column: str) -> Any:
    """A field of a summary row (a Series, a dict or a namedtuple), None where missing or NaN."""
    value = getattr(row, column, None) if isinstance(row, tuple) else row.get(column)
    return None if _missing(value) else value


def _timed_at_device(timings: np.ndarray) -> np.ndarray:
    """Whether each engine's own boundary (``timings``: objects, None where missing) is the device one (a
    summary from before timings were recorded: it is)."""
    return np.equal(timings, None) | (timings == "") | (timings == "device")


def boundary_of(cells: pd.DataFrame | Iterable[Any]) -> str:
    """The boundary at which ``cells`` (summary rows) are compared: ``device`` when all ran on one
    device and every engine's own boundary is ``device``, else ``end_to_end``."""
    if isinstance(cells, pd.DataFrame):
        devices = set(cells["device"])
    else:
        cells = list(cells)
        devices = {_get(r, "device") for r in cells}
    return "device" if len(devices) <= 1 and _timed_at_device(_values(cells, "timing", False)).all() else "end_to_end"


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


def _class_of(device: Any, bound: Any) -> str:
    if device != "cuda":
        return "cpu"
    return "device" if bound == "device" else "host"


def spread_class(row: Any) -> str:
    """``device`` for a GPU cell found device-bound, ``host`` for another GPU cell (host-bound or not
    classified: its time follows the host thread launching its kernels), ``cpu`` for a CPU cell."""
    return _class_of(_get(row, "device"), _get(row, "bound"))


def spread_classes(frame: pd.DataFrame) -> pd.Series:
    """``spread_class`` of every row of a frame with ``device`` and ``bound`` columns, at once."""
    bound = frame["bound"] if "bound" in frame else pd.Series(None, index=frame.index, dtype=object)
    gpu, device_bound = frame["device"].eq("cuda"), bound.eq("device")
    return pd.Series(np.where(~gpu, "cpu", np.where(device_bound, "device", "host")), index=frame.index, dtype=object)


def _split(by_process: Any) -> list[float]:
    """Each process's p50 written in a summary field (';'-separated; None: missing, none)."""
    return [] if by_process is None else list(map(float, filter(None, str(by_process).split(";"))))


def _process_p50s(by_process: Sequence[Any], p50: np.ndarray) -> np.ndarray:
    """Each row's process p50s (ms) as a row of a 2-D array, NaN past its last: each field parsed once; a
    row without any (a summary from before processes were recorded) is its p50 alone, one process."""
    parsed = [_split(value) for value in by_process]
    counts = np.fromiter(map(len, parsed), dtype=np.int64, count=len(parsed))
    p50s = np.full((len(parsed), max(1, int(counts.max(initial=0)))), np.nan)
    starts = np.cumsum(counts) - counts
    flat = np.fromiter(chain.from_iterable(parsed), dtype=float, count=int(counts.sum()))
    places = np.arange(len(flat)) - np.repeat(starts, counts)
    p50s[np.repeat(np.arange(len(parsed)), counts), places] = flat
    alone = counts == 0
    p50s[alone, 0] = p50[alone]
    return p50s


def process_p50_rows(by_process: pd.Series, p50: pd.Series) -> np.ndarray:
    """``_process_p50s`` of a summary's by-process column and its p50 column (missing fields: none)."""
    texts = by_process.astype(object).where(by_process.notna(), None).tolist()
    return _process_p50s(texts, pd.to_numeric(p50, errors="coerce").to_numpy(dtype=float, na_value=np.nan))


def is_true(value: Any) -> bool:
    """A boolean summary field as written or read back (True, np.True_, "True", 1): True only where it says so."""
    return str(value).lower() in ("true", "1", "1.0")


def _number(value: Any) -> float:
    try:
        return math.nan if value is None else float(value)
    except (TypeError, ValueError):
        return math.nan


def _values(cells: pd.DataFrame | Sequence[Any], column: str, numbers: bool) -> np.ndarray:
    """A column of ``cells`` (a frame, or summary rows of any kind), numbers as floats (NaN where missing or
    not a number), else as objects (None where missing)."""
    if not isinstance(cells, pd.DataFrame):  # a few rows (a claim of the report's): no frame to make
        fields = [_get(row, column) for row in cells]
        if numbers:
            return np.array([_number(v) for v in fields], dtype=float)
        objects = np.empty(len(fields), dtype=object)
        objects[:] = fields
        return objects
    values = cells[column] if column in cells else pd.Series(None, index=cells.index, dtype=object)
    if numbers:
        return pd.to_numeric(values, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    return values.astype(object).where(values.notna(), None).to_numpy(dtype=object)


@dataclass(frozen=True)
class CellTable:
    """What a claim reads of each row of a summary, read once for all its rows (every field parsed once):
    its device, whether its engine's own boundary is the device one, its class (``spread_class``) and, per
    boundary, its p50 (``p50_at``) and its spread across processes, moderated by its class's and widened by
    what moves a whole cell where ``moderated`` gave them (``leases``: how many leases those rest on)."""

    device: np.ndarray
    timed_at_device: np.ndarray
    classes: np.ndarray
    p50: dict[str, np.ndarray]
    #: per boundary, each cell's spread over every process, and over those of its fast mode alone (which a
    #: class's A/A pairs calibrate: ``moderated``)
    spreads: dict[str, Spreads]
    fast: dict[str, Spreads]
    leases: int = 1

    @classmethod
    def of(cls, cells: pd.DataFrame | Iterable[Any]) -> CellTable:
        """Of a summary frame, or of summary rows (Series, dicts or namedtuples)."""
        cells = cells if isinstance(cells, pd.DataFrame) else list(cells)
        device = _values(cells, "device", numbers=False)
        timing = _values(cells, "timing", numbers=False)
        bound = _values(cells, "bound", numbers=False)
        numbers = {c: _values(cells, c, numbers=True) for cs in COLUMNS.values() for c in (cs[0], cs[2], cs[3])}
        texts = {c: _values(cells, c, numbers=False) for c in (COLUMNS["device"][1], COLUMNS["end_to_end"][1])}
        p50, spreads, fast = {}, {}, {}
        for boundary, (p50_col, by_process, low, high) in COLUMNS.items():
            p50s = _process_p50s(texts[by_process], numbers[p50_col])
            # the cell's p50 as its processes make it (a summary from before the fast mode held their median)
            p50[boundary] = fast_mode_p50s(p50s)
            spreads[boundary] = Spreads.from_processes(p50s, numbers[low], numbers[high])
            fast[boundary] = Spreads.from_processes(p50s, numbers[low], numbers[high], fast_only=True)
        # end to end where the engine's own boundary already is: its own p50, processes and interval
        own = np.isnan(p50["end_to_end"])
        p50["end_to_end"] = np.where(own, p50["device"], p50["end_to_end"])
        spreads["end_to_end"] = spreads["device"].where(own, spreads["end_to_end"])
        fast["end_to_end"] = fast["device"].where(own, fast["end_to_end"])
        # a cell timed only while other work held the host's cores decides nothing (inferbench.analysis.verdicts)
        contended = _values(cells, "host_contended", numbers=False)
        contended = np.array([is_true(v) for v in contended.tolist()], dtype=bool)
        spreads = {boundary: replace(spread, contended=contended) for boundary, spread in spreads.items()}
        fast = {boundary: replace(spread, contended=contended) for boundary, spread in fast.items()}
        classes = [_class_of(d, b) for d, b in zip(device.tolist(), bound.tolist(), strict=True)]
        return cls(device, _timed_at_device(timing), np.array(classes, dtype=object), p50, spreads, fast)

    def __len__(self) -> int:
        return len(self.device)

    def take(self, positions: np.ndarray) -> CellTable:
        return CellTable(
            self.device[positions],
            self.timed_at_device[positions],
            self.classes[positions],
            {boundary: p50[positions] for boundary, p50 in self.p50.items()},
            {boundary: spreads.take(positions) for boundary, spreads in self.spreads.items()},
            {boundary: spreads.take(positions) for boundary, spreads in self.fast.items()},
            self.leases,
        )

    def moderated(self, classes: ClassSpreads | None) -> CellTable:
        """Each spread moderated by its class's in ``classes``, and widened by how far a whole cell of its
        class moves (between identical cells of the run, between leases) where ``classes`` knows that. A class
        whose A/A pairs the run measured (``ClassSpreads.calibrated``) is judged by its cells' fast modes: what
        their spread misses, those pairs measure; any other by every process's spread, and a cell of it whose
        processes landed in several modes (some beyond its fast mode) is unstable."""
        if classes is None:
            return self
        members = {name: self.classes == name for name in pd.unique(self.classes)}
        spreads = {}
        for boundary, every in self.spreads.items():
            calibrated = np.array([(name, boundary) in classes.calibrated for name in self.classes], dtype=bool)
            spread = self.fast[boundary].where(calibrated, every)
            sd, df, typical, typical_df = (np.full(len(self), np.nan) for _ in range(4))
            shift = np.zeros(len(self))
            for name, member in members.items():
                if (prior := classes.priors.get((name, boundary))) is not None:
                    sd[member], df[member] = prior.sd_log, prior.df
                    typical[member], typical_df[member] = prior.typical_sd_log, prior.typical_df
                shift[member] = classes.shift_sd(name, boundary)
            moderated = spread.moderated(sd, df, typical, typical_df).with_shift(shift)
            # without twins, nothing measures how far a cell whose processes landed in several modes can miss:
            # it is unstable, judged by its processes
            modes = ~calibrated & (spread.fast < spread.processes)
            spreads[boundary] = replace(moderated, unstable=moderated.unstable | modes)
        leases = classes.leases.leases if classes.leases is not None else 1
        return replace(self, spreads=spreads, leases=leases)


#: the columns that say what a cell computes, besides its engine variant's name: two ok cells equal in all
#: of them are the same configuration measured twice (an A/A pair, ``twin_pairs``)
CONFIGURATION_COLUMNS = ("workload", "engine_impl", "options_id", "precision", "device", "batch_size", "seq_len",
                         "threads", "scenario", "timing", "graph", "precision_mode", "channels_last", "compile_mode",
                         "cuda_graph", "io_binding", "tf32", "fusions", "host_input")  # fmt: skip


def configuration_keys(cells: pd.DataFrame, leave_out: tuple[str, ...] = ()) -> pd.Series:
    """Each row's configuration as one string: its ``CONFIGURATION_COLUMNS`` (those present, less
    ``leave_out``), missing settings read as text."""
    present = [c for c in CONFIGURATION_COLUMNS if c in cells and c not in leave_out]
    return cells[present].map(str).agg("|".join, axis=1)


def twin_pairs(cells: pd.DataFrame) -> list[tuple[int, int]]:
    """Positions (in ``cells``) of pairs of cells of one configuration under two engine names: the run's A/A
    controls. Only a summary that records each cell's options (``options_id``) can tell twins apart from
    variants whose options differ; without it, none."""
    if cells.empty or "options_id" not in cells or "engine" not in cells:
        return []
    keys = configuration_keys(cells).to_numpy()
    pairs: list[tuple[int, int]] = []
    by_key: dict[str, list[int]] = {}
    for position, key in enumerate(keys):
        by_key.setdefault(key, []).append(position)
    engines = cells["engine"].astype(str).to_numpy()
    for positions in by_key.values():
        named = sorted(positions, key=lambda p: engines[p])
        pairs += [(a, b) for a, b in zip(named[::2], named[1::2], strict=False) if engines[a] != engines[b]]
    return pairs


def between_cells_sd(table: CellTable, pairs: Sequence[tuple[int, int]], boundary: str) -> float | None:
    """How far identical cells of a run move apart beyond their fast modes' spread: from A/A pairs (positions
    in ``table``), sd of log p50 of one cell, sqrt(max(0, mean(d^2 / 2 - (s_a^2 / n_a + s_b^2 / n_b) / 2))),
    d the pair's difference of figures (the fast modes' mean log p50s), s and n their fast processes' spread
    and count. None without a pair of cells measured in several processes."""
    if not pairs:
        return None
    a, b = (np.array(side) for side in zip(*pairs, strict=True))
    spread_a, spread_b = table.fast[boundary].take(a), table.fast[boundary].take(b)
    several = (spread_a.processes > 1) & (spread_b.processes > 1)
    known = several & ~(spread_a.contended | spread_b.contended)
    if not known.any():
        return None
    with np.errstate(invalid="ignore", divide="ignore"):
        difference = (spread_a.mean_log - spread_b.mean_log)[known]
        within = (spread_a.sd_log**2 / spread_a.fast + spread_b.sd_log**2 / spread_b.fast)[known]
    return math.sqrt(max(0.0, float(np.mean(difference**2 / 2 - within / 2))))


@dataclass(frozen=True)
class BetweenCells:
    """How far identical cells of one class move apart in a run (``between_cells_sd``), from ``pairs`` A/A pairs."""

    sd_log: float
    pairs: int

    @property
    def pct(self) -> float:
        return 100.0 * (math.exp(self.sd_log) - 1)


class ClassSpreads:
    """Per class (``spread_class``) and boundary, the spread between processes of the class's cells of one
    run, as each cell's prior (``ClassSpread``); how far identical cells of a class move apart in the run
    (``between``: its A/A pairs); and with ``leases`` (the spread between leases measured on earlier runs:
    inferbench.analysis.leases) how far its cells move from one lease to the next."""

    def __init__(
        self,
        priors: dict[tuple[str, str], ClassSpread],
        leases: LeaseSpread | None = None,
        between: dict[tuple[str, str], BetweenCells] | None = None,
    ) -> None:
        self.priors = priors
        self.leases = leases
        self.between = between or {}

    @property
    def calibrated(self) -> set[tuple[str, str]]:
        """The (class, boundary) whose cells are judged by their fast modes' spread: those whose A/A pairs
        measured how far identical cells of the run move apart, which that spread alone would miss (a cell
        whose every process met its host slow)."""
        return set(self.between)

    @classmethod
    def of(cls, summary: pd.DataFrame, leases: LeaseSpread | None = None) -> ClassSpreads:
        ok = summary[summary["status"] == "ok"] if "status" in summary else summary
        ok = ok.reset_index(drop=True)
        return cls.of_table(CellTable.of(ok), leases, twin_pairs(ok))

    @classmethod
    def of_table(
        cls, table: CellTable, leases: LeaseSpread | None = None, twins: Sequence[tuple[int, int]] = ()
    ) -> ClassSpreads:
        """Of the cells of ``table`` (a run's ok cells, their spreads not moderated) and its A/A pairs
        (``twins``: positions in ``table``)."""
        priors: dict[tuple[str, str], ClassSpread] = {}
        between: dict[tuple[str, str], BetweenCells] = {}
        for boundary in table.spreads:
            for name in pd.unique(table.classes):  # in the order the cells first name them
                pairs = [(a, b) for a, b in twins if table.classes[a] == name == table.classes[b]]
                if (sd := between_cells_sd(table, pairs, boundary)) is not None:
                    between[(name, boundary)] = BetweenCells(sd, len(pairs))
                # the spreads the class's cells are judged by (CellTable.moderated)
                spreads = table.fast[boundary] if (name, boundary) in between else table.spreads[boundary]
                several = (spreads.n > 1) & ~spreads.contended & (table.classes == name)  # contention: no spread
                if several.any() and (prior := ClassSpread.fit(spreads.take(several))) is not None:
                    priors[(name, boundary)] = prior
        return cls(priors, leases, between)

    def get(self, row: Any, boundary: str) -> ClassSpread | None:
        return self.priors.get((spread_class(row), boundary))

    def lease_sd(self, row: Any) -> float:
        """How far a cell of this row's class moves between leases (sd of log p50; 0 where unknown)."""
        return self.class_lease_sd(spread_class(row))

    def class_lease_sd(self, name: str) -> float:
        """How far a cell of class ``name`` moves between leases (sd of log p50; 0 where unknown)."""
        return self.leases.sd_log.get(name, 0.0) if self.leases is not None else 0.0

    def shift_sd(self, name: str, boundary: str) -> float:
        """How far a whole cell of class ``name`` moves: between leases, or between identical cells of this
        run where that is wider (a lease's movement already holds the movement within a run)."""
        between = self.between.get((name, boundary))
        return max(self.class_lease_sd(name), between.sd_log if between is not None else 0.0)


def spread_at(row: Any, boundary: str, classes: ClassSpreads | None = None) -> CellSpread | None:
    """A summary row's p50 across its processes at ``boundary`` (see inferbench.analysis.uncertainty),
    moderated by its class's spread in ``classes`` (``CellTable`` of one row)."""
    return CellTable.of([row]).moderated(classes).spreads[boundary].row(0)


def process_p50s(row: Any, boundary: str) -> list[float]:
    """Each process's p50 (ms) of a summary row at ``boundary`` (the engine's own where end to end is it)."""
    p50_col, by_process_col, _, _ = COLUMNS[boundary]
    if boundary == "end_to_end" and _get(row, p50_col) is None:
        p50_col, by_process_col, _, _ = COLUMNS["device"]
    p50 = _get(row, p50_col)
    return _split(_get(row, by_process_col)) or ([float(p50)] if p50 is not None else [])


def pair_boundaries(faster: CellTable, slower: CellTable) -> np.ndarray:
    """Each pair's common boundary (``faster`` and ``slower`` aligned, a pair per entry): ``boundary_of``
    the two cells."""
    at_device = (faster.device == slower.device) & faster.timed_at_device & slower.timed_at_device
    return np.where(at_device, "device", "end_to_end").astype(object)


def pair_ratios(faster: CellTable, slower: CellTable, boundary: str) -> tuple[Ratios, np.ndarray]:
    """Per pair (the tables aligned), p50 of ``slower`` / p50 of ``faster`` at ``boundary`` with its interval
    (``ratios``, centred on the ratio of the pooled p50s), and whether the pair has one: both cells have a
    p50 there, ``faster``'s above 0."""
    p50_a, p50_b = faster.p50[boundary], slower.p50[boundary]
    spread_a, spread_b = faster.spreads[boundary], slower.spreads[boundary]
    present = (spread_a.n > 0) & (spread_b.n > 0) & ~np.isnan(p50_a) & (p50_a != 0) & ~np.isnan(p50_b)
    with np.errstate(invalid="ignore", divide="ignore"):
        return ratios(spread_a, spread_b, p50_b / p50_a), present


def compare(faster: Any, slower: Any, boundary: str | None = None, classes: ClassSpreads | None = None) -> Ratio | None:
    """p50 of ``slower`` / p50 of ``faster`` at the common boundary (> 1: ``faster`` is faster), with
    its interval (each cell's spread moderated by its class's in ``classes``); None where either cell has
    no p50 there (``pair_ratios`` of one pair)."""
    table = CellTable.of([faster, slower]).moderated(classes)
    a, b = table.take(np.array([0])), table.take(np.array([1]))
    found, present = pair_ratios(a, b, boundary or pair_boundaries(a, b)[0])
    return found.row(0) if present[0] else None


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
