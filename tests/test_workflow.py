"""The workflow through Snakemake's API: a tiny real run, then dry-runs that count jobs per rule."""

from __future__ import annotations

import copy
import hashlib
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from snakemake.api import SnakemakeApi
from snakemake.settings.types import (
    ConfigSettings,
    DAGSettings,
    ExecutionSettings,
    OutputSettings,
    Quietness,
    ResourceSettings,
)

from inferbench.core.cells import CellRecord
from tests.conftest import REPO

pytestmark = pytest.mark.slow

TINY = yaml.safe_load((REPO / ".test" / "config" / "config.yaml").read_text())  # the workflow's test config
CPU_CELLS = 2 * 3 + 2 * 2 * 3  # mlp_heart: 2 batches x 3 engines; distilbert: x 2 seq lens
CUDA_CELLS = 2 * 2 + 2 * 2 * 2  # noop and torch_eager: ort_cpu never runs on cuda
TRT_CELLS = 2 + 2 * 2  # tensorrt runs on cuda only, and TensorRT is installed on none of our machines
CUDA_STATUS = "ok" if torch.cuda.is_available() else "unavailable"
ALL_CELLS = CPU_CELLS + CUDA_CELLS + TRT_CELLS


def snakemake(workdir: Path, config: dict, dryrun: bool, targets: list[str] | None = None) -> Counter:
    """Run (or dry-run) the workflow in ``workdir`` with ``config`` as its config file (to ``targets``, or
    its default target); jobs per rule."""
    (workdir / "config").mkdir(parents=True, exist_ok=True)
    (workdir / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    with SnakemakeApi(OutputSettings(quiet={Quietness.ALL})) as api:
        workflow_api = api.workflow(
            resource_settings=ResourceSettings(cores=2),
            config_settings=ConfigSettings(configfiles=[workdir / "config" / "config.yaml"]),
            snakefile=REPO / "Snakefile",
            workdir=workdir,
        )
        dag_api = workflow_api.dag(DAGSettings(targets=set(targets or [])))
        dag_api.execute_workflow(
            executor="dryrun" if dryrun else "local", execution_settings=ExecutionSettings(keep_going=False)
        )
        _, stats = workflow_api._workflow.dag.stats()
    stats.pop("total")
    return Counter({job: n for job, n in stats.items()})


def snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("wf")
    # module fixtures are set up before the function-scoped `private_lock`: take a private lock here too
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("INFERBENCH_LOCK_FILE", str(workdir / "inferbench-test.lock"))
        jobs = snakemake(workdir, TINY, dryrun=False)
    return workdir, jobs


def test_tiny_run_produces_records_summary_plots_and_report(tiny_run):
    workdir, jobs = tiny_run
    assert jobs["benchmark_cell"] == ALL_CELLS
    assert "build_tensorrt_engine" not in jobs  # nothing to build without TensorRT: the cells say why
    records = [CellRecord.load(p) for p in (workdir / "results" / "cells").rglob("*.json")]
    assert len(records) == ALL_CELLS
    by_status = Counter((r.key.device, r.status) for r in records if r.key.engine != "tensorrt")
    assert by_status == {("cpu", "ok"): CPU_CELLS, ("cuda", CUDA_STATUS): CUDA_CELLS}
    trt = [r for r in records if r.key.engine == "tensorrt"]
    assert len(trt) == TRT_CELLS and all(r.status == "unavailable" and "tensorrt" in r.reason for r in trt)

    summary = pd.read_csv(workdir / "results" / "summary.csv")
    required = [
        "workload",
        "engine",
        "precision",
        "device",
        "batch_size",
        "seq_len",
        "threads",
        "status",
        "latency_p50_ms",
        "latency_p90_ms",
        "latency_p95_ms",
        "latency_p99_ms",
        "latency_mean_ms",
        "throughput_per_s",
        "n_iters",
        "timing",
    ]
    assert set(required) <= set(summary.columns)
    assert len(summary) == len(records)
    assert pd.read_parquet(workdir / "results" / "summary.parquet").shape == summary.shape
    ok = summary[summary["status"] == "ok"]
    assert (ok["n_iters"] >= 3).all() and (ok["latency_p50_ms"] > 0).all()
    # CPU cells are timed end to end only (their inputs never leave the host); GPU cells at the device too
    assert (ok["timing"] == ok["device"].map({"cpu": "end_to_end", "cuda": "device"})).all()
    assert summary.loc[summary["workload"] == "mlp_heart", "seq_len"].eq(0).all()
    # the trained MLP's cells score its held-out rows as they run; the random-weight encoder has none
    heart = ok[(ok["workload"] == "mlp_heart") & (ok["engine_impl"] != "noop")]
    assert heart["parity_auc"].between(0, 1).all() and ok.loc[ok["workload"] == "distilbert", "parity_auc"].isna().all()

    first_page = (workdir / "results" / "report.md").read_text()
    assert "## Answers" in first_page and "## Where these numbers come from" in first_page
    report = first_page + (workdir / "results" / "report_details.md").read_text()
    assert "### mlp_heart" in report and "### distilbert" in report and "## Environment" in report
    if CUDA_STATUS == "unavailable":
        assert report.count("| distilbert torch_eager fp32 cuda") == 4  # each unavailable cell, with its reason
        assert "no CUDA device" in report
    assert "held-out AUC" in report
    for png in ["mlp_heart/latency_per_item.png", "mlp_heart/throughput.png", "distilbert/latency_vs_seq.png"]:
        data = (workdir / "results" / "plots" / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
        assert f"plots/{png}" in report


def test_rerun_has_nothing_to_do(tiny_run):
    workdir, _ = tiny_run
    assert snakemake(workdir, TINY, dryrun=True) == Counter()


def test_adding_a_batch_size_schedules_only_new_cells_and_aggregates(tiny_run):
    workdir, _ = tiny_run
    config = copy.deepcopy(TINY)
    config["studies"]["tiny"]["batch_sizes"] = [1, 2, 4]
    jobs = snakemake(workdir, config, dryrun=True)
    new_cells = ALL_CELLS // 2  # one more batch size: half as many cells as two gave
    assert jobs == Counter(
        {"benchmark_cell": new_cells, "aggregate": 1, "plot_batch_sweep": 2, "plot_seq_sweep": 1, "report": 1, "all": 1}
    )


def test_changing_one_engines_options_reruns_only_its_cells(tiny_run):
    workdir, _ = tiny_run
    config = copy.deepcopy(TINY)
    config["engines"]["torch_eager"]["channels_last"] = True
    jobs = snakemake(workdir, config, dryrun=True)
    assert jobs["benchmark_cell"] == 2 + 4 + 2 + 4  # torch_eager cells on cpu and cuda, both workloads
    assert "export_onnx" not in jobs and "train_mlp" not in jobs


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("batch_sizes", [0], "studies.tiny.batch_sizes[0]: 0 is too small; it must be >= 1"),
        ("engines", ["torch_eager", "magic"], "studies.tiny.engines[1]: unknown engine 'magic'"),
        ("workloads", ["resnet18"], "studies.tiny.workloads[0]: 'resnet18' is not allowed; allowed values: "),
        ("threads", [-1], "studies.tiny.threads[0]: -1 is too small; it must be >= 1"),
        ("threads", [1, 10**6], "studies.tiny.threads[1]: 1000000 is too large; it must be <= 1,024"),
        ("seq_lens", [8, 4096], "studies.tiny.seq_lens: [4096] exceed distilbert's 512 positions"),
        ("latency_bound_ms", float("nan"), "studies.tiny.latency_bound_ms: nan is not a finite number"),
    ],
)
def test_invalid_config_fails_before_any_job_and_touches_nothing(tiny_run, key, value, message):
    workdir, _ = tiny_run
    before = snapshot(workdir / "results")
    config = copy.deepcopy(TINY)
    config["studies"]["tiny"][key] = value
    (workdir / "bad.yaml").write_text(yaml.safe_dump(config))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "--cores",
            "1",
            "--snakefile",
            str(REPO / "Snakefile"),
            "--configfile",
            "bad.yaml",
        ],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert message in done.stderr + done.stdout
    assert snapshot(workdir / "results") == before


def test_clean_then_rerun_remeasures_exactly_the_cleaned_cell(tiny_run):
    workdir, _ = tiny_run
    record = workdir / "results" / "cells" / "mlp_heart" / "noop-fp32" / "cpu" / "b1-s0-t1.json"
    original = CellRecord.load(record)
    failed = CellRecord.from_dict({**original.to_dict(), "status": "failed", "reason": "a test made it fail"})
    failed.save(record)
    cleaned = subprocess.run(
        [sys.executable, "-m", "inferbench", "clean"], cwd=workdir, capture_output=True, text=True, check=True
    )
    assert "removed 1 records" in cleaned.stdout and not record.exists()
    jobs = snakemake(workdir, TINY, dryrun=True)
    assert jobs["benchmark_cell"] == 1 and jobs["aggregate"] == 1 and jobs["report"] == 1
    snakemake(workdir, TINY, dryrun=False)
    assert CellRecord.load(record).status == "ok"
    assert snakemake(workdir, TINY, dryrun=True) == Counter()


def test_mlflow_export_is_one_run_per_cell_holding_the_summarys_figures_and_a_second_adds_none(tiny_run, monkeypatch):
    """The MLflow exporter through its rule, read back with MLflow's own client from a real SQLite store."""
    from mlflow.tracking import MlflowClient

    from inferbench.analysis.summary import KEY_COLUMNS, read_summary_csv
    from inferbench.core.cells import CellKey
    from inferbench.exporters.mlflow import PARAM_COLUMNS

    workdir, _ = tiny_run
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # the local store under results/mlflow
    jobs = snakemake(workdir, TINY, dryrun=False, targets=["export_mlflow"])
    assert jobs["export_mlflow"] == 1 and "benchmark_cell" not in jobs  # on request, after the cells it reads
    client = MlflowClient(f"sqlite:///{workdir / 'results' / 'mlflow' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("inferbench")
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    summary = read_summary_csv(workdir / "results" / "summary.csv")
    assert len(runs) == len(summary) == ALL_CELLS
    by_cell = {run.data.tags["inferbench.cell_id"]: run for run in runs}
    assert len(by_cell) == len(runs)  # one run per cell
    for row in summary.to_dict("records"):
        key = CellKey(**{k: int(row[k]) if k in ("batch_size", "seq_len", "threads") else row[k] for k in KEY_COLUMNS})
        run = by_cell[key.cell_id]
        figures = {
            column: float(value)
            for column, value in row.items()
            if column not in PARAM_COLUMNS
            and isinstance(value, int | float)
            and not isinstance(value, bool)
            and pd.notna(value)
        }
        assert run.data.metrics == figures, key.cell_id  # every figure of its row, exactly, and nothing else
        assert run.info.run_name == key.cell_id and run.data.params["batch_size"] == str(key.batch_size)
        assert run.data.tags["status"] == row["status"]
        assert run.info.status == ("FAILED" if row["status"] in ("failed", "oom") else "FINISHED")
        if row["status"] == "ok":
            assert run.data.params["engine_impl"] == row["engine_impl"]
            assert run.data.tags["git_commit"] == row["git_commit"]
        else:
            assert run.data.tags["reason"] == row["reason"][:5000]
    eager = by_cell["distilbert/torch_eager-fp32/cpu/b2-s16-t1"]
    assert eager.data.params["option.channels_last"] == "False"  # the engine's effective options
    assert "option.engine" not in eager.data.params and int(eager.data.tags["env.cpu_count"]) >= 1
    artifacts = {f.path for f in client.list_artifacts(eager.info.run_id, "record")}
    artifacts |= {f.path for f in client.list_artifacts(eager.info.run_id, "plots")}
    assert artifacts == {
        "record/b2-s16-t1.json",
        *(f"plots/{n}.png" for n in ("latency_per_item", "throughput", "latency_vs_seq")),
    }

    # exporting the same results again updates those runs: no new run, no second point in a metric's history
    again = subprocess.run(
        [sys.executable, "-m", "inferbench", "export", "mlflow"], cwd=workdir, capture_output=True, text=True
    )
    assert again.returncode == 0, again.stderr
    assert f"0 runs created, {ALL_CELLS} updated" in again.stdout
    assert len(client.search_runs([experiment.experiment_id], max_results=1000)) == ALL_CELLS
    assert len(client.get_metric_history(eager.info.run_id, "latency_p50_ms")) == 1


@pytest.mark.parametrize("placed", [True, False])
def test_real_source_uses_a_placed_file_or_downloads(tmp_path, placed):
    config = copy.deepcopy(TINY)
    config["studies"]["tiny"] |= {"workloads": ["mlp_lendingclub"], "devices": ["cpu"]}
    config["datasets"] = {"lendingclub": {"source": "kaggle", "sample_rows": 1000}}
    if placed:
        from inferbench.data import lendingclub

        lendingclub.generate(tmp_path / "data" / "raw" / "lendingclub" / "kaggle", rows=300, seed=0)
    jobs = snakemake(tmp_path, config, dryrun=True)
    assert jobs["download_lendingclub"] == (0 if placed else 1)
    assert "synthetic_lendingclub" not in jobs
    assert jobs["prepare_data"] == 1 and jobs["train_mlp"] == 1 and jobs["benchmark_cell"] == 3 * 2


def test_a_compiling_cell_is_primed_in_a_job_of_its_own(tmp_path, monkeypatch):
    """torch.compile compiles from nothing in a priming job: the cell's processes load its caches, are all
    timed, and the record's cold start is the priming job's compile."""
    monkeypatch.setenv("INFERBENCH_LOCK_FILE", str(tmp_path / "inferbench-test.lock"))
    config = copy.deepcopy(TINY)
    config["studies"]["tiny"].update(workloads=["mlp_heart"], engines=["compiled"], devices=["cpu"], batch_sizes=[1])
    config["engines"] = {"compiled": {"engine": "torch_compile", "mode": "default"}}
    jobs = snakemake(tmp_path, config, dryrun=False)
    assert jobs["prime_cell"] == 1 and jobs["benchmark_cell"] == 1
    cell = "mlp_heart/compiled-fp32/cpu/b1-s0-t1.json"
    primed = CellRecord.load(tmp_path / "results" / "primed" / cell)
    record = CellRecord.load(tmp_path / "results" / "cells" / cell)
    assert primed.status == record.status == "ok" and primed.latency_ms is None, "the priming job times nothing"
    assert primed.cold_start_s["compile"] > 0 and record.cold_start_s["compile"] == primed.cold_start_s["compile"]
    processes = record.repeats["per_repeat"]
    assert processes[0]["prime"] and not processes[0]["counted"] and not any(p["prime"] for p in processes[1:])
    # two timed processes at least (a contended or parted one adds one, up to the cap); one at least counted: a
    # process the host's other work contended is listed, not counted, where another was not (a busy CI machine)
    assert record.repeats["primed"] and len(processes) - 1 >= 2 and record.repeats["n"] >= 1
    # the measuring processes loaded what the priming job compiled: none compiled anew for as long
    assert all(p["cold_start_s"] < primed.cold_start_s["compile"] for p in processes[1:])
    assert not snakemake(tmp_path, config, dryrun=True), "nothing left to do"


def test_a_study_interleaved_measures_its_cells_in_one_job_one_process_of_each_in_turn(tmp_path, monkeypatch):
    """`interleave: true`: the cells that differ only in their engine variant are measured by one job whose
    processes take turns (A1 B1, B2 A2, ...); each cell's own job takes its record from there."""
    monkeypatch.setenv("INFERBENCH_LOCK_FILE", str(tmp_path / "inferbench-test.lock"))
    config = copy.deepcopy(TINY)
    config["studies"]["tiny"].update(
        workloads=["mlp_heart"], engines=["first", "second"], devices=["cpu"], batch_sizes=[1], interleave=True
    )
    config["engines"] = {"first": {"engine": "ort_cpu"}, "second": {"engine": "ort_cpu"}}
    jobs = snakemake(tmp_path, config, dryrun=False)
    assert jobs["interleaved_cells"] == 1 and jobs["benchmark_cell"] == 2
    records = {
        e: CellRecord.load(tmp_path / f"results/cells/mlp_heart/{e}-fp32/cpu/b1-s0-t1.json") for e in config["engines"]
    }
    assert records["first"].repeats["interleaved_with"] == ["mlp_heart/second-fp32/cpu/b1-s0-t1"]
    windows = sorted((w[0], e) for e, r in records.items() for w in r.measured_windows_unix)
    owners = [e for _, e in windows]
    turns = 2 * min(owners.count(e) for e in records)  # then one goes on alone (contended, or parted: a 3rd)
    rounds = [sorted(owners[i : i + 2]) for i in range(0, turns, 2)]  # each round: one process of each
    assert rounds == [["first", "second"]] * (turns // 2) and turns >= 4, f"in turn: {owners}"
    assert owners[:4] == ["first", "second", "second", "first"], "every other round reversed"
    assert "Study `tiny`. Its cells took turns" in (tmp_path / "results/report.md").read_text()
    assert not snakemake(tmp_path, config, dryrun=True), "nothing left to do"
    config["engines"]["second"]["planted_slowdown"] = 0.3
    jobs = snakemake(tmp_path, config, dryrun=True)
    assert jobs["interleaved_cells"] == 1, f"a member's change re-runs its job: {jobs}"
