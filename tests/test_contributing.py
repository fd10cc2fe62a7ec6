"""The README's Contributing walk-through holds, followed literally in a copy of the repository: an engine
family, a scenario, a workload and an exporter, each in the number of files the README's table says, each
then listed by `inferbench list`, scheduled by a Snakemake dry run (the scenario's cells by a rule of their
own, with the outputs the scenario declares) and measured (or exported) by one real run of the workflow."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, copy_checkout

pytestmark = pytest.mark.slow

# An engine family: its declaration and its class (the class names no engine: its registry entry does).
ENGINE_FAMILY = {
    "src/inferbench/engines/echo/__init__.py": '''
        """Echo: sums each row of its input, a stand-in for a real runtime."""

        from dataclasses import dataclass

        from inferbench.catalog.engines import EngineInfo, EngineOptions, option


        @dataclass(frozen=True)
        class EchoOptions(EngineOptions):
            scale: float = option(1.0, "what each sum is multiplied by")


        ENGINES = {
            "echo": EngineInfo(
                "inferbench.engines.echo.engine:Echo",
                ("cpu",),
                ("fp32",),
                "none",
                "sums each input row",
                options_type=EchoOptions,
            )
        }
    ''',
    "src/inferbench/engines/echo/engine.py": """
        import numpy as np

        from inferbench.engines.base import Engine


        class Echo(Engine):
            computes = False  # no model: nothing to compare with a reference

            def prepare(self, artifact, inputs, example):
                pass

            def stage(self, batch):
                return batch

            def run(self, staged):
                return next(iter(staged.values())).sum(axis=-1) * self.options.scale

            def to_numpy(self, output):
                return np.asarray(output, dtype=np.float32)
    """,
}
# A scenario: its timed loop, and its entry in the catalog.
SCENARIO_MODULE = '''
    """Ten calls back to back, one clock reading around them all."""

    import time

    from inferbench.scenarios.prepare import Measured, PreparedCell


    def measure(cell: PreparedCell) -> Measured:
        staged = cell.engine.stage(cell.batches[0])
        with cell.lock.exclusively():
            start = time.perf_counter()
            for _ in range(10):
                cell.engine.run(staged)
            cell.engine.synchronize()
            seconds = time.perf_counter() - start
        return Measured({"timing": "burst", "timing_description": "ten calls, one reading", "measured_s": seconds})
'''
SCENARIO_ENTRY = """
    SCENARIOS["burst"] = ScenarioInfo("inferbench.scenarios.burst:measure", "ten calls at once")
"""
WORKLOAD_ANCHOR = '    "bert_base": WorkloadInfo('
WORKLOAD_ENTRY = '    "resnet18": WorkloadInfo("vision", "ResNet-18 (timm), random weights", model="timm:resnet18"),\n'
EXPORTER = '''
    """The summary as JSON lines, one object per cell.

    One file, ``cells.jsonl``, in the export's folder.
    """

    import csv
    import json
    from pathlib import Path


    def export(summary: Path, cells_dir: Path, plots_dir: Path, out_dir: Path) -> dict:
        with open(summary, newline="") as fh:
            rows = list(csv.DictReader(fh))
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "cells.jsonl").write_text("".join(json.dumps(row) + "\\n" for row in rows))
        return {"cells": len(rows), "message": f"{len(rows)} cells -> {out_dir / 'cells.jsonl'}"}
'''

#: a config that runs what the four extensions add, on the CPU, in seconds a cell
STUDY = {"precisions": ["fp32"], "devices": ["cpu"], "batch_sizes": [2], "threads": [1], "percentiles": ["p50"]}
CONFIG = {
    "run": ["echo_study", "burst_study", "resnet18_study"],
    "studies": {
        "echo_study": {**STUDY, "workloads": ["mlp_heart"], "engines": ["echo"]},
        "burst_study": {**STUDY, "workloads": ["mlp_heart"], "engines": ["noop"], "scenarios": ["burst"]},
        "resnet18_study": {**STUDY, "workloads": ["resnet18"], "engines": ["torch_eager"], "batch_sizes": [1]},
    },
    "engines": {"echo": {"engine": "echo", "scale": 2}},
    "exporters": ["jsonl"],
    "models": {"mlp_heart": {"arch": {"hidden": [8]}, "train": {"epochs": 2, "batch_size": 32}}},
    "measure": {"warmup_s": 0.0, "min_time_s": 0.01, "min_iters": 3, "repeats": 1},
}
KINDS = ("an engine family", "a scenario", "a workload", "an exporter")


def _digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def _write(root: Path, relpath: str, text: str) -> None:
    path = root / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))


def _add_engine_family(root: Path) -> None:
    for relpath, text in ENGINE_FAMILY.items():
        _write(root, relpath, text)


def _add_scenario(root: Path) -> None:
    _write(root, "src/inferbench/scenarios/burst.py", SCENARIO_MODULE)
    with (root / "src/inferbench/catalog/scenarios.py").open("a") as registry:
        registry.write(textwrap.dedent(SCENARIO_ENTRY))


def _add_workload(root: Path) -> None:
    workloads = root / "src/inferbench/catalog/workloads.py"
    workloads.write_text(workloads.read_text().replace(WORKLOAD_ANCHOR, WORKLOAD_ENTRY + WORKLOAD_ANCHOR, 1))


def _add_exporter(root: Path) -> None:
    _write(root, "src/inferbench/exporters/jsonl.py", EXPORTER)


def readme_file_counts() -> dict[str, int]:
    """The README's Contributing table: files per kind of extension."""
    section = REPO.joinpath("README.md").read_text().split("## Contributing", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (an? [a-z ]+?) \| (\d+) \|", section, flags=re.M)
    return {kind: int(count) for kind, count in rows}


@pytest.fixture(scope="module")
def extended(tmp_path_factory) -> tuple[Path, dict[str, set[str]]]:
    """A copy of the repository with the four extensions made one after another, and the files each made
    or changed."""
    root = copy_checkout(tmp_path_factory.mktemp("contributor"))
    changed = {}
    for kind, extend in zip(KINDS, (_add_engine_family, _add_scenario, _add_workload, _add_exporter), strict=True):
        before = _digests(root)
        extend(root)
        after = _digests(root)
        changed[kind] = {path for path, digest in after.items() if before.get(path) != digest}
    (root.parent / f"{root.name}.yaml").write_text(yaml.safe_dump(CONFIG))
    return root, changed


def _environ(root: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(root / "src"),
        "INFERBENCH_LOCK_FILE": str(root.parent / f"{root.name}.lock"),
    }


def _inferbench(root: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "inferbench", *args],
        cwd=root, env=_environ(root), capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _snakemake(root: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "2", "--configfile", str(root.parent / f"{root.name}.yaml"),
         *args],
        cwd=root, env=_environ(root), capture_output=True, text=True, timeout=1200, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return done.stdout + done.stderr


def _job_stats(output: str) -> dict[str, int]:
    table = output.split("Job stats:", 1)[1].split("\n\n", 1)[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, flags=re.M)}


def test_each_kind_takes_the_files_the_readme_says(extended):
    _, changed = extended
    counts = readme_file_counts()
    assert set(counts) == set(KINDS), "the README's table names the four kinds"
    assert {kind: len(files) for kind, files in changed.items()} == counts, changed


def test_list_names_each_addition(extended):
    root, _ = extended
    assert re.search(r"^echo .*cpu: available", _inferbench(root, "list", "engines"), flags=re.M)
    assert re.search(r"^burst\s+ten calls at once$", _inferbench(root, "list", "scenarios"), flags=re.M)
    assert re.search(r"^resnet18\s+vision ", _inferbench(root, "list", "workloads"), flags=re.M)
    assert re.search(r"^jsonl\s+The summary as JSON lines", _inferbench(root, "list", "exporters"), flags=re.M)
    assert "--out-dir" in _inferbench(root, "export", "jsonl", "--help")


def test_a_dry_run_schedules_each_addition_by_the_rules_it_declares(extended):
    root, _ = extended
    output = _snakemake(root, "-n")
    jobs = _job_stats(output)
    # echo's and resnet18's cells by the plain rule, the burst cell by its scenario's own, the export by its own
    assert jobs["benchmark_cell"] == 2 and jobs["burst_cell"] == 1 and jobs["export_jsonl"] == 1, jobs
    assert jobs["build_model"] == 1  # resnet18, built by timm: no builder of its own
    burst = output.split("rule burst_cell:", 1)[1].split("\n\n", 1)[0]
    outputs = re.search(r"output: (.*)", burst)[1].split(", ")
    stem = "results/cells/mlp_heart/noop-fp32/cpu/b2-s0-t1-burst"
    assert outputs == [f"{stem}.json", f"{stem}.samples.npy", f"{stem}.e2e_samples.npy"], "no LoadGen logs"


def test_one_real_run_measures_and_exports_each_addition(extended):
    root, _ = extended
    _snakemake(root)
    cells = root / "results" / "cells"
    echo = json.loads((cells / "mlp_heart/echo-fp32/cpu/b2-s0-t1.json").read_text())
    assert echo["status"] == "ok", echo["reason"]
    assert echo["options"]["scale"] == 2.0 and echo["engine_impl"] == "echo"
    burst = json.loads((cells / "mlp_heart/noop-fp32/cpu/b2-s0-t1-burst.json").read_text())
    assert burst["status"] == "ok" and burst["timing"] == "burst", burst["reason"]
    resnet18 = json.loads((cells / "resnet18/torch_eager-fp32/cpu/b1-s0-t1.json").read_text())
    assert resnet18["status"] == "ok", resnet18["reason"]
    exported = (root / "results" / "jsonl" / "cells.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["engine"] for line in exported) == ["echo", "noop", "torch_eager"]
    assert json.loads((root / "results" / "jsonl" / "export.json").read_text())["cells"] == 3
