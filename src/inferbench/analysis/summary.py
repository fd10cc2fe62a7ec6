"""Cell records into one table, one row per cell, written as CSV and Parquet (``write_summary``)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd

from inferbench.catalog.engines import tf32_setting
from inferbench.catalog.scenarios import SCENARIOS, scenario_info
from inferbench.catalog.targets import load_target
from inferbench.core.cells import CellRecord, NewerRecord
from inferbench.core.errors import UserError
from inferbench.core.fsutil import atomic_path
from inferbench.engines.registry import HARNESS_ENGINES
from inferbench.models.parity import violations

KEY_COLUMNS = ["workload", "engine", "precision", "device", "batch_size", "seq_len", "threads", "scenario"]


def with_scenario(summary: pd.DataFrame) -> pd.DataFrame:
    """A summary with its ``scenario`` column (summaries written before scenarios: all ``single``)."""
    return summary if "scenario" in summary else summary.assign(scenario="single")


class ScenarioFrames(NamedTuple):
    """A summary's rows by the scenario that measured them (inferbench.scenarios)."""

    #: inference calls timed one at a time: every latency table, decision and plot
    single: pd.DataFrame
    #: training steps and epochs (engines of mode ``train``): their own tables
    training: pd.DataFrame
    #: cells of the scenarios that serve queries through a batcher (ScenarioInfo.serves): their own section
    served: pd.DataFrame
    #: cells of engines that generate tokens (mode ``generate``), requests one at a time or under load
    generating: pd.DataFrame


def split_scenarios(summary: pd.DataFrame) -> ScenarioFrames:
    """The rows of each scenario, apart: a serving cell's latency includes queueing and batching, a
    training call's a backward pass, a generation call's a whole request, and none is ever compared with
    a single inference call's."""
    summary = with_scenario(summary)
    served = summary["scenario"].isin([name for name, info in SCENARIOS.items() if info.serves])
    mode = summary["mode"] if "mode" in summary else pd.Series("inference", index=summary.index)
    training, generating = mode.eq("train") & ~served, mode.eq("generate") & ~served
    single = ~served & ~training & ~generating
    return ScenarioFrames(*(summary[m].reset_index(drop=True) for m in (single, training, served, generating)))


def measured(summary: pd.DataFrame) -> pd.DataFrame:
    """The inference cells timed one call at a time that measured ok, the no-op engine left out (it is
    the harness's baseline, not an engine)."""
    single = split_scenarios(summary).single
    ok = single[single["status"] == "ok"]
    return ok[
        ~ok["engine_impl"].isin(HARNESS_ENGINES)
    ].copy()  # one block per column, as read_csv leaves it: consolidated


#: what reading a damaged or foreign record raises (JSONDecodeError and a wrong schema are ValueErrors)
UNREADABLE = (OSError, ValueError, KeyError, TypeError)


def load_records(record_paths: Iterable[str | Path]) -> list[CellRecord]:
    """The records at ``record_paths``; a UserError naming every one that cannot be read, and the
    command that removes them (their cells are then measured again), rather than stopping at the first."""
    records, unreadable = [], []
    for path in record_paths:
        try:
            record = CellRecord.load(path)
        except UNREADABLE as error:
            unreadable.append(f"  {path}: {type(error).__name__}: {str(error)[:200]}")
            continue
        if problems := contradictions(record):
            unreadable.append(f"  {path}: it contradicts itself: {'; '.join(problems)[:200]}")
        else:
            records.append(record)
    if unreadable:
        raise UserError(
            f"{len(unreadable)} cell record(s) cannot be read:\n" + "\n".join(unreadable) + "\n"
            "Remove them, and the next run measures those cells again: python -m inferbench clean --status unreadable"
        )
    return records


def contradictions(record: CellRecord) -> list[str]:
    """What a record says against itself, as a hand edit would leave it: an ``ok`` cell whose parity
    figures fail the tolerance the record names (the gate would have made it ``invalid``)."""
    parity = record.parity or {}
    if record.status != "ok" or not isinstance(parity.get("tolerance"), dict):
        return []
    metrics = {k: v for k, v in parity.items() if k != "tolerance"}
    try:
        problems = violations(metrics, parity["tolerance"])
    except (KeyError, TypeError) as error:
        return [f"parity figures unreadable ({type(error).__name__}: {error})"]
    return [f"status ok, yet parity fails its own tolerance: {', '.join(problems)}"] if problems else []


#: identity strings that pandas would read as numbers (commit 12345e7 as 1.2345e11, CUDA 12.10 as
#: 12.1, an all-digit host name as an integer): read as text
TEXT_COLUMNS = (
    "hostname",
    "cpu",
    "gpu",
    "gpu_driver",
    "cuda",
    "python",
    "git_commit",
    "code_job",
    "code_package",
    "options_id",
    "torch",
    "onnxruntime",
)


def read_summary_csv(path: str | Path) -> pd.DataFrame:
    """A summary CSV as written: only an empty field is missing (pandas would also take NA, null, n/a
    ... as missing), the identity columns (``TEXT_COLUMNS``) stay text, the rest is parsed as usual.
    Errors of reading (a missing, empty or malformed file) are pandas' and the OS's, for the caller to name."""
    header = pd.read_csv(path, nrows=0).columns
    frame = pd.read_csv(
        path,
        keep_default_na=False,
        na_values={column: [""] for column in header},
        dtype={column: str for column in TEXT_COLUMNS if column in header},
    )
    return settings_named(frame)


def settings_named(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with an older summary's or record's booleans written as today's settings (``tf32``:
    inferbench.catalog.engines.tf32_setting)."""
    if "tf32" in frame:
        frame["tf32"] = frame["tf32"].astype(object).map(tf32_setting)
    return frame


def summary_frame(record_paths: Iterable[str | Path]) -> pd.DataFrame:
    return records_frame(load_records(record_paths))


def records_frame(records: Iterable[CellRecord]) -> pd.DataFrame:
    """The summary of records already read: one row per cell, in key order; the columns every cell has, then those
    of each scenario in its cells' key order, the record's time last."""
    ordered = sorted(records, key=lambda record: record.key.cell_id)  # the columns' order too
    frame = pd.DataFrame([summary_row(record) for record in ordered])
    if frame.empty:
        raise ValueError("no cell records to summarise")
    return settings_named(frame.sort_values(KEY_COLUMNS, kind="stable").reset_index(drop=True))


def summary_row(record: CellRecord) -> dict[str, Any]:
    """A record's row of the summary: the columns every cell has, then those its scenario declares."""
    row = record.flatten()
    created = row.pop("created_at")
    columns = scenario_info(record.key.scenario, record.mode).columns
    return row | (load_target(columns)(record) if columns else {}) | {"created_at": created}


def remove_records(cells_dir: str | Path, statuses: set[str], newer: list[Path] | None = None) -> list[Path]:
    """Delete the records (and their samples) whose status is in ``statuses``; the status
    ``unreadable`` stands for records that cannot be read (damaged, or of an older schema). A record a newer
    inferbench wrote is never removed: its path is added to ``newer``. A record that contradicts itself
    (``contradictions``) counts as unreadable."""
    removed = []
    for path in sorted(Path(cells_dir).rglob("*.json")):
        try:
            record = CellRecord.load(path)
            status = "unreadable" if contradictions(record) else record.status
        except NewerRecord:
            if newer is not None:
                newer.append(path)
            continue
        except UNREADABLE:
            status = "unreadable"
        if status in statuses:
            path.unlink()
            for suffix in (".samples.npy", ".e2e_samples.npy"):
                path.with_suffix(suffix).unlink(missing_ok=True)
            removed.append(path)
    return removed


def write_summary(
    record_paths: Iterable[str | Path],
    csv_path: str | Path,
    parquet_path: str | Path,
    frame: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The records' summary (``frame``, where the caller made it), written as CSV and as Parquet (each file whole
    or not at all)."""
    frame = summary_frame(record_paths) if frame is None else frame
    with atomic_path(csv_path) as tmp:
        frame.to_csv(tmp, index=False)
    with atomic_path(parquet_path) as tmp:
        frame.to_parquet(tmp, index=False)
    return frame
