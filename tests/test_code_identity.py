"""A job re-runs when code it runs changes, and only then: the import closure of a cell's verb, engine
and scenario (inferbench.plan.code), checked on the closure itself and on a finished run whose modules
are edited one at a time."""

from __future__ import annotations

import copy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from inferbench.catalog.scenarios import SCENARIOS
from inferbench.catalog.verbs import VERBS
from inferbench.engines.registry import engine_info
from inferbench.plan.code import code_identity, import_closure
from tests.conftest import REPO, copy_checkout

RUN_CELL = VERBS["run-cell"].target


def cell_closure(impl: str, scenario: str = "single") -> set[str]:
    return import_closure([RUN_CELL, engine_info(impl).module, SCENARIOS[scenario].module])


def test_a_cells_closure_holds_its_engine_its_scenario_and_the_measuring_path_only():
    ort = cell_closure("ort_cpu")
    assert {"inferbench.engines.ort.engine", "inferbench.scenarios.single.measure", "inferbench.core.stats"} <= ort
    assert {"inferbench.launch.cell_job", "inferbench.launch.processes", "inferbench.scenarios.timing"} <= ort
    assert "inferbench.engines.ort" in ort, "its family's declarations (a package's __init__ runs on import)"
    assert not any(m.startswith("inferbench.engines.pytorch") for m in ort), "no other engine family"
    assert not any(m.startswith(("inferbench.report", "inferbench.analysis", "inferbench.plan")) for m in ort)
    assert "inferbench.scenarios.serving" not in ort
    served = cell_closure("torch_eager", "offline")
    assert "inferbench.scenarios.serving" in served and "inferbench.scenarios.single.measure" not in served
    assert "inferbench.engines.pytorch.eager" in served and "inferbench.engines.ort.engine" not in served


def test_a_verbs_closure_is_its_own_functions_not_its_modules_neighbours():
    build = import_closure([VERBS["build-model"].target])
    export = import_closure([VERBS["export-onnx"].target])
    assert "inferbench.models.export" in export and "inferbench.models.export" not in build, (
        "two verbs of one module: editing the export re-builds no model"
    )
    report = import_closure([VERBS["report"].target])
    assert "inferbench.report.markdown" in report and "inferbench.scenarios.single.measure" not in report
    assert not any(m.startswith("inferbench.report") for m in import_closure([VERBS["aggregate"].target]))


def test_the_identity_follows_the_source_tree_it_is_given(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(REPO / "src" / "inferbench", src / "inferbench", ignore=shutil.ignore_patterns("__pycache__"))
    roots = [RUN_CELL, engine_info("ort_cpu").module, SCENARIOS["single"].module]
    before = code_identity(roots, src)
    assert before == code_identity(roots, REPO / "src")
    with (src / "inferbench" / "report" / "markdown.py").open("a") as fh:
        fh.write("# not run by a cell\n")
    assert code_identity(roots, src) == before
    with (src / "inferbench" / "core" / "stats.py").open("a") as fh:
        fh.write("# a comment is a change too\n")
    assert code_identity(roots, src) != before


def test_a_verbs_identity_changes_with_its_own_function_not_with_a_neighbour_in_its_module(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(REPO / "src" / "inferbench", src / "inferbench", ignore=shutil.ignore_patterns("__pycache__"))
    models = src / "inferbench" / "cli" / "models.py"
    build, export = [VERBS["build-model"].target], [VERBS["export-onnx"].target]
    before = code_identity(build, src), code_identity(export, src)
    text = models.read_text()
    models.write_text(text.replace("def export_onnx(args: argparse.Namespace) -> None:\n",
                                   "def export_onnx(args: argparse.Namespace) -> None:\n    pass\n"))  # fmt: skip
    assert models.read_text() != text
    assert code_identity(build, src) == before[0], "export-onnx's edit re-runs no build-model job"
    assert code_identity(export, src) != before[1]


# --- a finished run, edited ------------------------------------------------------------------------


def _pending(workdir: Path) -> dict[str, set[str]]:
    """Per rule, the outputs a run would make now (Snakemake's own plan: ``--summary``)."""
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "2", "--summary"],
        cwd=workdir, capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip
    pending: dict[str, set[str]] = {}
    for line in done.stdout.splitlines()[1:]:
        fields = line.split("\t")
        if len(fields) >= 6 and fields[-1] == "update pending":
            pending.setdefault(fields[2], set()).add(fields[0])
    return pending


#: the rules of cells, one per scenario (workflow/rules/bench.smk)
CELL_RULES = {"benchmark_cell", *(f"{name}_cell" for name in SCENARIOS if name != "single")}


def _cells(pending: dict[str, set[str]]) -> set[str]:
    """The cells (their record's path) whose jobs would run."""
    jobs = set().union(*(outputs for rule, outputs in pending.items() if rule in CELL_RULES))
    return {path for path in jobs if path.endswith(".json")}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A copy of the workflow with a small finished run: three single-call cells through three engines
    and one offline cell (LoadGen), on the heart MLP."""
    workdir = tmp_path_factory.mktemp("edited")
    copy_checkout(workdir)
    config = copy.deepcopy(yaml.safe_load((REPO / ".test" / "config" / "config.yaml").read_text()))
    study = {"workloads": ["mlp_heart"], "devices": ["cpu"], "batch_sizes": [2], "threads": [1]}
    config["run"] = ["single", "served"]
    config["studies"] = {
        "single": {**study, "engines": ["noop", "torch_eager", "ort_cpu"], "layout": "by_batch"},
        "served": {**study, "engines": ["noop"], "layout": "serving", "scenarios": ["offline"]},
    }
    config["serving"] = {"min_duration_s": 0.05, "min_query_count": 50, "samples": 16}
    config["profile"] = {"cells": []}
    (workdir / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    env_lock = {"INFERBENCH_LOCK_FILE": str(workdir / "inferbench-test.lock")}
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "2"],
        cwd=workdir, capture_output=True, text=True, timeout=1200, check=False, env={**_environ(), **env_lock},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert _pending(workdir) == {}, "a finished run has nothing to do"
    return workdir


def _environ() -> dict[str, str]:
    import os

    return dict(os.environ)


def _edited(workdir: Path, module: str) -> dict[str, set[str]]:
    """What a run would do after a comment is appended to ``module`` (a file under src/); the file is
    restored afterwards."""
    path = workdir / "src" / module
    original = path.read_text()
    path.write_text(original + "\n# edited\n")
    try:
        return _pending(workdir)
    finally:
        path.write_text(original)


SINGLE = {f"results/cells/mlp_heart/{e}-fp32/cpu/b2-s0-t1.json" for e in ("noop", "torch_eager", "ort_cpu")}
OFFLINE = {"results/cells/mlp_heart/noop-fp32/cpu/b2-s0-t1-offline.json"}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("module", "cells"),
    [
        ("inferbench/core/stats.py", SINGLE | OFFLINE),  # every cell computes its statistics with it
        ("inferbench/scenarios/single/measure.py", SINGLE),
        ("inferbench/scenarios/serving/measure.py", OFFLINE),
        ("inferbench/engines/ort/engine.py", {"results/cells/mlp_heart/ort_cpu-fp32/cpu/b2-s0-t1.json"}),
        ("inferbench/engines/pytorch/eager.py", {"results/cells/mlp_heart/torch_eager-fp32/cpu/b2-s0-t1.json"}),
        ("inferbench/cli/main.py", SINGLE | OFFLINE),  # the dispatcher: lock, GPU slot, cores kept apart
        ("inferbench/machine/run_lock.py", SINGLE | OFFLINE),
        ("inferbench/report/markdown.py", set()),
        ("inferbench/analysis/decisions.py", set()),
    ],
)
def test_editing_a_module_schedules_exactly_the_cells_whose_jobs_import_it(finished_run, module, cells):
    pending = _edited(finished_run, module)
    assert _cells(pending) == cells
    preparation = {"synthetic_data", "prepare_data", "train_mlp", "export_onnx", "reference_output"}
    assert not preparation & set(pending), "no model or dataset is made again"
    if module.startswith("inferbench/report/") or module.startswith("inferbench/analysis/"):
        assert "results/report.md" in pending.get("report", set()), "the report is made again"
        assert "aggregate" not in pending or module.startswith("inferbench/analysis/")
    if cells:
        assert "results/summary.csv" in pending.get("aggregate", set())


@pytest.mark.slow
def test_every_record_names_the_code_identity_its_job_ran_with(finished_run):
    """The hash the workflow re-runs a cell by is in its record and its summary row, beside the hash of the
    package source: a committed result can be traced to the code that made it."""
    sys.path.insert(0, str(finished_run / "src"))
    from inferbench.core.cells import CellRecord

    for relpath in SINGLE | OFFLINE:
        record = CellRecord.load(finished_run / relpath)
        assert record.code["job"] is not None and len(record.code["job"]) == 12
        assert record.code["package"] is not None and len(record.code["package"]) == 12
    noop = CellRecord.load(finished_run / "results/cells/mlp_heart/noop-fp32/cpu/b2-s0-t1.json")
    ort = CellRecord.load(finished_run / "results/cells/mlp_heart/ort_cpu-fp32/cpu/b2-s0-t1.json")
    assert noop.code["job"] != ort.code["job"] and noop.code["package"] == ort.code["package"]
    summary = (finished_run / "results" / "summary.csv").read_text()
    assert ort.code["job"] in summary and "code_package" in summary.splitlines()[0]
