"""Two runs side by side, in Markdown (``inferbench compare RUN_A RUN_B``): the per-cell table, the
classes that moved as a whole, the claims of either run judged in both, and the serving cells. The
numbers come from inferbench.analysis.compare_runs, which says how each is computed."""

from __future__ import annotations

import keyword
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from inferbench.analysis.calibration import Calibration, calibrate, calibration_text
from inferbench.analysis.class_shift import ClassShift, class_shifts, shifts_markdown
from inferbench.analysis.compare_runs import (
    Run,
    cell_name,
    claim_agreement,
    compare_cells,
)
from inferbench.analysis.leases import LeaseSpread
from inferbench.analysis.summary import KEY_COLUMNS, measured
from inferbench.catalog.scenarios import SCENARIOS
from inferbench.catalog.targets import load_target
from inferbench.report.tables import intervals, markdown_table

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
    shifts: list[ClassShift] | None = None,
    calibrations: Sequence[Calibration | None] = (),
    scenario_lines: Sequence[str] = (),
) -> str:
    out = [f"# {names[1]} (B) against {names[0]} (A)", ""]
    # how often each run's own rule called identical cells different (its A/A twins), where it had any
    found_by_run = zip("AB", calibrations, strict=False)  # none where the caller gave none
    out += [f"- {side}: {calibration_text(found)}" for side, found in found_by_run if found is not None]
    out += [""] if any(c is not None for c in calibrations) else []
    out += scenario_lines
    if cells.empty:
        return "\n".join([*out, "No single-call cell is ok in both runs."])
    counts = cells["change"].value_counts().to_dict()
    out += [
        f"{len(cells)} cells ok in both runs: "
        + ", ".join(f"{counts.get(k, 0)} {k}" for k in ("faster", "slower", "within noise", "unknown"))
        + " (p50 at each cell's own boundary; a change is flagged when its 95% interval excludes 1).",
        "",
        *_over_all_cells(cells),
    ]
    table = cells.assign(interval=intervals(cells, "ratio_low", "ratio_high")).sort_values(KEY_COLUMNS)
    out += [column_wise_table(table, [c for c in CELL_COLUMNS if c[0] in table or c[0] == "interval"]), ""]
    out += shifts_markdown(shifts or [])
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
        out += [column_wise_table(shown, columns) if not shown.empty else "Every claim holds: no winner changes, "
                "no margin moves beyond the noise.", ""]  # fmt: skip
    return "\n".join(out)


def _distinct_key(value: object) -> tuple[type, object] | None:
    """What tells a field's value from another's as a table shows it (its type too: 1, 1.0 and True read
    differently); None for a value not compared (each is then shown on its own)."""
    if isinstance(value, float) and math.isnan(value):
        return float, "nan"
    return (type(value), value) if value is None or isinstance(value, str | int | float) else None


def _column_texts(frame: pd.DataFrame, name: str, title: str) -> list[str]:
    """Each row's field of column ``name`` as ``markdown_table`` shows it, each distinct value formatted once."""
    if name not in frame:
        return [_rows(markdown_table(pd.DataFrame(index=[0]), [(name, title)]))[0]] * len(frame)
    values = frame[name]
    if values.dtype != object:  # one kind of value throughout (and NaN): distinct by value, in one pass
        codes, _ = pd.factorize(values, use_na_sentinel=False)
        texts = _rows(markdown_table(frame[[name]].iloc[np.unique(codes, return_index=True)[1]], [(name, title)]))
        return [texts[code] for code in codes.tolist()]
    positions: dict[tuple[type, object], int] = {}
    firsts, codes = [], []
    for position, value in enumerate(values.tolist()):
        key = _distinct_key(value)
        code = positions.get(key) if key is not None else None
        if code is None:
            code = len(firsts)
            firsts.append(position)
            if key is not None:
                positions[key] = code
        codes.append(code)
    texts = _rows(markdown_table(frame[[name]].iloc[firsts], [(name, title)]))
    return [texts[code] for code in codes]


def _rows(table: str) -> list[str]:
    """The fields of a one-column ``markdown_table``, row by row."""
    return [line[2:-2] for line in table.split("\n")[2:]]


def column_wise_table(frame: pd.DataFrame, columns: Sequence[tuple[str, str]]) -> str:
    """``markdown_table``'s text, made a column at a time, each distinct value of a column formatted once by
    ``markdown_table`` itself: row by row it costs ~4 us a field (6 s for a table of 100,000 cells). A frame
    ``markdown_table`` treats apart (a column it adds, or renames when it reads rows) goes to it whole."""
    names = [name for name, _ in columns]
    plain = all(name.isidentifier() and not keyword.iskeyword(name) and not name.startswith("_") for name in names)
    if not plain or "latency_p50_ci95_low_ms" in frame or frame.columns.duplicated().any():
        return markdown_table(frame, columns)
    fields = [_column_texts(frame, name, title) for name, title in columns]
    lines = [markdown_table(frame.iloc[0:0], columns)]
    lines += ["| " + " | ".join(row) + " |" for row in zip(*fields, strict=True)]
    return "\n".join(lines)


#: the cells named in the sentence on the flags that hold over all cells (the largest moves)
NAMED_CELLS = 10


def _over_all_cells(cells: pd.DataFrame) -> list[str]:
    """How many flags the noise alone would give over the cells with an interval across processes (at
    each cell's own boundary), and which of their flags hold over all of them at once."""
    if "holds_over_all_cells" not in cells:
        return []
    judged = cells[cells["holds_over_all_cells"].notna()]
    if judged.empty:
        return []  # no cell has an interval across processes: nothing to judge over all cells
    flagged = judged[judged["change"].isin(["faster", "slower"])]
    holding = flagged[flagged["holds_over_all_cells"].astype(bool)]
    # the largest moves by name; the cells table below lists every one (100,000 cells made one 100-KB line)
    largest = holding.assign(_moved=np.log(holding["ratio"]).abs()).nlargest(NAMED_CELLS, "_moved", keep="first")
    names = ", ".join(f"{cell_name(row)} ({row['ratio']:.2f}x)" for row in largest.to_dict("records"))
    if len(holding) > len(largest):
        names = f"the {len(largest)} that moved most, {names}; {len(holding) - len(largest)} more in the table below"
    n = len(judged)
    return [
        f"Of the {n} cells with an interval across processes, about {0.05 * n:.1f} would be flagged by chance with "
        f"nothing changed: of the {len(flagged)} flagged, **{len(holding)} "
        f"{'holds' if len(holding) == 1 else 'hold'} over all {n} cells at once** (Holm's step-down over their "
        "p-values: at most a 5% chance that any unchanged cell is among those that hold)"
        + (f": {names}." if names else "."),
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
    shifts = class_shifts(cells, run_a.summary, run_b.summary)
    calibrations = [calibrate(measured(run.summary)) for run in (run_a, run_b)]
    # the lines of the scenarios that compare what two runs keep beside their summaries (a decoder's loads)
    # each hook once (LoadGen's server and offline share one), in the declarations' order
    hooks = dict.fromkeys(info.compared for info in SCENARIOS.values() if info.compared)
    own = [line for hook in hooks for line in load_target(hook)(run_a, run_b)]
    text = compare_markdown(cells, agreement, (str(path_a), str(path_b)), leases, shifts, calibrations, own)
    return cells, agreement, text, leases
