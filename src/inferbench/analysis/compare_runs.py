"""Two runs of the same cells side by side (``inferbench compare RUN_A RUN_B``).

Per cell measured ``ok`` in both: the p50 ratio B / A at the cell's own boundary and end to end,
with a 95% interval. Where both runs measured the cell in several fresh processes, the interval is
Welch's on the processes' log p50s (inferbench.analysis.uncertainty): it includes the spread between
processes. Otherwise it comes from the saved per-call samples (a bootstrap of the ratio of medians)
and says so: it then covers only the noise within each process. A change is flagged when its
interval excludes 1.

Then the claims: every claim either run's report makes (the fastest cell per workload, batch and
sequence length against its runner-up, speed-ups over FP32 eager, single-option steps), judged in both
runs by the one verdict rule, with whether its winner changed or its margin moved beyond the noise.

Serving cells (LoadGen's server and offline scenarios) have no p50 of single calls: they get a table of
their own, the QPS each run served (within the latency bound, for server cells), its ratio, whether the
verdict (valid or not) changed and whether the ratio is beyond the project's reproducibility tolerance
(``SERVING_TOLERANCE``: 15% on a GPU, 20% on the CPU).

A run is a results directory (``summary.csv`` and ``cells/`` with the samples beside each record),
or a summary CSV alone (then no samples: single-process cells get no interval).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from inferbench.analysis import decisions
from inferbench.analysis.comparison import COLUMNS, SpreadFloors, spread_at
from inferbench.analysis.decisions import CELL, SHAPE
from inferbench.analysis.leases import LeaseSpread
from inferbench.analysis.summary import KEY_COLUMNS, summary_frame, with_scenario
from inferbench.analysis.uncertainty import Z95, ratio
from inferbench.analysis.verdicts import Claim, claim
from inferbench.core.cells import CellKey

BOOTSTRAP_RESAMPLES = 2000
#: how far a serving cell's QPS may move between two runs of the same code and still count as reproduced
#: (issue 31's targets): a server cell's answer is known to within its search's 1.25x bracket at best
SERVING_TOLERANCE = {"cuda": 0.15, "cpu": 0.20}


@dataclass
class Run:
    summary: pd.DataFrame
    cells_dir: Path | None

    @classmethod
    def load(cls, path: str | Path) -> Run:
        path = Path(path)
        if path.is_file():
            return cls(with_scenario(pd.read_csv(path)), None)
        cells = path / "cells"
        if (path / "summary.csv").exists():
            summary = with_scenario(pd.read_csv(path / "summary.csv"))
        elif cells.is_dir():
            summary = summary_frame(sorted(cells.glob("*/*/*/*.json")))
        else:
            raise ValueError(f"{path}: neither a summary CSV nor a results directory (summary.csv or cells/)")
        return cls(summary, cells if cells.is_dir() else None)

    def samples(self, row: pd.Series, boundary: str) -> np.ndarray | None:
        """The saved per-call latencies (ms) of a cell at a boundary, where the run kept them."""
        if self.cells_dir is None:
            return None
        key = CellKey(*(row[c] for c in KEY_COLUMNS))
        suffix = ".samples.npy" if boundary == "device" else ".e2e_samples.npy"
        path = (self.cells_dir / key.relpath).with_suffix(suffix)
        if not path.exists():
            return None
        values = np.load(path).astype(np.float64) * 1e3
        return values if values.size else None


def bootstrap_ratio(a: np.ndarray, b: np.ndarray, seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap interval of median(b) / median(a), each run's calls resampled."""
    rng = np.random.default_rng(seed)
    medians_a = np.median(rng.choice(a, size=(BOOTSTRAP_RESAMPLES, a.size)), axis=1)
    medians_b = np.median(rng.choice(b, size=(BOOTSTRAP_RESAMPLES, b.size)), axis=1)
    ratios = medians_b / medians_a
    return float(np.percentile(ratios, 2.5)), float(np.percentile(ratios, 97.5))


def compare_cells(run_a: Run, run_b: Run) -> pd.DataFrame:
    """One row per cell ok in both runs: the p50 ratio B / A per boundary, its interval, where the
    interval comes from, and whether the change is beyond the noise."""
    a = run_a.summary[(run_a.summary["status"] == "ok") & (run_a.summary["scenario"] == "single")]
    b = run_b.summary[(run_b.summary["status"] == "ok") & (run_b.summary["scenario"] == "single")]
    both = a.merge(b, on=KEY_COLUMNS, suffixes=("_a", "_b"))
    floors_a, floors_b = SpreadFloors.of(a), SpreadFloors.of(b)
    rows = []
    for _, pair in both.iterrows():
        row_a = _side(pair, "_a")
        row_b = _side(pair, "_b")
        out: dict = {c: pair[c] for c in KEY_COLUMNS}
        out["bound"] = row_b.get("bound") if isinstance(row_b.get("bound"), str) else row_a.get("bound")
        for boundary, prefix in (("device", ""), ("end_to_end", "e2e_")):
            p50_col = COLUMNS[boundary][0]
            p50_a, p50_b = row_a.get(p50_col), row_b.get(p50_col)
            if p50_a is None or p50_b is None or pd.isna(p50_a) or pd.isna(p50_b) or p50_a <= 0:
                continue
            value, low, high, source = p50_b / p50_a, None, None, "none"
            spread_a, spread_b = spread_at(row_a, boundary, floors_a), spread_at(row_b, boundary, floors_b)
            if spread_a and spread_b and spread_a.known and spread_b.known:
                result = ratio(spread_a, spread_b, value)
                low, high = result.low, result.high
                source = f"processes ({spread_a.n} / {spread_b.n})"
                if spread_a.df is not None or spread_b.df is not None:
                    source += ", at least the pooled spread of their class"
            else:
                samples_a, samples_b = run_a.samples(row_a, boundary), run_b.samples(row_b, boundary)
                if samples_a is not None and samples_b is not None:
                    low, high = bootstrap_ratio(samples_a, samples_b)
                    source = "calls within one process (spread between processes unknown)"
            out |= {
                f"{prefix}p50_a_ms": p50_a,
                f"{prefix}p50_b_ms": p50_b,
                f"{prefix}ratio": value,
                f"{prefix}ratio_low": low,
                f"{prefix}ratio_high": high,
                f"{prefix}interval_from": source,
                f"{prefix}change": _change(low, high),
            }
        rows.append(out)
    return pd.DataFrame(rows)


def compare_serving(run_a: Run, run_b: Run) -> pd.DataFrame:
    """One row per serving cell in both runs: each run's verdict and QPS (within the bound for a server
    cell: the highest valid target, beside the lowest invalid one), the ratio B / A, whether the verdict
    changed and whether the QPS moved beyond ``SERVING_TOLERANCE``."""
    columns = ["status", "serving_qps", "serving_lowest_invalid_qps", "serving_p99_ms", "serving_harness_p99_ms"]
    # reindex: a summary from before a column existed gets it empty
    a, b = (run.summary[run.summary["scenario"] != "single"] for run in (run_a, run_b))
    a, b = a.reindex(columns=KEY_COLUMNS + columns), b.reindex(columns=KEY_COLUMNS + columns)
    both = a.merge(b, on=KEY_COLUMNS, suffixes=("_a", "_b"))
    if both.empty:
        return both
    ratio_b_a = both["serving_qps_b"] / both["serving_qps_a"]
    tolerance = both["device"].map(SERVING_TOLERANCE).fillna(SERVING_TOLERANCE["cpu"])
    return both.assign(
        qps_ratio=ratio_b_a,
        verdict_changed=both["status_a"] != both["status_b"],
        beyond_tolerance=(np.log(ratio_b_a).abs() > np.log1p(tolerance)).where(ratio_b_a.notna()),
        tolerance=tolerance,
    )


def _side(pair: pd.Series, suffix: str) -> dict:
    """One run's columns of a merged row, under their own names."""
    side = {c: pair[c] for c in KEY_COLUMNS}
    for column, value in pair.items():
        if isinstance(column, str) and column.endswith(suffix):
            side[column[: -len(suffix)]] = value
    return side


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


def claimed_pairs(summary: pd.DataFrame, floors: SpreadFloors) -> list[tuple[str, dict, dict]]:
    """Every pair of cells a run's report makes a claim about, as (what is claimed, the cell said to be
    faster, the other): the fastest cell per shape against its runner-up, each speed-up over FP32 eager,
    each single-option step."""
    pairs: list[tuple[str, dict, dict]] = []
    for row in decisions.best_cells(summary, floors).to_dict("records"):
        if isinstance(row.get("runner_up"), str):
            shape = {c: row[c] for c in SHAPE}
            faster = shape | {c: row[c] for c in CELL}
            pairs.append(("fastest", faster, shape | {c: row[f"runner_up_{c}"] for c in CELL}))
    for row in decisions.speedups(summary, floors).to_dict("records"):
        cell = {c: row[c] for c in (*SHAPE, *CELL)}
        baseline = cell | {"engine": decisions.BASELINE_ENGINE, "precision": decisions.BASELINE_PRECISION}
        pairs.append(("speed-up over FP32 eager", cell, baseline))
    for row in decisions.option_steps(summary, floors).to_dict("records"):
        shape = {c: row[c] for c in (*SHAPE, "device", "threads")}
        after = shape | {"engine": row["to_engine"], "precision": row["to_precision"]}
        before = shape | {"engine": row["from_engine"], "precision": row["from_precision"]}
        pairs.append((f"option step, {row['change']}", after, before))
    return pairs


def _name(cell: dict) -> str:
    return f"{cell['engine']} {cell['precision']} {cell['device']}"


def _judge(frame: pd.DataFrame, faster: dict, slower: dict, floors: SpreadFloors) -> Claim | None:
    """The claim about one pair of cells in one run (``frame``: its measured rows by key), or None where
    the run lacks either cell."""
    rows = []
    for cell in (faster, slower):
        try:
            row = frame.loc[tuple(cell.get(c, 0) for c in KEY_COLUMNS[:7])]
        except KeyError:
            return None
        rows.append((row.iloc[0] if isinstance(row, pd.DataFrame) else row).to_dict() | cell)
    return claim(rows[0], rows[1], floors)


def claim_agreement(run_a: Run, run_b: Run, between: LeaseSpread | None = None) -> pd.DataFrame:
    """Every claim either run's report makes, over the cells ok in both, judged in both runs by the one
    rule (inferbench.analysis.verdicts): as each run's report judges it (its own spread per class), and
    the winner in each. Whether the margin moved beyond the noise: the two claims' log ratios differ by
    more than 1.96 standard errors of both, each counting ``between`` (how far each class moved between
    these two runs) too. A problem is a claim significant in either run whose winner changes or whose
    margin moves beyond it."""
    summaries = [decisions.measured(s) for s in common_cells(run_a, run_b)]
    own = [SpreadFloors.of(summary) for summary in summaries]
    noisy = [SpreadFloors(floors.floors, between) for floors in own]
    indexed = [summary.set_index(list(KEY_COLUMNS[:7])) for summary in summaries]
    seen, rows = set(), []
    for summary, floor in zip(summaries, own, strict=True):
        for what, faster, slower in claimed_pairs(summary, floor):
            # one claim per pair, named as the first run to make it names it (the other may name it reversed)
            key = (what, frozenset((tuple(faster.items()), tuple(slower.items()))))
            if key in seen:
                continue
            seen.add(key)
            judged = [
                _judge(frame, faster, slower, floors) for frame, floors in zip(indexed * 2, own + noisy, strict=True)
            ]
            if None in judged:
                continue
            a, b, a_noisy, b_noisy = judged
            winner_changed = (a.value > 1) != (b.value > 1)
            se = [a_noisy.ratio.log_se, b_noisy.ratio.log_se]
            change = b.value / a.value
            moved = None
            low = high = None
            if None not in se:
                half = Z95 * math.hypot(*se)  # type: ignore[arg-type]
                low, high = change * math.exp(-half), change * math.exp(half)
                moved = abs(math.log(change)) > half
            significant = bool(a.significant) or bool(b.significant)
            rows.append(
                {
                    **{c: faster[c] for c in SHAPE},
                    "claim": f"{what}: {_name(faster)} over {_name(slower)}",
                    "boundary": a.boundary,
                    "run_a": f"{a.value:.3g}× ({a.verdict})",
                    "run_b": f"{b.value:.3g}× ({b.verdict})",
                    "margin_change": change,
                    "margin_change_low": low,
                    "margin_change_high": high,
                    "winner_changed": winner_changed,
                    "margin_moved": moved,
                    "significant": significant,
                    "agree": not winner_changed and not moved,
                    "problem": significant and (winner_changed or bool(moved)),
                }
            )
    columns = [*SHAPE, "claim", "boundary", "run_a", "run_b", "margin_change", "margin_change_low",
               "margin_change_high", "winner_changed", "margin_moved", "significant", "agree", "problem"]  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


CELL_COLUMNS = [
    ("workload", "workload"),
    ("engine", "engine"),
    ("precision", "precision"),
    ("device", "device"),
    ("batch_size", "batch"),
    ("seq_len", "seq"),
    ("bound", "bound"),
    ("p50_a_ms", "p50 A"),
    ("p50_b_ms", "p50 B"),
    ("ratio", "B / A"),
    ("interval", "95% interval"),
    ("change", "change"),
    ("e2e_ratio", "B / A end to end"),
    ("e2e_change", "change end to end"),
    ("interval_from", "interval from"),
]


def compare_markdown(
    cells: pd.DataFrame,
    agreement: pd.DataFrame,
    names: tuple[str, str],
    leases: LeaseSpread | None = None,
    serving: pd.DataFrame | None = None,
) -> str:
    from inferbench.report.tables import intervals, markdown_table

    out = [f"# {names[1]} (B) against {names[0]} (A)", ""]
    if serving is not None and not serving.empty:
        out += serving_markdown(serving)
    if cells.empty:
        return "\n".join([*out, "No single-call cell is ok in both runs."])
    counts = cells["change"].value_counts().to_dict()
    out += [
        f"{len(cells)} cells ok in both runs: "
        + ", ".join(f"{counts.get(k, 0)} {k}" for k in ("faster", "slower", "within noise", "unknown"))
        + " (p50 at each cell's own boundary; a change is flagged when its 95% interval excludes 1).",
        "",
    ]
    table = cells.assign(interval=intervals(cells, "ratio_low", "ratio_high")).sort_values(KEY_COLUMNS)
    out += [markdown_table(table, [c for c in CELL_COLUMNS if c[0] in table or c[0] == "interval"]), ""]
    if leases is not None:
        out += [f"Between the two runs, each class of cells moved by (one standard deviation) {leases.describe()}; "
                "every claim's interval below counts it.", ""]  # fmt: skip
    if not agreement.empty:
        problems = agreement[agreement["problem"]]
        winners = int(agreement["winner_changed"].sum())
        moved = int(agreement["margin_moved"].fillna(False).astype(bool).sum())
        out += [
            "## Claims",
            "",
            f"{len(agreement)} claims made by either run, over the cells ok in both: {winners} change their "
            f"winner, {moved} their margin beyond the noise; {len(problems)} of those are called significant in "
            "a run (a significant claim that does not hold in the other run).",
            "",
        ]
        columns = [("workload", "workload"), ("batch_size", "batch"), ("seq_len", "seq"), ("claim", "claim"),
                   ("boundary", "compared"), ("run_a", "A"), ("run_b", "B"), ("margin_change", "B / A margin"),
                   ("margin_interval", "95% interval"), ("winner_changed", "winner changed"),
                   ("margin_moved", "margin moved"), ("problem", "significant and changed")]  # fmt: skip
        shown = agreement[~agreement["agree"] | agreement["problem"]]
        shown = shown.assign(margin_interval=intervals(shown, "margin_change_low", "margin_change_high"))
        out += [markdown_table(shown, columns) if not shown.empty else "Every claim holds: no winner changes, "
                "no margin moves beyond the noise.", ""]  # fmt: skip
    return "\n".join(out)


def serving_markdown(serving: pd.DataFrame) -> list[str]:
    """The serving cells of two runs side by side, with a line counting what did not reproduce."""
    from inferbench.report.tables import markdown_table

    changed, beyond = int(serving["verdict_changed"].sum()), int(serving["beyond_tolerance"].fillna(False).sum())
    columns = [("workload", "workload"), ("engine", "engine"), ("precision", "precision"), ("device", "device"),
               ("batch_size", "max batch"), ("seq_len", "seq"), ("scenario", "scenario"), ("status_a", "A"),
               ("status_b", "B"), ("serving_qps_a", "QPS A"), ("serving_qps_b", "QPS B"), ("qps_ratio", "B / A"),
               ("serving_lowest_invalid_qps_a", "lowest invalid A"),
               ("serving_lowest_invalid_qps_b", "lowest invalid B"),
               ("serving_harness_p99_ms_a", "harness p99 A"), ("serving_harness_p99_ms_b", "harness p99 B"),
               ("verdict_changed", "verdict changed"), ("beyond_tolerance", "beyond tolerance")]  # fmt: skip
    return [
        "## Serving cells",
        "",
        f"{len(serving)} serving cells in both runs: {changed} change their verdict, {beyond} their QPS beyond "
        "the tolerance (15% on a GPU, 20% on the CPU; a server cell's QPS is the highest valid target of its "
        "search, known to within its 1.25x bracket).",
        "",
        markdown_table(serving.sort_values(KEY_COLUMNS), columns),
        "",
    ]


def compare_runs(path_a: str | Path, path_b: str | Path) -> tuple[pd.DataFrame, pd.DataFrame, str, LeaseSpread | None]:
    """Two runs cell by cell and claim by claim, with the spread between them per class (None where they
    have too few cells in common to tell)."""
    run_a, run_b = Run.load(path_a), Run.load(path_b)
    cells = compare_cells(run_a, run_b)
    leases = LeaseSpread.between([run_a.summary, run_b.summary])
    leases = leases if leases.sd_log else None
    agreement = claim_agreement(run_a, run_b, between=leases)
    serving = compare_serving(run_a, run_b)
    text = compare_markdown(cells, agreement, (str(path_a), str(path_b)), leases, serving)
    return cells, agreement, text, leases
