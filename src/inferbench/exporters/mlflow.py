"""The summary as MLflow runs, where users compare results over weeks, machines and versions.

One run per cell record: its name is the cell's id; params are the cell's axes, what it computes with and
its engine's effective options; metrics are the summary's figures for it, exactly as summary.csv holds them
(latencies, throughput, TTFT/TPOT, energy, memory, serving QPS: every number of its row); tags are the rest
of the row (status and reason, bound, the environment's fingerprint, git commit) and the record's identity;
artifacts are the record and its workload's plots. A run's start time is when the cell was measured.

A run is found again by the record it came from (``inferbench.record``: host, cell and measuring time), so
exporting the same results again updates those runs and adds none, while a cell measured again becomes a
new run beside the old one: the tracker keeps the history.

The store is ``MLFLOW_TRACKING_URI`` where set (a tracking server), else a SQLite file under the export's
folder, ``results/mlflow`` by default (``mlflow ui --backend-store-uri sqlite:///results/mlflow/mlflow.db``
opens it), artifacts beside it.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import numbers
import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from inferbench.analysis.summary import KEY_COLUMNS, read_summary_csv
from inferbench.catalog.engines import COMPUTATION_KEYS, VARIANT_KEYS
from inferbench.core.cells import CellKey, CellRecord
from inferbench.core.errors import UserError

DEFAULT_EXPERIMENT = "inferbench"
#: the tag that identifies the record a run was exported from, and the cell's id
RECORD_TAG, CELL_TAG = "inferbench.record", "inferbench.cell_id"
#: summary columns that are the cell's settings (params), not its figures
PARAM_COLUMNS = (*KEY_COLUMNS, "engine_impl", "mode", *COMPUTATION_KEYS)
#: fields of a record's environment fingerprint that its summary row lacks, kept as tags ``env.<field>``
FINGERPRINT_TAGS = (
    "platform",
    "cpu_count",
    "affinity_cpus",
    "inferbench",
    "gpu_uuid",
    "gpu_capability",
    "slurm_job_id",
)
#: cell statuses MLflow shows as a failed run (the others ran to the end: ok, or recorded why not)
FAILED = ("failed", "oom")
#: MLflow's limit on a param's value
_PARAM_CHARS = 6000
#: MLflow's limit on a tag's value (5,000 in older servers, 8,000 in newer ones)
_TAG_CHARS = 5000


@dataclass
class CellRun:
    """What one cell's MLflow run holds."""

    name: str
    record_id: str
    start_ms: int
    status: str
    params: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    artifacts: dict[str, list[Path]] = field(default_factory=dict)


def tracking_uri(store_dir: Path) -> str:
    """``MLFLOW_TRACKING_URI`` where set, else a SQLite file under ``store_dir``."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(Path(store_dir) / 'mlflow.db').resolve()}"


def _number(value: Any) -> float | None:
    """``value`` as a metric, or None: real numbers only (a boolean is a tag), finite ones."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        return None
    return float(value) if math.isfinite(value) else None


def _text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # a batch of 4, not "4.0" (pandas reads an integer column with gaps as floats)
    return str(value)


def cell_run(row: dict[str, Any], record: CellRecord | None, plots: list[Path], record_path: Path | None) -> CellRun:
    """The MLflow run of one summary row: its settings as params, its numbers as metrics, the rest as tags."""
    present = {k: v for k, v in row.items() if v is not None and not (isinstance(v, float) and math.isnan(v))}
    key = CellKey(**{k: _cast_key(k, row[k]) for k in KEY_COLUMNS})
    created = str(row.get("created_at") or (record.created_at if record else ""))
    record_id = f"{row.get('hostname') or '?'}:{key.cell_id}@{created}"
    params = {k: _text(present[k]) for k in PARAM_COLUMNS if k in present}
    # what the engine ran with, its declared defaults filled in (the record's; the summary has no options)
    for name, value in ((record.options if record else None) or {}).items():
        if name not in VARIANT_KEYS:  # which implementation and where: the cell's axes say it
            params[f"option.{name}"] = _text(value)[:_PARAM_CHARS]
    metrics, tags = {}, {}
    for column, value in present.items():
        if column in PARAM_COLUMNS:
            continue
        if (number := _number(value)) is not None:
            metrics[column] = number
        else:
            tags[column] = _text(value)[:_TAG_CHARS]
    # the rest of the environment's fingerprint, which the summary leaves out
    environment = (record.environment if record else None) or {}
    tags |= {f"env.{k}": _text(environment[k]) for k in FINGERPRINT_TAGS if environment.get(k) is not None}
    tags |= {CELL_TAG: key.cell_id, RECORD_TAG: record_id, "mlflow.runName": key.cell_id}
    start = datetime.fromisoformat(created) if created else None
    artifacts = {"plots": plots} | ({"record": [record_path]} if record_path else {})
    return CellRun(
        name=key.cell_id,
        record_id=record_id,
        start_ms=int(start.timestamp() * 1000) if start else 0,
        status="FAILED" if row.get("status") in FAILED else "FINISHED",
        params=params,
        metrics=metrics,
        tags=tags,
        artifacts=artifacts,
    )


def _cast_key(column: str, value: Any) -> Any:
    return int(value) if column in ("batch_size", "seq_len", "threads") else str(value)


def summary_runs(summary_csv: Path, cells_dir: Path, plots_dir: Path) -> list[CellRun]:
    """The runs of every row of ``summary_csv``, with each cell's record (under ``cells_dir``, where it is)
    and its workload's plots (under ``plots_dir``)."""
    try:
        summary = read_summary_csv(summary_csv)
    except (OSError, ValueError) as error:
        raise UserError(f"{summary_csv}: cannot be read as a summary CSV ({type(error).__name__}: {error})") from error
    missing = [c for c in (*KEY_COLUMNS, "status") if c not in summary]
    if missing:
        raise UserError(f"{summary_csv} is not an inferbench summary: it has no column {', '.join(missing)}")
    summary = summary.astype(object).where(pd.notna(summary), None)
    runs = []
    for row in summary.to_dict("records"):
        key = CellKey(**{k: _cast_key(k, row[k]) for k in KEY_COLUMNS})
        path = Path(cells_dir) / key.relpath
        record = CellRecord.load(path) if path.exists() else None
        plots = sorted((Path(plots_dir) / key.workload).glob("*.png"))
        runs.append(cell_run(row, record, plots, path if record else None))
    return runs


def _client(store_dir: Path, experiment: str) -> tuple[Any, str]:
    """An MLflow client of the store, and the experiment's id (created where missing: locally with its
    artifacts beside the SQLite file)."""
    if importlib.util.find_spec("mlflow") is None:
        raise UserError("mlflow is not installed: python -m pip install -e '.[mlflow]'")
    from mlflow.tracking import MlflowClient

    uri = tracking_uri(store_dir)
    if uri.startswith("sqlite:///"):
        Path(store_dir).mkdir(parents=True, exist_ok=True)
    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    if found is not None:
        return client, found.experiment_id
    local = None if os.environ.get("MLFLOW_TRACKING_URI") else (Path(store_dir) / "artifacts").resolve().as_uri()
    return client, client.create_experiment(experiment, artifact_location=local)


def _existing_runs(client: Any, experiment_id: str) -> dict[str, Any]:
    """The experiment's runs by the record they were exported from."""
    runs, token = {}, None
    while True:
        page = client.search_runs([experiment_id], max_results=1000, page_token=token)
        for run in page:
            if RECORD_TAG in run.data.tags:
                runs[run.data.tags[RECORD_TAG]] = run
        token = page.token
        if not token:
            return runs


def export_mlflow(
    summary_csv: Path, cells_dir: Path, plots_dir: Path, store_dir: Path, experiment: str = DEFAULT_EXPERIMENT
) -> dict[str, Any]:
    """Export every cell of ``summary_csv`` as an MLflow run (see the module's docstring); return where to,
    and how many runs were created and updated."""
    from mlflow.entities import Metric, Param, RunTag

    runs = summary_runs(summary_csv, cells_dir, plots_dir)
    client, experiment_id = _client(store_dir, experiment)
    existing = _existing_runs(client, experiment_id)
    created = updated = 0
    for run in runs:
        found = existing.get(run.record_id)
        if found is None:
            run_id = client.create_run(
                experiment_id, start_time=run.start_ms, tags=run.tags, run_name=run.name
            ).info.run_id
            known_params, known_metrics = {}, {}
            created += 1
        else:
            run_id, known_params, known_metrics = found.info.run_id, found.data.params, found.data.metrics
            updated += 1
        # params never change in MLflow: only those the run lacks; metrics only where they changed, so that a
        # second export leaves each metric's history as it was
        params = [Param(k, v) for k, v in run.params.items() if k not in known_params]
        metrics = [Metric(k, v, run.start_ms, 0) for k, v in run.metrics.items() if known_metrics.get(k) != v]
        tags = [RunTag(k, v) for k, v in run.tags.items()]
        for start in range(0, max(len(params), len(metrics), len(tags)), 100):  # MLflow's batch limits
            client.log_batch(
                run_id, metrics[start : start + 100], params[start : start + 100], tags[start : start + 100]
            )
        for folder, files in run.artifacts.items():
            for path in files:
                client.log_artifact(run_id, str(path), artifact_path=folder)
        client.set_terminated(run_id, status=run.status, end_time=run.start_ms)
    return {
        "tracking_uri": tracking_uri(store_dir),
        "experiment": experiment,
        "experiment_id": experiment_id,
        "runs": len(runs),
        "created": created,
        "updated": updated,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--experiment",
        default=os.environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_EXPERIMENT,
        help=f"the MLflow experiment (default: MLFLOW_EXPERIMENT_NAME, else {DEFAULT_EXPERIMENT})",
    )


def export(
    summary: Path, cells_dir: Path, plots_dir: Path, out_dir: Path, experiment: str = DEFAULT_EXPERIMENT
) -> dict[str, Any]:
    """The exporter's entry (inferbench.catalog.exporters): ``out_dir`` holds the local store where
    MLFLOW_TRACKING_URI is not set."""
    done = export_mlflow(summary, cells_dir, plots_dir, out_dir, experiment)
    message = (
        f"{done['runs']} cells -> MLflow experiment {done['experiment']!r} at {done['tracking_uri']}: "
        f"{done['created']} runs created, {done['updated']} updated"
    )
    return {**done, "message": message}
