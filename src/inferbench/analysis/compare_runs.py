"""Two runs of the same cells side by side (``inferbench compare RUN_A RUN_B``).

Per cell measured ``ok`` in both: the p50 ratio B / A at the cell's own boundary and end to end,
with a 95% interval. Where both runs measured the cell in several fresh processes, the interval is
Welch's on the processes' log p50s (inferbench.analysis.uncertainty): it includes the spread between
processes. Otherwise it comes from the saved per-call samples (a bootstrap of the ratio of medians)
and says so: it then covers only the noise within each process. A change is flagged when its
interval excludes 1. Over many cells that rule flags about one in twenty with nothing changed, so the
comparison also says which flags hold over all its cells at once (``holm``, over the cells with an
interval across processes, at their own boundary: at most a 5% chance that any unchanged cell is among
those that hold), the question "did anything change?" asks.

Then, per class of cells (device-bound GPU, host-bound GPU, CPU), whether the class moved as a whole
(inferbench.analysis.class_shift): a shift every host-bound cell shares hides in their wide intervals.

Then the claims: every claim either run's report makes (the fastest cell per workload, batch and
sequence length against its runner-up, speed-ups over FP32 eager, single-option steps), judged in both
runs by the one verdict rule, with whether its winner changed or its margin moved beyond the noise.

Serving cells (LoadGen's server and offline scenarios) have no p50 of single calls: they get a table of
their own, the QPS each run served (within the latency bound, for server cells), its ratio, whether the
verdict (valid or not) changed and whether the ratio is beyond the project's reproducibility tolerance
(``SERVING_TOLERANCE``: 15% on a GPU, 20% on the CPU).

A run is a results directory (``summary.csv`` and ``cells/`` with the samples beside each record),
or a summary CSV alone (then no samples: single-process cells get no interval). What cannot be
compared is refused by name, with how to fix it (a UserError): a summary the checks refuse
(inferbench.analysis.summary_checks); a run none of whose cells measured anything; a samples file that
cannot be read, or is not its record's (a count of calls other than the record's, a median other than its
pooled p50). Nothing is dropped without a word.

Its work is linear in cells: the runs are joined on the cell's key once, each run's fields are read once
into arrays (inferbench.analysis.comparison.CellTable), and every cell's interval and every claim are
computed for all of them at once, never one cell or claim at a time in Python (benchmarks/tools/compare_scale.py
times it: about 0.1 ms a cell at 100,000 cells).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from inferbench.analysis import decisions, verdicts
from inferbench.analysis.comparison import COLUMNS, CellTable, ClassSpreads
from inferbench.analysis.decisions import SHAPE
from inferbench.analysis.leases import LeaseSpread
from inferbench.analysis.summary import KEY_COLUMNS, load_records, summary_frame
from inferbench.analysis.summary_checks import (
    POOLED_P50_COLUMNS,
    REMAKE_SUMMARY,
    cell_name,
    checked_summary,
    read_summary,
)
from inferbench.analysis.uncertainty import Z95, ratios
from inferbench.core.cells import CellKey, CellRecord
from inferbench.core.errors import UserError
from inferbench.core.storage import samples_path

BOOTSTRAP_RESAMPLES = 2000
#: how far the median of a cell's saved samples may sit from the p50 its record gives, relative: the
#: samples are kept as float32 (a relative rounding of at most 2**-24, 6e-8), the record's p50 was
#: taken from the same calls in float64; anything further apart is another measurement's samples
SAMPLES_P50_RTOL = 1e-5


@dataclass
class Run:
    summary: pd.DataFrame
    cells_dir: Path | None
    #: where the summary was read (a CSV, or the cells/ it was made from): what an error names
    source: Path | None = None
    #: the path the run was given as (a results folder or its summary CSV): what a scenario's own files sit beside
    given: Path | None = None
    #: records read to check their samples, by path: a cell's two boundaries read its record once
    _records: dict[Path, CellRecord] = field(default_factory=dict, repr=False)
    #: what a claim reads of each row of the summary, read once (``table``)
    _table: CellTable | None = field(default=None, repr=False)

    def table(self, rows: pd.DataFrame | None = None) -> CellTable:
        """What a claim reads of the summary's rows (``CellTable``), read once for every use: of ``rows`` (some
        of the summary's rows, by their key) where given."""
        if self._table is None:
            self._table = CellTable.of(self.summary)
        if rows is None:
            return self._table
        keys = self.summary[KEY_COLUMNS].assign(_position=np.arange(len(self.summary)))
        return self._table.take(rows[KEY_COLUMNS].merge(keys, on=KEY_COLUMNS, how="left")["_position"].to_numpy())

    @classmethod
    def load(cls, path: str | Path) -> Run:
        path = Path(path)
        if path.is_file():
            return cls(checked_summary(read_summary(path), path), None, path, path)
        cells = path / "cells"
        if (path / "summary.csv").exists():
            source = path / "summary.csv"
            summary = read_summary(source)
        elif cells.is_dir():
            source = cells
            records = sorted(cells.glob("*/*/*/*.json"))
            if not records:
                raise UserError(
                    f"{cells} has no cell records (*/*/*/*.json): nothing to compare; is it a run's cells/?"
                )
            summary = summary_frame(records)  # a UserError naming every record that cannot be read
        else:
            what = "does not exist" if not path.exists() else "is neither a summary CSV nor a results directory"
            raise UserError(f"{path} {what}: give a run's results directory (summary.csv, cells/) or its summary CSV")
        return cls(checked_summary(summary, source), cells if cells.is_dir() else None, source, path)

    def samples(self, row: pd.Series | dict, boundary: str) -> np.ndarray | None:
        """The saved per-call latencies (ms) of a cell at a boundary, where the run kept them; a
        UserError naming the file where it cannot be read, or is not the record's: a count of calls
        other than the record's, or a median other than its pooled p50 (``SAMPLES_P50_RTOL``)."""
        if self.cells_dir is None:
            return None
        record_path = self.cells_dir / CellKey(*(row[c] for c in KEY_COLUMNS)).relpath
        path = samples_path(record_path, boundary)
        if not path.exists():
            return None
        fix = f"Re-run the cell, or delete {path} (compare then gives the cell no interval from its calls)"
        try:
            seconds = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError) as error:  # truncated, damaged, not an .npy at all
            raise UserError(
                f"{path} cannot be read ({type(error).__name__}: {str(error)[:200]}): the file is damaged or "
                f"truncated. {fix}"
            ) from error
        if seconds.ndim != 1 or seconds.dtype.kind != "f" or not np.isfinite(seconds).all():
            raise UserError(
                f"{path} holds a {seconds.dtype} array of shape {seconds.shape}, not the per-call latencies of a "
                f"cell (1-D finite floats, seconds). {fix}"
            )
        if not seconds.size:
            return None
        values = seconds.astype(np.float64) * 1e3
        expected_calls, expected_p50, said_by = self._expected(record_path, row, boundary)
        median = float(np.median(values))
        wrong_count = expected_calls is not None and values.size != expected_calls
        if wrong_count or not math.isclose(median, expected_p50, rel_tol=SAMPLES_P50_RTOL):
            raise UserError(
                f"{path} holds {values.size} calls with median {median:.6g} ms, but {said_by} says "
                f"{expected_calls if expected_calls is not None else 'an unknown number of'} calls with pooled p50 "
                f"{expected_p50:.6g} ms at the {boundary} boundary: the samples are not this record's "
                f"(rewritten, or left from another measurement). {fix}"
            )
        return values

    def _expected(self, record_path: Path, row: pd.Series | dict, boundary: str) -> tuple[int | None, float, str]:
        """How many calls and which median (ms) a cell's samples at ``boundary`` must have (its pooled p50), and
        what says so: its record where the run has it (and then the summary row compare reads must say the same
        p50), else the summary row."""
        p50_column = COLUMNS[boundary][0]
        count_column = "n_iters" if boundary == "device" else "e2e_n_iters"
        row_p50, row_calls = float(row[p50_column]), row.get(count_column)
        row_calls = int(row_calls) if row_calls is not None and not pd.isna(row_calls) else None
        if not record_path.exists():
            row_pooled = row.get(POOLED_P50_COLUMNS[boundary])
            pooled = float(row_pooled) if row_pooled is not None and not pd.isna(row_pooled) else row_p50
            return row_calls, pooled, f"the summary {self.source}"
        if record_path not in self._records:  # a UserError naming it where it cannot be read
            self._records[record_path] = load_records([record_path])[0]
        record = self._records[record_path]
        if boundary == "end_to_end":
            measured = record.end_to_end or {}
        else:
            measured = {"n_iters": record.n_iters, "latency_ms": record.latency_ms}
        latency = measured.get("latency_ms") or {}
        record_p50 = latency.get("p50")
        record_calls = measured.get("n_iters")
        if record_p50 is None:
            return row_calls, row_p50, f"the summary {self.source}"
        if not math.isclose(record_p50, row_p50, rel_tol=SAMPLES_P50_RTOL):
            raise UserError(
                f"{self.source} says p50 {row_p50:.6g} ms for {cell_name(row)} at the {boundary} boundary, its "
                f"record {record_path} says {record_p50:.6g} ms: the summary is not of these records; "
                f"{REMAKE_SUMMARY}"
            )
        return record_calls, latency.get("p50_pooled", record_p50), f"its record {record_path}"


def bootstrap_medians(values: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """The medians of ``resamples`` bootstrap resamples of ``values`` (each of its size, drawn with
    replacement), drawn without making any resample: memory and time O(size + resamples), not
    O(size x resamples) (a (2000, 854,727) array of indices is 12.7 GiB).

    A resample's k-th smallest value is ``sorted[floor(n U)]``, U the k-th smallest of n uniforms,
    which is Beta(k, n + 1 - k); the next one up is the smallest of the n - k uniforms above U,
    U + (1 - U) Beta(1, n - k). The median is the middle one (n odd) or the mean of the middle two
    (n even), as ``np.median`` takes it: the same distribution as resampling, exactly."""
    ordered = np.sort(values)
    n = ordered.size
    k = (n + 1) // 2  # 1-based: the middle order statistic (n odd), the lower of the middle two (n even)
    lower = rng.beta(k, n + 1 - k, size=resamples)
    # min(): a draw of exactly 1.0 (floating-point rounding) is still the largest value
    medians = ordered[np.minimum((lower * n).astype(np.int64), n - 1)]
    if n % 2 == 0:
        upper = lower + (1 - lower) * rng.beta(1, n - k, size=resamples)
        medians = (medians + ordered[np.minimum((upper * n).astype(np.int64), n - 1)]) / 2
    return medians


def bootstrap_ratio(a: np.ndarray, b: np.ndarray, seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap interval of median(b) / median(a), each run's calls resampled."""
    rng = np.random.default_rng(seed)
    ratios = bootstrap_medians(b, BOOTSTRAP_RESAMPLES, rng) / bootstrap_medians(a, BOOTSTRAP_RESAMPLES, rng)
    return float(np.percentile(ratios, 2.5)), float(np.percentile(ratios, 97.5))


#: what compare_cells reads of a cell's row to find its saved calls (the whole summary has ~90 columns a row)
PAIR_COLUMNS = [*KEY_COLUMNS, "bound", "timing", "n_iters", "e2e_n_iters", *POOLED_P50_COLUMNS.values(),
                *dict.fromkeys(column for columns in COLUMNS.values() for column in columns)]  # fmt: skip


def paired_positions(a: pd.DataFrame, b: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The cells in both ``a`` and ``b`` (each at most once: checked_summary), as their positions in each, in
    ``a``'s order: one join on the key (a frame looked up, or iterated by row, per cell costs milliseconds a
    cell)."""
    keys_a = a[KEY_COLUMNS].assign(_a=np.arange(len(a)))
    keys_b = b[KEY_COLUMNS].assign(_b=np.arange(len(b)))
    joined = keys_a.merge(keys_b, on=KEY_COLUMNS, validate="one_to_one").sort_values("_a")
    return joined["_a"].to_numpy(), joined["_b"].to_numpy()


def _known(values: np.ndarray) -> list[float | None]:
    """Numbers as a table holds them: None where unknown."""
    return [None if math.isnan(v) else v for v in values.tolist()]


def compare_cells(run_a: Run, run_b: Run) -> pd.DataFrame:
    """One row per cell ok in both runs: the p50 ratio B / A per boundary, its interval, where the
    interval comes from, and whether the change is beyond the noise. Each run's cells are read once
    (``CellTable``), the intervals across processes made for all cells at once; only a cell without
    them reads its saved calls."""
    a = run_a.summary[(run_a.summary["status"] == "ok") & (run_a.summary["scenario"] == "single")]
    b = run_b.summary[(run_b.summary["status"] == "ok") & (run_b.summary["scenario"] == "single")]
    table_a, table_b = run_a.table(a), run_b.table(b)
    at_a, at_b = paired_positions(a, b)
    if not len(at_a):
        return pd.DataFrame()
    cells_a = table_a.moderated(ClassSpreads.of_table(table_a)).take(at_a)
    cells_b = table_b.moderated(ClassSpreads.of_table(table_b)).take(at_b)
    out: dict[str, list] = {c: a[c].iloc[at_a].tolist() for c in KEY_COLUMNS}
    bound_a, bound_b = a["bound"].iloc[at_a].tolist(), b["bound"].iloc[at_b].tolist()
    out["bound"] = [mine if isinstance(mine, str) else theirs for mine, theirs in zip(bound_b, bound_a, strict=True)]
    # per boundary: what is known for every cell at once; the rest from the calls, cell by cell below
    fallbacks = []
    for boundary, prefix in (("device", ""), ("end_to_end", "e2e_")):
        p50_col = COLUMNS[boundary][0]
        written_a, written_b = a[p50_col].to_numpy(dtype=float)[at_a], b[p50_col].to_numpy(dtype=float)[at_b]
        timed = ~np.isnan(written_a) & ~np.isnan(written_b)  # else no end-to-end loop (checked_summary: above 0)
        # each cell's figure as its processes make it (inferbench.analysis.comparison.CellTable)
        p50_a, p50_b = cells_a.p50[boundary], cells_b.p50[boundary]
        if not timed.any():
            continue
        spread_a, spread_b = cells_a.spreads[boundary], cells_b.spreads[boundary]
        across = timed & spread_a.known & spread_b.known
        found = ratios(spread_a, spread_b, p50_b / p50_a)
        low, high = np.where(across, found.low, np.nan), np.where(across, found.high, np.nan)
        floored = ~np.isnan(spread_a.df) | ~np.isnan(spread_b.df)
        sources = zip(across.tolist(), spread_a.n.tolist(), spread_b.n.tolist(), floored.tolist(), strict=True)
        columns = {
            "p50_a_ms": p50_a.tolist(),
            "p50_b_ms": p50_b.tolist(),
            "ratio": (p50_b / p50_a).tolist(),
            "ratio_low": _known(low),
            "ratio_high": _known(high),
            "p_value": _known(np.where(across, found.p_values(), np.nan)),
            "interval_from": [_across_processes(*source) for source in sources],
        }
        for name, values in columns.items():  # a cell without this boundary has none of its columns (NaN)
            out[prefix + name] = [v if t else math.nan for v, t in zip(values, timed.tolist(), strict=True)]
        fallbacks.append((boundary, prefix, timed, np.flatnonzero(timed & ~across)))
    _from_calls(run_a, run_b, a.iloc[at_a], b.iloc[at_b], fallbacks, out)
    for _, prefix, timed, _ in fallbacks:  # the intervals all known now: whether each excludes 1
        bounds = zip(out[f"{prefix}ratio_low"], out[f"{prefix}ratio_high"], timed.tolist(), strict=True)
        out[f"{prefix}change"] = [_change(low, high) if t else math.nan for low, high, t in bounds]
    cells = pd.DataFrame(_in_row_order(out))
    if "p_value" in cells:
        cells["holds_over_all_cells"] = holm(cells["p_value"])
    return cells


def _across_processes(known: bool, processes_a: int, processes_b: int, floored: bool) -> str:
    """Where a cell's interval across processes comes from ("none" where it has none)."""
    if not known:
        return "none"
    return f"processes ({processes_a} / {processes_b})" + (", at least the pooled spread of their class" * floored)


#: the columns of a boundary, in the order a row of compare_cells gives them
_BOUNDARY_COLUMNS = ["p50_a_ms", "p50_b_ms", "ratio", "ratio_low", "ratio_high", "p_value", "interval_from", "change"]


def _in_row_order(out: dict[str, list]) -> dict[str, list]:
    order = [*KEY_COLUMNS, "bound", *(p + c for p in ("", "e2e_") for c in _BOUNDARY_COLUMNS)]
    return {name: out[name] for name in order if name in out}


def _from_calls(
    run_a: Run,
    run_b: Run,
    a: pd.DataFrame,
    b: pd.DataFrame,
    fallbacks: list[tuple[str, str, np.ndarray, np.ndarray]],
    out: dict[str, list],
) -> None:
    """The interval of each cell without one across processes (``fallbacks``: per boundary, its prefix, which
    cells were timed there, and the positions of those without an interval), from the saved calls of both runs
    where both kept them: a bootstrap of the ratio of medians, which covers only the noise within each process.
    In the cells' order, each cell's boundaries in turn (a samples file that is not its record's is refused at
    the first such cell)."""
    if run_a.cells_dir is None and run_b.cells_dir is None:
        return  # no run kept calls
    wanted = sorted({int(i) for *_, positions in fallbacks for i in positions})
    rows_a = dict(zip(wanted, a[PAIR_COLUMNS].iloc[wanted].to_dict("records"), strict=True))
    rows_b = dict(zip(wanted, b[PAIR_COLUMNS].iloc[wanted].to_dict("records"), strict=True))
    needs = {(int(i), boundary): prefix for boundary, prefix, _, positions in fallbacks for i in positions}
    for i in wanted:
        for boundary in COLUMNS:
            if (prefix := needs.get((i, boundary))) is None:
                continue
            samples_a, samples_b = run_a.samples(rows_a[i], boundary), run_b.samples(rows_b[i], boundary)
            if samples_a is not None and samples_b is not None:
                low, high = bootstrap_ratio(samples_a, samples_b)
                out[f"{prefix}ratio_low"][i], out[f"{prefix}ratio_high"][i] = low, high
                out[f"{prefix}interval_from"][i] = "calls within one process (spread between processes unknown)"


def holm(p_values: pd.Series, alpha: float = 0.05) -> pd.Series:
    """Which changes hold over all the cells at once: at most a chance of ``alpha`` that any unchanged
    cell is among them (Holm's step-down over the cells with a p-value; None for the others). Each cell's
    own 95% interval excludes 1 in about one cell of twenty with nothing changed: over 40 cells, two such
    flags are the noise."""
    known = pd.to_numeric(p_values.dropna(), errors="coerce").sort_values()
    # the k-th smallest of m holds while it and every smaller one is below alpha / (m - k)
    below = known.to_numpy(dtype=float) < alpha / (len(known) - np.arange(len(known)))
    holds = np.full(len(p_values), None, dtype=object)
    holds[p_values.index.get_indexer(known.index)] = np.logical_and.accumulate(below).tolist()
    return pd.Series(holds, index=p_values.index, dtype=object)


def _change(low: float | None, high: float | None) -> str:
    if low is None or high is None or math.isnan(low) or math.isnan(high):
        return "unknown"
    if low > 1:
        return "slower"
    if high < 1:
        return "faster"
    return "within noise"


def common_cells(run_a: Run, run_b: Run) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Each run's summary restricted to the cells ok in both: claims made over the same cells."""
    keys = [frame.loc[frame["status"] == "ok", KEY_COLUMNS] for frame in (run_a.summary, run_b.summary)]
    both = keys[0].merge(keys[1], on=KEY_COLUMNS)
    return tuple(frame.merge(both, on=KEY_COLUMNS) for frame in (run_a.summary, run_b.summary))  # type: ignore[return-value]


def claimed_pairs(summary: pd.DataFrame, table: CellTable) -> pd.DataFrame:
    """Every pair of cells a run's report makes a claim about (``summary``: its measured cells, ``table``
    theirs, floored as its report judges them), as positions into ``summary``: what is claimed, the cell said
    to be faster and the other. The fastest cell per shape against its runner-up, each speed-up over FP32
    eager, each single-option step; the last two where the report has a claim to make."""
    _, fastest = decisions.fastest_pairs(summary, table)
    baseline = decisions.baseline_pairs(summary, table)
    details, steps = decisions.option_step_pairs(summary, table)
    speedup, step = baseline.claims.present, steps.claims.present
    what = ["fastest"] * len(fastest.faster) + ["speed-up over FP32 eager"] * int(speedup.sum())
    what += [f"option step, {change}" for change in details["change"][step].tolist()]
    return pd.DataFrame({
        "what": what,
        "faster": np.concatenate([fastest.faster, baseline.faster[speedup], steps.faster[step]]).astype(np.int64),
        "slower": np.concatenate([fastest.slower, baseline.slower[speedup], steps.slower[step]]).astype(np.int64),
    })  # fmt: skip


def _names(summary: pd.DataFrame, positions: np.ndarray) -> list[str]:
    columns = (summary[c].iloc[positions].tolist() for c in ("engine", "precision", "device"))
    return [f"{engine} {precision} {device}" for engine, precision, device in zip(*columns, strict=True)]


def _cell_ids(summaries: list[pd.DataFrame]) -> list[np.ndarray]:
    """Each run's cells numbered alike (one number per key, whichever run has it)."""
    key = KEY_COLUMNS[:7]
    both = pd.concat([summary[key] for summary in summaries], ignore_index=True)
    ids = both.groupby(key, sort=False, dropna=False).ngroup().to_numpy()
    return np.split(ids, np.cumsum([len(summary) for summary in summaries])[:-1])


def claim_agreement(run_a: Run, run_b: Run, between: LeaseSpread | None = None) -> pd.DataFrame:
    """Every claim either run's report makes, over the cells ok in both, judged in both runs by the one
    rule (inferbench.analysis.verdicts): as each run's report judges it (its own spread per class), and
    the winner in each. Whether the margin moved beyond the noise: the two claims' log ratios differ by
    more than 1.96 standard errors of both, each counting ``between`` (how far each class moved between
    these two runs) too. A problem is a claim significant in either run whose winner changes or whose
    margin moves beyond it. Each run's cells are read once and every claim is judged at once, in arrays."""
    columns = [*SHAPE, "claim", "boundary", "run_a", "run_b", "margin_change", "margin_change_low",
               "margin_change_high", "winner_changed", "margin_moved", "significant", "agree", "problem"]  # fmt: skip
    summaries = [decisions.measured(s) for s in common_cells(run_a, run_b)]
    tables = [run.table(summary) for run, summary in zip((run_a, run_b), summaries, strict=True)]
    own = [ClassSpreads.of_table(table) for table in tables]
    # as each run's report judges its claims (its own spread per class), then with the spread between the runs
    judging = [
        [table.moderated(spreads) for table, spreads in zip(tables, own, strict=True)],
        [
            table.moderated(ClassSpreads(spreads.priors, between, spreads.between))
            for table, spreads in zip(tables, own, strict=True)
        ],
    ]
    ids = _cell_ids(summaries)
    # every run's claims by cell number, the first run's first: one claim per pair, named as the first run to
    # make it names it (the other may name it reversed)
    claimed = []
    for summary, table, numbers in zip(summaries, judging[0], ids, strict=True):
        pairs = claimed_pairs(summary, table)
        claimed.append(pairs.assign(faster=numbers[pairs["faster"]], slower=numbers[pairs["slower"]]))
    every = pd.concat(claimed, ignore_index=True)
    pair = np.sort(every[["faster", "slower"]].to_numpy(), axis=1)
    every = every[~every.assign(low=pair[:, 0], high=pair[:, 1]).duplicated(["what", "low", "high"])]
    # each claim's cells in each run (-1: the run lacks it, and makes no claim)
    count = max(int(numbers.max(initial=-1)) for numbers in ids) + 1
    positions = []
    for numbers in ids:
        where = np.full(count, -1)
        where[numbers] = np.arange(len(numbers))
        positions.append([where[every[side].to_numpy(dtype=np.int64)] for side in ("faster", "slower")])
    in_both = np.logical_and.reduce([cells >= 0 for pair in positions for cells in pair])
    positions = [[cells[in_both] for cells in pair] for pair in positions]
    judged = [
        verdicts.claims(table.take(faster), table.take(slower))
        for tables_of_runs in judging
        for (faster, slower), table in zip(positions, tables_of_runs, strict=True)
    ]
    made = np.logical_and.reduce([found.present for found in judged])
    if not made.any():
        return pd.DataFrame([], columns=columns)
    a, b, a_noisy, b_noisy = (found.take(made) for found in judged)
    what = every["what"].to_numpy()[in_both][made]
    first, (faster, slower) = summaries[0], (cells[made] for cells in positions[0])
    with np.errstate(invalid="ignore"):
        winner_changed = (a.ratio.value > 1) != (b.ratio.value > 1)
        change = b.ratio.value / a.ratio.value
        half = Z95 * np.hypot(a_noisy.ratio.log_se, b_noisy.ratio.log_se)  # NaN: a spread unknown
        moved = np.abs(np.log(change)) > half
    known = ~np.isnan(half)
    significant = np.equal(a.significant(), True) | np.equal(b.significant(), True)
    moved_or_none = np.where(known, moved, None)
    names = zip(what.tolist(), _names(first, faster), _names(first, slower), strict=True)
    frame = {c: first[c].iloc[faster].tolist() for c in SHAPE}
    frame |= {"claim": [f"{w}: {f} over {s}" for w, f, s in names], "boundary": a.boundary.tolist()}
    for name, found in (("run_a", a), ("run_b", b)):
        said = zip(found.ratio.value.tolist(), found.verdicts(), strict=True)
        frame[name] = [f"{value:.3g}× ({verdict})" for value, verdict in said]
    frame |= {
        "margin_change": change.tolist(),
        "margin_change_low": _known(np.where(known, change * np.exp(-half), np.nan)),
        "margin_change_high": _known(np.where(known, change * np.exp(half), np.nan)),
        "winner_changed": winner_changed.tolist(),
        "margin_moved": moved_or_none.tolist(),
        "significant": significant.tolist(),
        "agree": (~winner_changed & ~(known & moved)).tolist(),
        "problem": (significant & (winner_changed | (known & moved))).tolist(),
    }
    return pd.DataFrame(frame, columns=columns)
