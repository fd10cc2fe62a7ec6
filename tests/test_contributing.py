"""The README's Contributing walk-through holds: in a copy of the package, a new engine family is its two
files, a new scenario its module and its registry entry, a new named workload one entry; each then
measures a cell through the package's own runner."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow

ENGINE_SPEC = """
from inferbench.engines.spec import EngineInfo

ENGINES = {"echo": EngineInfo("inferbench.engines.echo.engine:Echo", ("cpu",), ("fp32",), "none", "echoes")}
"""
ENGINE = """
import numpy as np

from inferbench.engines.base import Engine


class Echo(Engine):
    impl = "echo"
    computes = False

    def prepare(self, artifact, inputs, example):
        pass

    def stage(self, batch):
        return batch

    def run(self, staged):
        return next(iter(staged.values())).sum(axis=-1)

    def to_numpy(self, output):
        return np.asarray(output, dtype=np.float32)
"""
SCENARIO = '''
from inferbench.scenarios.prepare import Measured, PreparedCell


def measure(cell: PreparedCell) -> Measured:
    """Ten calls back to back, one clock reading around them all."""
    import time

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
SCENARIOS["burst"] = ScenarioInfo("inferbench.scenarios.burst:measure", "ten calls at once", "-burst")
"""
MEASURE = """
import json, sys
from pathlib import Path
from inferbench.core.cells import CellKey
from inferbench.core.settings import MeasureSettings
from inferbench.launch.lock import MachineLock
from inferbench.scenarios.prepare import CellInputs, CellRequest
from inferbench.scenarios.run import run_cell

workload, engine, scenario, meta = sys.argv[1:5]
key = CellKey(workload, engine, "fp32", "cpu", 2, 0, 1, scenario)
settings = MeasureSettings(warmup_s=0.0, min_time_s=0.0, min_iters=3, repeats=1)
lock = MachineLock(Path(sys.argv[5]) / "lock")
lock.shared()
request = CellRequest(key, {"engine": engine}, CellInputs(Path(meta)), settings)
record = run_cell(request, Path(sys.argv[5]) / key.relpath, lock)
print(json.dumps({"status": record.status, "reason": record.reason, "timing": record.timing, "path": key.relpath}))
"""


@pytest.fixture
def package(tmp_path: Path) -> Path:
    """A copy of the package's source tree (and the config schema it reads its defaults from), to extend
    as a contributor would."""
    src = tmp_path / "src"
    shutil.copytree(REPO / "src" / "inferbench", src / "inferbench", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "workflow" / "schemas", tmp_path / "workflow" / "schemas")
    return src


def _measure(src: Path, tmp_path: Path, workload: str, engine: str, scenario: str = "single") -> dict:
    meta = tmp_path / "m.json"
    meta.write_text(json.dumps({"inputs": [{"name": "x", "shape": ["batch", 4], "dtype": "float32"}]}))
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, workload, engine, scenario, str(meta), str(tmp_path)],
        capture_output=True, text=True, timeout=300, check=False,
        env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin", "INFERBENCH_LOCK_FILE": str(tmp_path / "lock")},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_an_engine_is_its_two_files(package, tmp_path):
    family = package / "inferbench" / "engines" / "echo"
    family.mkdir()
    (family / "__init__.py").write_text(textwrap.dedent(ENGINE_SPEC))
    (family / "engine.py").write_text(textwrap.dedent(ENGINE))
    result = _measure(package, tmp_path, "mlp_heart", "echo")
    assert result["status"] == "ok", result["reason"]
    assert result["timing"] == "end_to_end"  # a CPU cell: one boundary


def test_a_scenario_is_its_module_and_its_entry(package, tmp_path):
    (package / "inferbench" / "scenarios" / "burst.py").write_text(textwrap.dedent(SCENARIO))
    with (package / "inferbench" / "scenarios" / "__init__.py").open("a") as registry:
        registry.write(textwrap.dedent(SCENARIO_ENTRY))
    result = _measure(package, tmp_path, "mlp_heart", "noop", "burst")
    assert result["status"] == "ok", result["reason"]
    assert result["timing"] == "burst" and result["path"].endswith("-t1-burst.json")


def test_a_named_workload_of_a_timm_model_is_one_entry(package, tmp_path):
    workloads = package / "inferbench" / "core" / "workloads.py"
    text = workloads.read_text()
    anchor = '    "bert_base": WorkloadInfo('
    entry = '    "resnet18": WorkloadInfo("vision", "ResNet-18 (timm), random weights", model="timm:resnet18"),\n'
    workloads.write_text(text.replace(anchor, entry + anchor, 1))
    code = (
        "from inferbench.models import create_model\n"
        "from inferbench.core.workloads import workload_info\n"
        "spec = create_model('resnet18')\n"
        "print(spec.name, workload_info('resnet18').kind, spec.inputs[0].shape)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False,
                          env={"PYTHONPATH": str(package), "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["resnet18", "vision", "('batch',", "3,", "224,", "224)"]
