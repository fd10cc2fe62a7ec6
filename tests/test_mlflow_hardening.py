"""Issue 56, the MLflow export (inferbench.exporters.mlflow) on what it used to mishandle, with real SQLite
stores read back through MLflow's own client.

Two exports at once made 40 runs for 20 cells (or crashed in MLflow's migration of a new store); a summary
without hostname and created_at overwrote another run's figures; a bad column name left a run RUNNING; a
`../` workload copied files from outside the run; a `?` in a SQLite URI named another file and artifacts
landed in ./mlruns; a read-only store, another MLflow's schema, an unknown scheme and a server that never
answers gave tracebacks or minutes of silent retries.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.synchronize
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pandas as pd
import pytest

from inferbench.analysis.summary import write_summary
from inferbench.core.cells import CellKey, CellRecord
from inferbench.core.errors import UserError
from inferbench.exporters import mlflow as exporter
from inferbench.exporters.mlflow import RECORD_TAG, export_mlflow
from tests.conftest import REPO

pytestmark = pytest.mark.slow

pytest.importorskip("mlflow")
CREATED = "2024-01-01T00:00:00+00:00"


@pytest.fixture(autouse=True)
def local_store(monkeypatch):
    """Each export writes the SQLite store under its --out-dir, unless a test says otherwise."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """An empty MLflow store of this MLflow's schema (made once: its migrations take seconds), to copy."""
    from mlflow.tracking import MlflowClient

    db = tmp_path_factory.mktemp("template") / "mlflow.db"
    MlflowClient(f"sqlite:///{db}").search_experiments()
    return db


def _store(template: Path, folder: Path) -> Path:
    """A store made before the export, in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(template, folder / "mlflow.db"))


def _results(root: Path, cells: int = 3, p50: float = 1.0, commit: str = "abc1234") -> tuple[Path, Path, Path]:
    """A summary of ``cells`` measured cells with their records and a plot: (summary, cells_dir, plots_dir)."""
    paths = []
    for batch in range(1, cells + 1):
        key = CellKey("mlp_heart", "torch_eager", "fp32", "cpu", batch, 0, 1)
        record = CellRecord(
            key,
            "ok",
            "torch_eager",
            latency_ms={"p50": p50 * batch, "p99": 2 * p50 * batch},
            throughput_per_s=1000.0 / (p50 * batch),
            environment={"hostname": "h1", "git_commit": commit},
            created_at=CREATED,
        )
        paths.append(root / "cells" / key.relpath)
        record.save(paths[-1])
    (root / "plots" / "mlp_heart").mkdir(parents=True)
    (root / "plots" / "mlp_heart" / "latency.png").write_bytes(b"\x89PNG a plot")
    write_summary(paths, root / "summary.csv", root / "summary.parquet")
    return root / "summary.csv", root / "cells", root / "plots"


def _runs(db: Path) -> list:
    """Every run of every experiment of the store."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{db}")
    experiments = [e.experiment_id for e in client.search_experiments()]
    return list(client.search_runs(experiments, max_results=1000)) if experiments else []


def _statuses(db: Path) -> list[str]:
    with closing(sqlite3.connect(db)) as connection:
        return [status for (status,) in connection.execute("SELECT status FROM runs")]


def _export_command(summary: Path, cells: Path, plots: Path, out: Path) -> list[str]:
    return [
        *(sys.executable, "-m", "inferbench", "export", "mlflow"),
        *("--summary", str(summary), "--cells-dir", str(cells), "--plots-dir", str(plots), "--out-dir", str(out)),
    ]


# --- exports at once, and runs keyed on their records ------------------------------------------------------


def _export_at(
    barrier: multiprocessing.synchronize.Barrier, summary: Path, cells: Path, plots: Path, out: Path
) -> None:
    barrier.wait()  # both exports start together
    export_mlflow(summary, cells, plots, out)


def test_two_exports_at_once_make_one_run_per_cell_in_a_new_and_in_an_existing_store(tmp_path, template):
    summary, cells, plots = _results(tmp_path / "run", cells=6)
    new, existing = tmp_path / "new", tmp_path / "existing"
    _store(template, existing)
    fork = multiprocessing.get_context("fork")  # processes of their own, MLflow already imported
    for out in (new, existing):
        barrier = fork.Barrier(2)
        exports = [fork.Process(target=_export_at, args=(barrier, summary, cells, plots, out)) for _ in range(2)]
        for process in exports:
            process.start()
        for process in exports:
            process.join(timeout=300)
        assert [process.exitcode for process in exports] == [0, 0], out
        runs = _runs(out / "mlflow.db")
        assert sorted(run.info.run_name for run in runs) == sorted(
            CellKey("mlp_heart", "torch_eager", "fp32", "cpu", b, 0, 1).cell_id for b in range(1, 7)
        )  # one run per cell: the second export found the first's
        assert {run.info.status for run in runs} == {"FINISHED"}


def _with(frame: pd.DataFrame, **columns: float) -> pd.DataFrame:
    """``frame`` with ``columns`` added after its own (a name it has already: a second column of that name)."""
    return pd.concat([frame, pd.DataFrame(columns, index=frame.index)], axis=1)


def _without_identity(summary: Path, out: Path) -> Path:
    """``summary`` without the columns that say which record a row is."""
    pd.read_csv(summary).drop(columns=["hostname", "created_at"]).to_csv(out, index=False)
    return out


def test_a_summary_without_hostname_and_created_at_never_overwrites_another_runs_figures(tmp_path, template):
    first, _, plots = _results(tmp_path / "a", p50=1.0, commit="aaaaaaa")
    other, _, _ = _results(tmp_path / "b", p50=5.0, commit="bbbbbbb")
    first, other = _without_identity(first, tmp_path / "first.csv"), _without_identity(other, tmp_path / "other.csv")
    no_records = tmp_path / "no-records"
    db = _store(template, tmp_path / "store")
    export_mlflow(first, no_records, plots, db.parent)
    before = {run.info.run_id: (run.data.metrics, run.data.tags["git_commit"]) for run in _runs(db)}
    assert len(before) == 3
    done = export_mlflow(other, no_records, plots, db.parent)
    assert (done["created"], done["updated"]) == (3, 0)  # its own runs: other figures, other commit
    after = {run.info.run_id: (run.data.metrics, run.data.tags["git_commit"]) for run in _runs(db)}
    assert len(after) == 6 and {k: after[k] for k in before} == before
    again = export_mlflow(first, no_records, plots, db.parent)
    assert (again["created"], again["updated"]) == (0, 3) and len(_runs(db)) == 6


def test_a_row_takes_its_identity_from_its_record_file_only_where_that_is_its_record(tmp_path, template):
    summary, cells, plots = _results(tmp_path / "a", p50=1.0)
    foreign, _, _ = _results(tmp_path / "b", p50=5.0)
    summary, foreign = _without_identity(summary, tmp_path / "own.csv"), _without_identity(foreign, tmp_path / "f.csv")
    db = _store(template, tmp_path / "store")
    export_mlflow(summary, cells, plots, db.parent)
    own = _runs(db)
    assert {run.data.tags[RECORD_TAG] for run in own} == {
        f"h1:mlp_heart/torch_eager-fp32/cpu/b{b}-s0-t1@{CREATED}" for b in (1, 2, 3)
    }  # the record's host and time
    done = export_mlflow(foreign, cells, plots, db.parent)  # the same cells' records, other figures
    assert done["created"] == 3
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{db}")
    for run in _runs(db):
        ours = run.info.run_id in {r.info.run_id for r in own}
        assert run.data.metrics["latency_p50_ms"] in ((1.0, 2.0, 3.0) if ours else (5.0, 10.0, 15.0))
        assert bool(client.list_artifacts(run.info.run_id, "record")) == ours  # the record only with its row


def test_a_summary_holding_a_record_or_a_column_twice_is_refused_by_name(tmp_path):
    summary, cells, plots = _results(tmp_path / "a")
    frame = pd.read_csv(summary)
    twice = tmp_path / "twice.csv"
    pd.concat([frame, frame.iloc[[1]]]).to_csv(twice, index=False)
    with pytest.raises(UserError, match=r"rows 2 and 4 are one record \(h1:mlp_heart/torch_eager-fp32/cpu/b2-s0-t1@"):
        export_mlflow(twice, cells, plots, tmp_path / "store")
    repeated = tmp_path / "repeated.csv"
    _with(frame, latency_p50_ms=1.0).to_csv(repeated, index=False)
    with pytest.raises(UserError, match="column latency_p50_ms appears more than once"):
        export_mlflow(repeated, cells, plots, tmp_path / "store")
    negative = tmp_path / "negative.csv"
    frame.assign(latency_p99_ms=-1.0).to_csv(negative, index=False)  # replaces the column
    with pytest.raises(UserError, match=r"row 1 \(mlp_heart/.*\): latency_p99_ms is -1.0: .* never negative"):
        export_mlflow(negative, cells, plots, tmp_path / "store")
    assert not (tmp_path / "store").exists()  # refused before the store is made


# --- failures leave no run RUNNING ---------------------------------------------------------------------------


def test_a_column_mlflow_refuses_is_named_before_any_run_is_made(tmp_path, template):
    summary, cells, plots = _results(tmp_path / "a")
    _with(pd.read_csv(summary), **{"p50 (ms)": 1.0}).to_csv(summary, index=False)
    db = _store(template, tmp_path / "store")
    with pytest.raises(UserError, match=r"column 'p50 \(ms\)' cannot be an MLflow name"):
        export_mlflow(summary, cells, plots, db.parent)
    assert _statuses(db) == []


def test_an_error_mid_run_marks_that_run_failed_and_the_next_export_completes_it(tmp_path, template, monkeypatch):
    from mlflow.tracking import MlflowClient

    summary, cells, plots = _results(tmp_path / "a")
    db = _store(template, tmp_path / "store")

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(MlflowClient, "log_artifact", disk_full)
        with pytest.raises(UserError, match=r"b1-s0-t1: writing its run \w+ into sqlite:.* is marked FAILED"):
            export_mlflow(summary, cells, plots, db.parent)
    assert _statuses(db) == ["FAILED"]
    done = export_mlflow(summary, cells, plots, db.parent)
    assert (done["created"], done["updated"]) == (2, 1) and sorted(_statuses(db)) == ["FINISHED"] * 3


def test_an_export_cancelled_mid_run_leaves_no_run_running(tmp_path, template):
    summary, cells, plots = _results(tmp_path / "a")
    db = _store(template, tmp_path / "store")
    slow = (
        "import sys, time; from mlflow.tracking import MlflowClient; "
        "MlflowClient.log_artifact = lambda *a, **k: time.sleep(120); "
        "from inferbench.cli.main import main; sys.exit(main(sys.argv[1:]))"
    )
    command = [sys.executable, "-c", slow, *_export_command(summary, cells, plots, db.parent)[3:]]
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    process = subprocess.Popen(command, env=env, cwd=REPO)
    try:
        deadline = time.monotonic() + 120
        while "RUNNING" not in _statuses(db) and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _statuses(db) == ["RUNNING"]  # writing its first run's artifacts
        process.send_signal(signal.SIGTERM)  # as Snakemake cancels a job
        assert process.wait(timeout=60) != 0
    finally:
        process.kill()
    assert _statuses(db) == ["FAILED"]


# --- nothing read or written outside the run ------------------------------------------------------------------


def test_a_workload_naming_a_way_out_of_the_plots_is_refused_and_nothing_is_copied(tmp_path):
    summary, cells, plots = _results(tmp_path / "run" / "results")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.png").write_bytes(b"not the run's")
    escape = tmp_path / "escape.csv"
    pd.read_csv(summary).assign(workload="../../outside").to_csv(escape, index=False)
    with pytest.raises(UserError, match=r"row 1: workload '\.\./\.\./outside' is not a name"):
        export_mlflow(escape, cells, plots, tmp_path / "store")
    (plots / "mlp_heart" / "latency.png").unlink()
    (plots / "mlp_heart").rmdir()
    (plots / "mlp_heart").symlink_to(outside)  # a link out of the plots folder
    with pytest.raises(UserError, match=rf"{plots / 'mlp_heart' / 'secret.png'} is {outside / 'secret.png'}, outside"):
        export_mlflow(summary, cells, plots, tmp_path / "store")
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize("name", ["a?mode=ro.db", "a#b.db"])
def test_a_sqlite_uri_that_names_another_file_is_refused(tmp_path, monkeypatch, name):
    summary, cells, plots = _results(tmp_path / "a")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'store' / name}")
    with pytest.raises(UserError, match=r"MLFLOW_TRACKING_URI=.*'\?' or '#'"):
        export_mlflow(summary, cells, plots, tmp_path / "out")
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    with pytest.raises(UserError, match=r"--out-dir .*: its path holds '\?' or '#'"):
        export_mlflow(summary, cells, plots, tmp_path / "store" / name.removesuffix(".db"))
    assert not (tmp_path / "store").exists() and not (tmp_path / "out").exists()


def test_artifacts_go_beside_the_sqlite_store_never_into_mlruns_of_the_current_folder(tmp_path, template, monkeypatch):
    summary, cells, plots = _results(tmp_path / "a")
    db = _store(template, tmp_path / "elsewhere")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    export_mlflow(summary, cells, plots, tmp_path / "out")
    assert list((tmp_path / "cwd").iterdir()) == []  # no ./mlruns
    assert len(list((db.parent / "artifacts").rglob("latency.png"))) == 3
    assert len(list((db.parent / "artifacts").rglob("b1-s0-t1.json"))) == 1


# --- the store checked before anything is written ------------------------------------------------------------


@pytest.mark.skipif(
    subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode != 0
    if shutil.which("unshare")
    else True,
    reason="no user and mount namespaces here (unshare -rm) to mount a store read-only",
)
def test_a_read_only_store_is_refused_naming_its_path(tmp_path, template):
    summary, cells, plots = _results(tmp_path / "a")
    db = _store(template, tmp_path / "store")
    store = str(db.parent)
    export = " ".join(f"'{word}'" for word in _export_command(summary, cells, plots, db.parent))
    # a read-only filesystem, which even root cannot write (a chmod would not stop root)
    script = f"mount --bind '{store}' '{store}' && mount -o remount,bind,ro '{store}' && exec {export}"
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], env=env, capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    assert f"the MLflow store in {store} is not writable ({store}/.export.lock: Read-only file system)" in done.stderr
    assert "Traceback" not in done.stderr and _statuses(db) == []


def _set_schema(db: Path, revision: str) -> None:
    with closing(sqlite3.connect(db)) as connection, connection:
        connection.execute("UPDATE alembic_version SET version_num = ?", (revision,))


def test_a_store_of_another_mlflow_schema_is_refused_saying_how_to_upgrade_it(tmp_path, template):
    from alembic.script import ScriptDirectory
    from mlflow.store.db.utils import _get_alembic_config

    summary, cells, plots = _results(tmp_path / "a")
    head = ScriptDirectory.from_config(_get_alembic_config(db_url="")).get_revision("head")
    db = _store(template, tmp_path / "store")
    _set_schema(db, head.down_revision)  # an older MLflow's
    with pytest.raises(UserError, match=rf"back it up, then run `mlflow db upgrade sqlite:///{db}`"):
        export_mlflow(summary, cells, plots, db.parent)
    _set_schema(db, "0123456789ab")  # one this MLflow does not know: a newer one's
    with pytest.raises(UserError, match=r"a schema MLflow .* does not know \(0123456789ab\), a newer MLflow's"):
        export_mlflow(summary, cells, plots, db.parent)
    with closing(sqlite3.connect(db)) as connection:  # not migrated in place
        assert connection.execute("SELECT version_num FROM alembic_version").fetchall() == [("0123456789ab",)]
        assert connection.execute("SELECT count(*) FROM runs").fetchone() == (0,)


def test_an_unknown_uri_scheme_is_refused_naming_it_and_the_allowed_ones(tmp_path, monkeypatch):
    summary, cells, plots = _results(tmp_path / "a")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "ftp://example.org/store")
    with pytest.raises(UserError, match=r"unknown scheme 'ftp'; the export writes to sqlite:///<file> .*, http://"):
        export_mlflow(summary, cells, plots, tmp_path / "out")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", str(tmp_path / "mlruns"))
    with pytest.raises(UserError, match=r"a folder is MLflow's file store, which MLflow 3 refuses; use a SQLite file"):
        export_mlflow(summary, cells, plots, tmp_path / "out")


def test_a_tracking_server_that_does_not_answer_fails_the_export_naming_its_uri(tmp_path, monkeypatch):
    summary, cells, plots = _results(tmp_path / "a")
    monkeypatch.setattr(exporter, "SERVER_TIMEOUT_S", 1.0)
    with socket.socket() as silent, socket.socket() as closed:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # connections complete in the backlog; nothing ever answers them
        closed.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
        for server in (silent, closed):
            uri = f"http://127.0.0.1:{server.getsockname()[1]}"
            monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
            with pytest.raises(UserError, match=rf"MLFLOW_TRACKING_URI={uri}: no MLflow server answered within 1 s"):
                export_mlflow(summary, cells, plots, tmp_path / "out")
