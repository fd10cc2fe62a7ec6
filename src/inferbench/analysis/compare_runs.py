"""Two runs of the same cells side by side (``inferbench compare RUN_A RUN_B``).

Per cell measured ``ok`` in both: the p50 ratio B / A at the cell's own boundary and end to end,
with a 95% interval. Where both runs measured the cell in several fresh processes, the interval is
Welch's on the processes' log p50s (inferbench.analysis.uncertainty): it includes the spread between
processes. Otherwise it comes from the saved per-call samples (a bootstrap of the ratio of medians)
and says so: it then covers only the noise within each process. A change is flagged when its
interval excludes 1.

Then the decisions: for each workload, batch and sequence length, whether both runs name the same
fastest cell where either calls its margin significant, and every compared pair (speed-ups over
FP32 eager, single-option steps) that one run calls significant and the other reverses.

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
from inferbench.analysis.summary import KEY_COLUMNS, summary_frame, with_scenario
from inferbench.analysis.uncertainty import ratio
from inferbench.core.cells import CellKey

BOOTSTRAP_RESAMPLES = 2000


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
    a = run_a.summary[run_a.summary["status"] == "ok"]
    b = run_b.summary[run_b.summary["status"] == "ok"]
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
    """Each run's summary restricted to the cells ok in both: decisions made over the same cells."""
    keys = [frame.loc[frame["status"] == "ok", KEY_COLUMNS] for frame in (run_a.summary, run_b.summary)]
    both = keys[0].merge(keys[1], on=KEY_COLUMNS)
    return tuple(frame.merge(both, on=KEY_COLUMNS) for frame in (run_a.summary, run_b.summary))  # type: ignore[return-value]


def decision_agreement(run_a: Run, run_b: Run) -> pd.DataFrame:
    """The claims of both runs' reports, made over the cells ok in both, side by side: the fastest
    cell per shape (a disagreement matters where either run calls its margin significant), and every
    compared pair (speed-ups over FP32 eager, single-option steps) that one run calls significant
    while the other reverses it."""
    summaries = common_cells(run_a, run_b)
    rows = []
    best = [decisions.best_cells(summary) for summary in summaries]
    shape = ["workload", "batch_size", "seq_len"]
    for _, pair in best[0].merge(best[1], on=shape, suffixes=("_a", "_b")).iterrows():
        name_a = f"{pair['engine_a']} {pair['precision_a']} {pair['device_a']}"
        name_b = f"{pair['engine_b']} {pair['precision_b']} {pair['device_b']}"
        significant = [pair["verdict_a"] == "significant", pair["verdict_b"] == "significant"]
        rows.append(
            {
                **{c: pair[c] for c in shape},
                "claim": "fastest",
                "run_a": f"{name_a} ({pair['verdict_a']})",
                "run_b": f"{name_b} ({pair['verdict_b']})",
                "agree": name_a == name_b,
                "problem": name_a != name_b and any(significant),
            }
        )
    for claims, what in ((decisions.speedups, "speed-up over FP32 eager"), (decisions.option_steps, "option step")):
        frames = [claims(summary) for summary in summaries]
        if frames[0].empty or frames[1].empty:
            continue
        key = [c for c in frames[0].columns if c in ("workload", "device", "batch_size", "seq_len", "threads",
                                                      "engine", "precision", "from_engine", "from_precision",
                                                      "to_engine", "to_precision")]  # fmt: skip
        for _, pair in frames[0].merge(frames[1], on=key, suffixes=("_a", "_b")).iterrows():
            sides = [(pair["speedup_a"], pair["significant_a"]), (pair["speedup_b"], pair["significant_b"])]
            reversed_sign = (sides[0][0] > 1) != (sides[1][0] > 1)
            called = [s is True or s == 1.0 for _, s in sides]
            label = " ".join(str(pair[c]) for c in key if c not in ("workload", "threads"))
            rows.append(
                {
                    "workload": pair["workload"],
                    "batch_size": pair["batch_size"],
                    "seq_len": pair["seq_len"],
                    "claim": f"{what}: {label}",
                    "run_a": f"{sides[0][0]:.3g}×" + (" significant" if called[0] else ""),
                    "run_b": f"{sides[1][0]:.3g}×" + (" significant" if called[1] else ""),
                    "agree": not reversed_sign,
                    "problem": reversed_sign and any(called),
                }
            )
    return pd.DataFrame(rows, columns=[*shape, "claim", "run_a", "run_b", "agree", "problem"])


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


def compare_markdown(cells: pd.DataFrame, agreement: pd.DataFrame, names: tuple[str, str]) -> str:
    from inferbench.report.tables import intervals, markdown_table

    out = [f"# {names[1]} (B) against {names[0]} (A)", ""]
    if cells.empty:
        return "\n".join([*out, "No cell is ok in both runs."])
    counts = cells["change"].value_counts().to_dict()
    out += [
        f"{len(cells)} cells ok in both runs: "
        + ", ".join(f"{counts.get(k, 0)} {k}" for k in ("faster", "slower", "within noise", "unknown"))
        + " (p50 at each cell's own boundary; a change is flagged when its 95% interval excludes 1).",
        "",
    ]
    table = cells.assign(interval=intervals(cells, "ratio_low", "ratio_high")).sort_values(KEY_COLUMNS)
    out += [markdown_table(table, [c for c in CELL_COLUMNS if c[0] in table or c[0] == "interval"]), ""]
    if not agreement.empty:
        problems = agreement[agreement["problem"]]
        out += [
            "## Decisions",
            "",
            f"{len(agreement)} claims in both runs; {int((~agreement['agree']).sum())} differ, "
            f"{len(problems)} of them called significant in a run (a significant claim the other run reverses, "
            "or a different fastest cell where either run calls its margin significant).",
            "",
        ]
        columns = [("workload", "workload"), ("batch_size", "batch"), ("seq_len", "seq"), ("claim", "claim"),
                   ("run_a", "A"), ("run_b", "B"), ("agree", "agree"),
                   ("problem", "significant and reversed")]  # fmt: skip
        differing = agreement[~agreement["agree"]]
        out += [markdown_table(differing, columns) if not differing.empty else "Every claim agrees.", ""]
    return "\n".join(out)


def compare_runs(path_a: str | Path, path_b: str | Path) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    run_a, run_b = Run.load(path_a), Run.load(path_b)
    cells = compare_cells(run_a, run_b)
    agreement = decision_agreement(run_a, run_b)
    return cells, agreement, compare_markdown(cells, agreement, (str(path_a), str(path_b)))
