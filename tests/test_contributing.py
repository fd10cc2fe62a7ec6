"""The README's Contributing walk-through holds, followed literally in a copy of the repository: an engine
family, a scenario, a workload and an exporter, each in the number of files the README's table says, each
then listed by `inferbench list`, scheduled by a Snakemake dry run (the scenario's cells by a rule of their
own, with the outputs the scenario declares) and measured (or exported) by one real run of the workflow."""

from __future__ import annotations

import csv
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
# A scenario with figures of its own, as one folder: its timed loop and summary columns, its answer and plot (its
# face), then its entry in the catalog and its layout (the study's answer and the plot it shows).
SCENARIO_FILES = {
    "src/inferbench/scenarios/burst/__init__.py": '''
        """Burst: ten calls back to back, one clock reading around them all (declared in inferbench.catalog)."""
    ''',
    "src/inferbench/scenarios/burst/measure.py": '''
        """Ten calls back to back, one clock reading around them all: the time per call in a burst."""

        import time
        from typing import Any

        from inferbench.core.cells import CellRecord
        from inferbench.scenarios.prepare import Measured, PreparedCell

        CALLS = 10


        def measure(cell: PreparedCell) -> Measured:
            staged = cell.engine.stage(cell.batches[0])
            with cell.lock.exclusively():
                start = time.perf_counter()
                for _ in range(CALLS):
                    cell.engine.run(staged)
                cell.engine.synchronize()
                seconds = time.perf_counter() - start
            burst = {"calls": CALLS, "seconds": seconds, "per_call_ms": seconds / CALLS * 1e3}
            return Measured({"timing": "burst", "timing_description": f"{CALLS} calls, one reading",
                             "measured_s": seconds, "sections": {"burst": burst}})


        def columns(record: CellRecord) -> dict[str, Any]:
            """A burst cell's columns of the summary."""
            burst = record.sections.get("burst") or {}
            return {"burst_calls": burst.get("calls"), "burst_per_call_ms": burst.get("per_call_ms")}
    ''',
    "src/inferbench/scenarios/burst/answer.py": '''
        """A burst study's answer: each engine's time per call in a burst."""

        from typing import Any

        import pandas as pd

        from inferbench.report.tables import fmt


        def burst_answer(cells: pd.DataFrame, study: dict[str, Any], basis: Any = None) -> list[str]:
            ok = cells[cells["status"] == "ok"]
            return [f"- {row.engine} {row.device}: {fmt(row.burst_per_call_ms)} ms per call, "
                    f"{int(row.burst_calls)} calls back to back" for row in ok.itertuples()] + [""]
    ''',
    "src/inferbench/scenarios/burst/plots.py": '''
        """A burst study's plot: the time per call of each of a workload's burst cells."""

        from collections.abc import Sequence
        from pathlib import Path

        import matplotlib.pyplot as plt

        from inferbench.core.cells import CellRecord
        from inferbench.report.plot_axes import bars, engine_colour, save_figure


        def plot_burst(records: Sequence[CellRecord], workload: str, out: Path, variants: Sequence[str] = ()) -> Path:
            cells = [r for r in records if r.key.workload == workload and r.status == "ok"]
            fig, ax = plt.subplots(figsize=(6, 4))
            bars(ax, [r.key.engine for r in cells], [r.sections["burst"]["per_call_ms"] for r in cells],
                 [engine_colour(r.key.engine, variants) for r in cells])
            ax.set_ylabel("ms per call, in a burst of ten")
            save_figure(fig, Path(out))
            return Path(out)
    ''',
}
SCENARIO_ENTRY = """
    SCENARIOS["burst"] = ScenarioInfo(
        "inferbench.scenarios.burst.measure:measure",
        "ten calls at once",
        layout="burst",
        columns="inferbench.scenarios.burst.measure:columns",
        plots=(("burst.png", "inferbench.scenarios.burst.plots:plot_burst"),),
    )
"""
LAYOUT_ENTRY = """
    LAYOUTS["burst"] = Layout("inferbench.scenarios.burst.answer:burst_answer", ("p50",), ("burst.png",))
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
        "burst_study": {
            **STUDY,
            "workloads": ["mlp_heart"],
            "engines": ["echo"],
            "scenarios": ["burst"],
            "layout": "burst",
            "question": "how long does one call take in a burst of ten?",
        },
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
    for relpath, text in SCENARIO_FILES.items():
        _write(root, relpath, text)
    for registry, entry in (("scenarios.py", SCENARIO_ENTRY), ("layouts.py", LAYOUT_ENTRY)):
        with (root / "src/inferbench/catalog" / registry).open("a") as catalog:
            catalog.write(textwrap.dedent(entry))


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
    assert re.search(
        r"^burst\s+ten calls at once \(studies of layout burst\)$", _inferbench(root, "list", "scenarios"), flags=re.M
    )
    assert re.search(r"^resnet18\s+vision ", _inferbench(root, "list", "workloads"), flags=re.M)
    assert re.search(r"^jsonl\s+The summary as JSON lines", _inferbench(root, "list", "exporters"), flags=re.M)
    assert "--out-dir" in _inferbench(root, "export", "jsonl", "--help")


def test_a_dry_run_schedules_each_addition_by_the_rules_it_declares(extended):
    root, _ = extended
    output = _snakemake(root, "-n")
    jobs = _job_stats(output)
    # echo's and resnet18's cells by the plain rule, the burst cell by its scenario's own, the export by its own
    assert jobs["benchmark_cell"] == 2 and jobs["burst_cell"] == 1 and jobs["export_jsonl"] == 1, jobs
    assert jobs["plot_declared"] == 1, "the burst plot, by the rule of the plots scenarios declare"
    assert jobs["build_model"] == 1  # resnet18, built by timm: no builder of its own
    burst = output.split("rule burst_cell:", 1)[1].split("\n\n", 1)[0]
    outputs = re.search(r"output: (.*)", burst)[1].split(", ")
    stem = "results/cells/mlp_heart/echo-fp32/cpu/b2-s0-t1-burst"
    assert outputs == [f"{stem}.json", f"{stem}.samples.npy", f"{stem}.e2e_samples.npy"], "no LoadGen logs"


def test_one_real_run_measures_and_exports_each_addition(extended):
    root, _ = extended
    _snakemake(root)
    cells = root / "results" / "cells"
    echo = json.loads((cells / "mlp_heart/echo-fp32/cpu/b2-s0-t1.json").read_text())
    assert echo["status"] == "ok", echo["reason"]
    assert echo["options"]["scale"] == 2.0 and echo["engine_impl"] == "echo"
    burst = json.loads((cells / "mlp_heart/echo-fp32/cpu/b2-s0-t1-burst.json").read_text())
    assert burst["status"] == "ok" and burst["timing"] == "burst", burst["reason"]
    # its own record section, its summary columns, its answer and its plot
    assert burst["sections"]["burst"]["calls"] == 10 and burst["sections"]["burst"]["per_call_ms"] > 0
    summary = {row["scenario"]: row for row in csv.DictReader((root / "results/summary.csv").open())}
    assert float(summary["burst"]["burst_per_call_ms"]) == pytest.approx(burst["sections"]["burst"]["per_call_ms"])
    report = (root / "results/report.md").read_text()
    assert re.search(r"- echo cpu: [0-9.,e+-]+ ms per call, 10 calls back to back", report), report[:3000]
    assert (root / "results/plots/mlp_heart/burst.png").stat().st_size > 1000
    assert "plots/mlp_heart/burst.png" in report
    resnet18 = json.loads((cells / "resnet18/torch_eager-fp32/cpu/b1-s0-t1.json").read_text())
    assert resnet18["status"] == "ok", resnet18["reason"]
    exported = (root / "results" / "jsonl" / "cells.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["engine"] for line in exported) == ["echo", "echo", "torch_eager"]
    assert json.loads((root / "results" / "jsonl" / "export.json").read_text())["cells"] == 3
