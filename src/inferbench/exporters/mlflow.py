"""The summary as MLflow runs, where users compare results over weeks, machines and versions.

One run per cell record: its name is the cell's id; params are the cell's axes, what it computes with and
its engine's effective options; metrics are the summary's figures for it, exactly as summary.csv holds them
(latencies, throughput, TTFT/TPOT, energy, memory, serving QPS: every number of its row); tags are the rest
of the row (status and reason, bound, the environment's fingerprint, git commit) and the record's identity;
artifacts are the record and its workload's plots. A run's start time is when the cell was measured.

A run is found again by the record it came from (``inferbench.record``: host, cell and measuring time, from
the summary row, else from the cell's record file where that file is the row's record) and only where none
of its params, metrics and tags differ from the row's. So exporting the same results again updates those
runs and adds none; a cell measured again becomes a new run beside the old one (the tracker keeps the
history); and a row whose figures differ from a run's (an edited summary, or one without ``hostname`` and
``created_at``) becomes a run of its own: it never overwrites another run's figures. A summary that holds
one record twice is refused.

The store is ``MLFLOW_TRACKING_URI`` where set (a tracking server or a database), else a SQLite file under
the export's folder, ``results/mlflow`` by default (``mlflow ui --backend-store-uri
sqlite:///results/mlflow/mlflow.db`` opens it). Before anything is written the store is checked: a scheme
of ``SCHEMES``; a SQLite path that names one file (no ``?`` or ``#``); a SQLite store's folder and file
writable, its schema the one this MLflow uses (else ``mlflow db upgrade``); a tracking server answering
within ``SERVER_TIMEOUT_S`` (and MLflow's HTTP retries kept short, ``HTTP_LIMITS``, where the user has not
set them). The names a summary row gives are checked before they become paths: its record and plots must
lie inside ``cells_dir`` and ``plots_dir``, symlinks resolved.

Exports into one SQLite store take turns: each holds an flock on ``.export.lock`` beside the file for the
whole export, so only one creates a new store's tables and the second finds the first's runs. A tracking
server or a database is not locked (no lock here spans machines): exports into one of them must run one
after the other, when the second updates the first's runs; at the same time, each may add a run of a record.
A new experiment's artifacts go beside the SQLite file (``artifacts/``), under the export's folder for a
database, the server's own store for a tracking server: never MLflow's default ``./mlruns`` in the current
folder. A run that cannot be written to the end (an error, SIGTERM) is marked FAILED, never left RUNNING;
the next export completes it.
"""

from __future__ import annotations

import argparse
import csv
import fcntl
import importlib
import importlib.util
import math
import numbers
import os
import posixpath
import re
import signal
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
import pandas as pd

from inferbench.analysis.summary import KEY_COLUMNS, UNREADABLE, read_summary_csv, summary_row
from inferbench.catalog.engines import COMPUTATION_KEYS, VARIANT_KEYS
from inferbench.catalog.scenarios import LOADS_TABLE
from inferbench.core.cells import CellKey, CellRecord
from inferbench.core.errors import UserError, error_text

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
#: MLflow's rule for param, metric and tag names (mlflow.utils.validation), and its limit on their length
_NAME = re.compile(r"[/\w.\- :]*")
_NAME_CHARS = 250
#: summary columns whose figures are durations, sizes, rates, energies, power or clocks: never negative
_NON_NEGATIVE = ("_ms", "_s", "_mb", "_mj", "_w", "_mhz")
#: the stores an export writes to, by the tracking URI's scheme (a database's may name its driver:
#: postgresql+psycopg2); MLflow's file store (a folder) is left out, as MLflow 3 refuses it by default
SCHEMES = {
    "sqlite": "sqlite:///<file> (a local file)",
    "http": "http://<server>",
    "https": "https://<server>",
    "databricks": "databricks[://<profile>]",
    "postgresql": "postgresql://<database>",
    "mysql": "mysql://<database>",
    "mssql": "mssql://<database>",
}
_SERVERS, _DATABASES = ("http", "https", "databricks"), ("postgresql", "mysql", "mssql")
#: seconds a tracking server has to accept a connection, and again to answer, before the export gives up
SERVER_TIMEOUT_S = 10.0
#: MLflow's HTTP retries during an export, where the user has not set them: a server that stops answering
#: fails the export in about a minute (MLflow's defaults retry for minutes)
HTTP_LIMITS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "15",
}
#: the file beside a SQLite store that an export holds (flock) while it writes, and how long another waits
LOCK_NAME, LOCK_WAIT_S = ".export.lock", 600.0


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
    #: an LLM serving cell's loads (its loads.csv rows, sweep then search): each figure's value per load, as
    #: one metric's history over MLflow steps 0, 1, ...
    load_metrics: dict[str, list[float]] = field(default_factory=dict)


#: the figures of an LLM serving cell's loads logged as metric histories (``load.<figure>``), step = the load
LOAD_METRICS = ("offered_per_s", "request_per_s", "ttft_p99_ms", "tpot_p99_ms", "itl_p99_ms", "goodput_per_s",
                "energy_per_output_token_mj", "valid", "met")  # fmt: skip


def load_metrics(loads: pd.DataFrame | None, cell_id: str) -> dict[str, list[float]]:
    """A cell's loads of the run's loads.csv (none: {}) as ``load.<figure>`` histories, its sweep's loads then its
    search's in order; a figure missing at a load (no energy on a CPU) leaves the history shorter: its steps
    are still the loads'."""
    if loads is None:
        return {}
    rows = loads[(loads["cell_id"] == cell_id) & (loads["phase"] != "capacity")]
    rows = rows.assign(_order=rows["phase"].map({"sweep": 0, "search": 1})).sort_values(["_order", "position"])
    out: dict[str, list[float]] = {}
    for figure in LOAD_METRICS:
        if figure in rows:
            out[f"load.{figure}"] = [_load_value(value) for value in rows[figure]]
    return out


def _load_value(value: Any) -> float:
    """A load's figure as a metric: a verdict 1 (true) or 0, a number as it is, anything else NaN (not logged)."""
    if str(value) in ("True", "False"):
        return float(str(value) == "True")
    number = pd.to_numeric(value, errors="coerce")
    return float(number) if number is not None else math.nan


@dataclass(frozen=True)
class Store:
    """Where an export writes: the tracking URI and, for a SQLite store, its file and folder."""

    uri: str
    scheme: str
    #: a SQLite store's folder (locked while exporting) and file; None for a server or a database
    folder: Path | None = None
    db: Path | None = None
    #: the artifact location of an experiment the export creates (None: the tracking server's own)
    artifacts: str | None = None


def store_of(store_dir: Path) -> Store:
    """The store an export into ``store_dir`` writes to: ``MLFLOW_TRACKING_URI`` where set, else a SQLite file
    in ``store_dir``. A UserError for a URI that names no store this export can use."""
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        folder = Path(store_dir).resolve()
        if "?" in str(folder) or "#" in str(folder):
            raise UserError(
                f"--out-dir {store_dir}: its path holds '?' or '#', which would make the SQLite URI of the store "
                "in it name another file; choose a folder without them"
            )
        return Store(f"sqlite:///{folder / 'mlflow.db'}", "sqlite", folder, folder / "mlflow.db", _artifacts(folder))
    where = f"MLFLOW_TRACKING_URI={uri!r}"
    scheme = "databricks" if uri == "databricks" else urlparse(uri).scheme.split("+")[0].lower()
    if scheme == "sqlite":
        if "?" in uri or "#" in uri:
            raise UserError(
                f"{where}: SQLite takes what follows '?' or '#' in its URI as options, so the store would be "
                "another file than the one named; give the file's path without '?' and '#'"
            )
        path = uri.removeprefix("sqlite:///")
        if not uri.startswith("sqlite:///") or path in ("", ":memory:"):
            raise UserError(
                f"{where}: not a SQLite file; write sqlite:///<relative path> or sqlite:////<absolute path>"
            )
        db = Path(path).resolve()  # relative to the current folder, as SQLAlchemy opens it
        return Store(uri, scheme, db.parent, db, _artifacts(db.parent))
    if scheme in _SERVERS:
        return Store(uri, scheme)
    if scheme in _DATABASES:
        return Store(uri, scheme, artifacts=_artifacts(Path(store_dir).resolve()))
    if scheme in ("", "file"):
        folder = Path(urlparse(uri).path if scheme else uri).resolve()
        raise UserError(
            f"{where}: a folder is MLflow's file store, which MLflow 3 refuses; use a SQLite file in it "
            f"(sqlite:///{folder / 'mlflow.db'}) or another of: {', '.join(SCHEMES.values())}"
        )
    raise UserError(f"{where}: unknown scheme {scheme!r}; the export writes to {', '.join(SCHEMES.values())}")


def _artifacts(folder: Path) -> str:
    """Where a new experiment's artifacts go beside a store in ``folder`` (MLflow's default is ./mlruns in
    whatever the current folder is)."""
    return (folder / "artifacts").as_uri()


def _number(value: Any) -> float | None:
    """``value`` as a metric, or None: real numbers only (a boolean is a tag), finite ones."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        return None
    return float(value) if math.isfinite(value) else None


def _text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # a batch of 4, not "4.0" (pandas reads an integer column with gaps as floats)
    return str(value)


def _check_name(name: str, what: str) -> None:
    """A ValueError naming ``name`` where MLflow would refuse it as a param, metric or tag name (mid-run)."""
    normal = posixpath.normpath(name)
    if not _NAME.fullmatch(name) or len(name) > _NAME_CHARS or normal != name or normal.startswith(("..", "/")):
        raise ValueError(
            f"{what} {name!r} cannot be an MLflow name: names hold only letters, digits, '_', '-', '.', ':', '/' "
            f"and spaces, at most {_NAME_CHARS} characters, and are no path ('..', leading '/'); rename it"
        )


def _row_key(row: dict[str, Any]) -> CellKey:
    """The cell of a summary row; a ValueError naming the column whose value is no cell's."""
    values: dict[str, Any] = {}
    for column in KEY_COLUMNS:
        value = row.get(column)
        if column in ("batch_size", "seq_len", "threads"):
            least = 1 if column == "batch_size" else 0
            number = _number(value)
            if number is None or not number.is_integer() or number < least:
                raise ValueError(f"{column} {value!r} is not a whole number of at least {least}")
            values[column] = int(number)
            continue
        text = "" if value is None else str(value)
        # each axis is one folder or file name of the cell's record and plots: never a way out of them
        if text in ("", ".", "..") or any(c in text for c in "/\\\0"):
            raise ValueError(f"{column} {text!r} is not a name (one folder name: not empty, no '/' or '..')")
        values[column] = text
    return CellKey(**values)  # a ValueError for a scenario that is none


def _is_rows_record(row: dict[str, Any], record: CellRecord) -> bool:
    """Whether ``record`` is the one ``row`` summarises: every column of the row that the record's own row
    has holds the same value there (a foreign or edited summary's row is not this record's)."""
    own = summary_row(record)
    return all(_text(value) == _text(own[column]) for column, value in row.items() if column in own)


def cell_run(
    row: dict[str, Any], key: CellKey, record: CellRecord | None, plots: list[Path], record_path: Path | None
) -> CellRun:
    """The MLflow run of one summary row: its settings as params, its numbers as metrics, the rest as tags. A
    ValueError names what MLflow would refuse (an option's name) or what no measurement is (a figure not
    finite or negative, a cell that is none); the columns' names are checked by ``summary_runs``."""
    present = {k: v for k, v in row.items() if v is not None and not (isinstance(v, float) and math.isnan(v))}
    if record is not None and not _is_rows_record(row, record):
        record = record_path = None  # another record of the cell: neither its identity nor its file
    host = row.get("hostname") or (record.environment.get("hostname") if record else None)
    created = str(row.get("created_at") or (record.created_at if record else ""))
    record_id = f"{host or '?'}:{key.cell_id}@{created}"
    params = {k: _text(present[k]) for k in PARAM_COLUMNS if k in present}
    # what the engine ran with, its declared defaults filled in (the record's; the summary has no options)
    for name, value in ((record.options if record else None) or {}).items():
        if name not in VARIANT_KEYS:  # which implementation and where: the cell's axes say it
            _check_name(f"option.{name}", "the record's engine option")
            params[f"option.{name}"] = _text(value)[:_PARAM_CHARS]
    metrics, tags = {}, {}
    for column, value in present.items():
        if column in PARAM_COLUMNS:
            continue
        if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
            tags[column] = _text(value)[:_TAG_CHARS]
        elif not math.isfinite(value) or (value < 0 and column.endswith(_NON_NEGATIVE)):
            rule = (
                "a figure is finite"
                if not math.isfinite(value)
                else "a duration, size, rate or energy is never negative"
            )
            raise ValueError(f"{column} is {value}: {rule}; correct the row, or export the summary its records make")
        else:
            metrics[column] = float(value)
    # the rest of the environment's fingerprint, which the summary leaves out
    environment = (record.environment if record else None) or {}
    tags |= {f"env.{k}": _text(environment[k]) for k in FINGERPRINT_TAGS if environment.get(k) is not None}
    tags |= {CELL_TAG: key.cell_id, RECORD_TAG: record_id, "mlflow.runName": key.cell_id}
    start = datetime.fromisoformat(created) if created else None  # a ValueError for a time that is none
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


def _inside(path: Path, folder: Path) -> Path:
    """``path``, resolved (symlinks too); a UserError where that is outside ``folder``."""
    resolved, base = path.resolve(), folder.resolve()
    if not resolved.is_relative_to(base):
        raise UserError(
            f"{path} is {resolved}, outside {folder}: the export copies no file from outside the run's folders; "
            "replace the link (or the row naming it) with the file itself"
        )
    return resolved


def _read_summary(summary_csv: Path) -> pd.DataFrame:
    try:
        with open(summary_csv, newline="", encoding="utf-8") as file:
            header = next(csv.reader(file), [])
        summary = read_summary_csv(summary_csv)
    except (OSError, ValueError, csv.Error) as error:
        raise UserError(f"{summary_csv}: cannot be read as a summary CSV ({type(error).__name__}: {error})") from error
    repeated = sorted({c for c in header if header.count(c) > 1})
    if repeated:  # pandas would read the second as "<name>.1", a figure of its own
        raise UserError(f"{summary_csv}: column {', '.join(repeated)} appears more than once; keep one of each")
    missing = [c for c in (*KEY_COLUMNS, "status") if c not in summary]
    if missing:
        raise UserError(f"{summary_csv} is not an inferbench summary: it has no column {', '.join(missing)}")
    try:  # each column is a metric or tag name: refused now, not by MLflow mid-run
        for column in summary.columns:
            _check_name(str(column), "column")
    except ValueError as error:
        raise UserError(f"{summary_csv}: {error}") from error
    return summary.astype(object).where(pd.notna(summary), None)


def summary_runs(summary_csv: Path, cells_dir: Path, plots_dir: Path) -> list[CellRun]:
    """The runs of every row of ``summary_csv``, with each cell's record (under ``cells_dir``, where it is)
    and its workload's plots (under ``plots_dir``); a UserError names a row that cannot be exported as it is."""
    runs: list[CellRun] = []
    table = importlib.import_module(LOADS_TABLE)  # the LLM serving cells' loads, beside the summary
    loads = table.read_loads(Path(summary_csv).parent / table.LOADS_CSV)
    rows: dict[str, int] = {}  # record -> its row
    plots_of: dict[str, list[Path]] = {}
    for number, row in enumerate(_read_summary(summary_csv).to_dict("records"), start=1):
        where = f"{summary_csv} row {number}"
        try:
            key = _row_key(row)
        except ValueError as error:
            raise UserError(f"{where}: {error}") from error
        path = Path(cells_dir) / key.relpath
        record = None
        if path.exists():
            _inside(path, Path(cells_dir))
            try:
                record = CellRecord.load(path)
            except UNREADABLE as error:
                raise UserError(
                    f"{path}: cannot be read ({error_text(error)[:300]}); `python -m inferbench clean` removes it"
                ) from error
        if key.workload not in plots_of:  # a workload's plots listed and checked once, not per row
            folder = Path(plots_dir) / key.workload
            found = sorted(folder.glob("*.png")) if folder.is_dir() else []
            plots_of[key.workload] = [_inside(p, Path(plots_dir)) for p in found]
        plots = plots_of[key.workload]
        try:
            run = cell_run(row, key, record, plots, path if record else None)
        except ValueError as error:
            raise UserError(f"{where} ({key.cell_id}): {error}") from error
        run.load_metrics = load_metrics(loads, key.cell_id)
        if run.load_metrics:  # the table itself beside the run, as the summary has none of it
            run.artifacts["loads"] = [Path(summary_csv).parent / table.LOADS_CSV]
        if run.record_id in rows:
            raise UserError(
                f"{summary_csv}: rows {rows[run.record_id]} and {number} are one record ({run.record_id}); a "
                "summary holds each record once: remove one, or give each row its hostname and created_at"
            )
        rows[run.record_id] = number
        runs.append(run)
    return runs


@contextmanager
def _exclusive(store: Store) -> Iterator[None]:
    """Hold a SQLite store's export lock for the block (nothing for a server or a database), after any other
    export into it; a UserError where the store's folder or file is not writable."""
    if store.folder is None:
        yield
        return
    lock = store.folder / LOCK_NAME
    try:
        store.folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as error:
        raise UserError(_not_writable(store, error)) from error
    try:
        _take(fd, lock)
        try:
            with tempfile.TemporaryFile(dir=store.folder):  # SQLite writes its journal beside the file
                pass
            if store.db is not None and store.db.exists():
                with open(store.db, "r+b"):
                    pass
        except OSError as error:
            raise UserError(_not_writable(store, error)) from error
        yield
    finally:
        os.close(fd)  # and with it the lock


def _not_writable(store: Store, error: OSError) -> str:
    return (
        f"the MLflow store in {store.folder} is not writable ({error.filename or store.folder}: "
        f"{error.strerror or error}): make it writable, or export elsewhere (--out-dir DIR, or "
        "MLFLOW_TRACKING_URI=sqlite:///<file>)"
    )


def _take(fd: int, lock: Path) -> None:
    """Lock ``fd`` exclusively, waiting (said on stderr) up to ``LOCK_WAIT_S`` for the export that holds it."""
    deadline, told = time.monotonic() + LOCK_WAIT_S, False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        except OSError as error:  # a filesystem without locks (ENOLCK)
            raise UserError(f"{lock} cannot be locked ({error.strerror}): keep the store on a local disk") from error
        if time.monotonic() > deadline:
            raise UserError(
                f"another export into {lock.parent} has held {lock} for {LOCK_WAIT_S:.0f} s: let it end (or stop "
                "it), then export again"
            )
        if not told:
            print(f"waiting for another export into {lock.parent} to end ({lock})", file=sys.stderr, flush=True)
            told = True
        time.sleep(0.2)


def _mlflow_schema() -> tuple[str, set[str]] | None:
    """This MLflow's schema revision and all it knows (through MLflow's own helpers: None where they moved)."""
    try:
        from alembic.script import ScriptDirectory
        from mlflow.store.db.utils import _get_alembic_config

        script = ScriptDirectory.from_config(_get_alembic_config(db_url=""))
        return script.get_current_head(), {revision.revision for revision in script.walk_revisions()}
    except (ImportError, AttributeError, TypeError):
        return None


def _check_schema(store: Store) -> None:
    """A UserError unless a SQLite store is new or of the schema this MLflow uses: MLflow would migrate an
    older one in place (another MLflow sharing it then fails) and cannot open a newer one."""
    if store.db is None or not store.db.exists() or store.db.stat().st_size == 0:
        return
    try:
        with closing(sqlite3.connect(f"{store.db.as_uri()}?mode=ro", uri=True)) as db:
            tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            found = (
                db.execute("SELECT version_num FROM alembic_version").fetchone()
                if "alembic_version" in tables
                else None
            )
    except sqlite3.Error as error:
        raise UserError(
            f"{store.db} is no MLflow store ({error_text(error)}): move it away, or export elsewhere (--out-dir)"
        ) from error
    if not tables:
        return
    if found is None:
        raise UserError(f"{store.db} is an SQLite database but no MLflow store: move it away, or export elsewhere")
    schema = _mlflow_schema()
    if schema is None or found[0] == schema[0]:
        return
    from mlflow.version import VERSION

    if found[0] in schema[1]:
        raise UserError(
            f"the MLflow store {store.uri} has the schema of an older MLflow ({found[0]}; MLflow {VERSION} uses "
            f"{schema[0]}): back it up, then run `mlflow db upgrade {store.uri}` and export again"
        )
    raise UserError(
        f"the MLflow store {store.uri} has a schema MLflow {VERSION} does not know ({found[0]}), a newer MLflow's: "
        "export with that MLflow (python -m pip install -U mlflow), or into another store"
    )


def _check_answers(uri: str) -> None:
    """A UserError unless a tracking server at ``uri`` answers within ``SERVER_TIMEOUT_S`` (whatever it says:
    MLflow's own requests then say what is wrong)."""
    import requests

    try:
        requests.get(
            f"{uri.rstrip('/')}/api/2.0/mlflow/experiments/get-by-name",
            params={"experiment_name": DEFAULT_EXPERIMENT},
            timeout=(SERVER_TIMEOUT_S, SERVER_TIMEOUT_S),
        )
    except requests.exceptions.SSLError:
        return  # it answered; MLflow's own TLS settings (MLFLOW_TRACKING_INSECURE_TLS...) apply from here
    except requests.RequestException as error:
        raise UserError(
            f"MLFLOW_TRACKING_URI={uri}: no MLflow server answered within {SERVER_TIMEOUT_S:.0f} s "
            f"({type(error).__name__}): start it, or correct the URI"
        ) from error


@contextmanager
def _http_limits() -> Iterator[None]:
    """MLflow's HTTP retries as ``HTTP_LIMITS`` for the block, where the user has not set them."""
    unset = [name for name in HTTP_LIMITS if name not in os.environ]
    os.environ.update({name: HTTP_LIMITS[name] for name in unset})
    try:
        yield
    finally:
        for name in unset:
            os.environ.pop(name, None)


class _Cancel:
    """SIGTERM (a cancelled job) as SystemExit during an export, so that the run being written is marked FAILED
    rather than left RUNNING. Inside ``calls()`` (MLflow's calls into a database, which an exception raised in
    the middle of a transaction would leave locked against that very mark) it takes effect at the block's end."""

    def __init__(self, deferring: bool) -> None:
        self.deferring, self.inside, self.received = deferring, False, 0

    def _stop(self, signum: int, _frame: Any) -> None:
        self.received = signum
        if not self.inside:
            raise SystemExit(128 + signum)

    @contextmanager
    def installed(self) -> Iterator[_Cancel]:
        if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
            yield self
            return
        previous = signal.signal(signal.SIGTERM, self._stop)
        try:
            yield self
        finally:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)

    @contextmanager
    def calls(self) -> Iterator[None]:
        self.inside = self.deferring
        try:
            yield
        finally:
            self.inside = False
        if self.received:
            raise SystemExit(128 + self.received)


def _client(store: Store, experiment: str) -> tuple[Any, str, dict[str, list[Any]]]:
    """An MLflow client of the store, checked; the experiment's id (created where missing, its artifacts where
    ``store`` says) and its runs by the record they were exported from."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    _check_schema(store)
    if store.scheme in ("http", "https"):
        _check_answers(store.uri)
    try:
        client = MlflowClient(tracking_uri=store.uri)
        found = client.get_experiment_by_name(experiment)
        if found is not None and found.lifecycle_stage != "active":
            raise UserError(
                f"the experiment {experiment!r} of {store.uri} is deleted: restore it (mlflow experiments restore "
                f"--experiment-id {found.experiment_id}), or export into another (--experiment NAME)"
            )
        if found is None:
            experiment_id = client.create_experiment(experiment, artifact_location=store.artifacts)
        else:
            experiment_id = found.experiment_id
        runs: dict[str, list[Any]] = {}
        token = None
        while True:
            page = client.search_runs([experiment_id], max_results=1000, page_token=token)
            for run in page:
                if RECORD_TAG in run.data.tags:
                    runs.setdefault(run.data.tags[RECORD_TAG], []).append(run)
            if not (token := page.token):
                return client, experiment_id, runs
    except MlflowException as error:
        said = str(error.message).replace("<database_uri>", store.uri)[:1000]
        raise UserError(f"the MLflow store {store.uri} cannot be used: {said}") from error


def _conflicts(found: Any, run: CellRun) -> list[str]:
    """The params, metrics and tags that ``found`` (an MLflow run) holds with other values than ``run``."""
    data = found.data
    held = ((data.params, run.params), (data.metrics, run.metrics), (data.tags, run.tags))
    return [name for old, new in held for name, value in new.items() if name in old and old[name] != value]


def _write(client: Any, experiment_id: str, run: CellRun, found: Any, uri: str, cancel: _Cancel) -> None:
    """Write ``run`` into ``found`` (an MLflow run of its record and figures), else into a new run; a run
    that cannot be written to the end is FAILED, not RUNNING."""
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.exceptions import MlflowException

    run_id = None if found is None else found.info.run_id
    try:
        if found is None:
            with cancel.calls():
                run_id = client.create_run(
                    experiment_id, start_time=run.start_ms, tags=run.tags, run_name=run.name
                ).info.run_id
            known_params, known_metrics = {}, {}
        else:
            known_params, known_metrics = found.data.params, found.data.metrics
        # params never change in MLflow: only those the run lacks; metrics likewise (those it holds are the
        # row's), so that a second export leaves each metric's history as it was
        params = [Param(k, v) for k, v in run.params.items() if k not in known_params]
        metrics = [Metric(k, v, run.start_ms, 0) for k, v in run.metrics.items() if k not in known_metrics]
        metrics += [Metric(k, v, run.start_ms, step) for k, history in run.load_metrics.items()
                    if k not in known_metrics for step, v in enumerate(history) if math.isfinite(v)]  # fmt: skip
        tags = [RunTag(k, v) for k, v in run.tags.items()]
        for start in range(0, max(len(params), len(metrics), len(tags)), 100):  # MLflow's batch limits
            with cancel.calls():
                client.log_batch(
                    run_id, metrics[start : start + 100], params[start : start + 100], tags[start : start + 100]
                )
        for folder, files in run.artifacts.items():
            for path in files:  # files copied, no transaction: cancelled at once
                client.log_artifact(run_id, str(path), artifact_path=folder)
        with cancel.calls():
            client.set_terminated(run_id, status=run.status, end_time=run.start_ms)
    except BaseException as error:
        failed = run_id is not None and (found is None or found.info.status == "RUNNING")
        if failed:
            with cancel.calls(), suppress(Exception):
                client.set_terminated(run_id, status="FAILED", end_time=run.start_ms)
        if isinstance(error, MlflowException | OSError):
            state = "marked FAILED" if failed else "as it was"
            raise UserError(
                f"{run.name}: writing its run {run_id or '(not created)'} into {uri} failed "
                f"({error_text(error)[:500]}); the run is {state}: correct that and export again (it completes the run)"
            ) from error
        raise


def export_mlflow(
    summary_csv: Path, cells_dir: Path, plots_dir: Path, store_dir: Path, experiment: str = DEFAULT_EXPERIMENT
) -> dict[str, Any]:
    """Export every cell of ``summary_csv`` as an MLflow run (see the module's docstring); return where to,
    and how many runs were created and updated. The summary and the store are checked before anything is
    written."""
    store = store_of(store_dir)
    runs = summary_runs(summary_csv, cells_dir, plots_dir)
    if importlib.util.find_spec("mlflow") is None:
        raise UserError("mlflow is not installed: python -m pip install -e '.[mlflow]'")
    created = updated = 0
    # a tracking server's requests are cut at once; a database's transactions are not
    with _Cancel(deferring=store.scheme not in _SERVERS).installed() as cancel, _exclusive(store), _http_limits():
        with cancel.calls():  # a new store's migrations, too; under the lock, every earlier export's runs
            client, experiment_id, existing = _client(store, experiment)
        for run in runs:
            found = next((r for r in existing.get(run.record_id, []) if not _conflicts(r, run)), None)
            _write(client, experiment_id, run, found, store.uri, cancel)
            created, updated = created + (found is None), updated + (found is not None)
    return {
        "tracking_uri": store.uri,
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
