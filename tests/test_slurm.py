"""The SLURM profile against a real Slurm: a single-node cluster (munge, slurmctld, slurmd from
Debian's packages) started on this machine with a `gpu` generic resource, a small grid submitted
through `--workflow-profile profiles/slurm`, and every cell checked to have run as its own Slurm job
with the resources the profile and the rules asked for.

Needs root and the packages (.ci/run installs them and sets INFERBENCH_REQUIRE_SLURM=1, which turns
a skip into a failure).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from inferbench.core.cells import CellRecord
from tests.conftest import REPO

pytestmark = pytest.mark.slow

MISSING = [tool for tool in ("slurmctld", "slurmd", "munged", "sbatch", "squeue") if not shutil.which(tool)]
PLUGIN = importlib.util.find_spec("snakemake_executor_plugin_slurm") is not None
REASON = (
    f"no Slurm here ({', '.join(MISSING)} missing)"
    if MISSING
    else "a test Slurm needs root"
    if os.geteuid() != 0
    else "the SLURM executor plugin is not installed (pip install -e '.[slurm]')"
    if not PLUGIN
    else None
)
GRID = {
    "run": ["cluster"],
    "studies": {
        "cluster": {
            "workloads": ["mlp_heart"],
            "engines": ["noop", "torch_eager"],
            "precisions": ["fp32"],
            "devices": ["cpu", "cuda"],
            "batch_sizes": [1, 2],
            "threads": [1, 2],
        }
    },
    "engines": {"noop": {"engine": "noop"}, "torch_eager": {"engine": "torch_eager"}},
    "models": {"mlp_heart": {"arch": {"hidden": [8]}, "train": {"epochs": 2, "batch_size": 32}}},
    "measure": {"warmup_s": 0.0, "min_time_s": 0.01, "min_iters": 3},
    "profile": {"cells": []},
}
CELL_MEMORY_MB = 1500  # what the test asks per cell; the test node has this machine's CPUs, half its memory
MAX_THREADS = 2  # a GPU cell asks for 4 CPUs; --max-threads caps it for a small node, as on a laptop


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    if REASON:
        if os.environ.get("INFERBENCH_REQUIRE_SLURM"):  # CI: the Slurm test must run
            pytest.fail(f"INFERBENCH_REQUIRE_SLURM is set but {REASON}")
        pytest.skip(REASON)
    root = tmp_path_factory.mktemp("slurm")
    started = subprocess.run(["bash", str(REPO / "tests/slurm/start.sh"), str(root)], capture_output=True, text=True)
    if started.returncode != 0:
        logs = "\n".join(p.read_text()[-2000:] for p in sorted((root / "log").glob("*.log")))
        pytest.fail(f"the test Slurm did not start:\n{started.stdout}{started.stderr}\n{logs}")
    yield {**os.environ, "SLURM_CONF": str(root / "slurm.conf")}
    subprocess.run(["bash", str(REPO / "tests/slurm/stop.sh"), str(root)], check=False)


def _jobs(env: dict) -> dict[str, dict[str, str]]:
    """Every job slurmctld still knows (finished ones stay for MinJobAge), by job id."""
    out = subprocess.run(["scontrol", "show", "job", "-o"], env=env, capture_output=True, text=True, check=True)
    jobs = {}
    for line in out.stdout.splitlines():
        fields = dict(re.findall(r"(\S+?)=(\S*)", line))
        jobs[fields["JobId"]] = fields
    return jobs


def _submit(slurm: dict, workdir, *extra: str) -> None:
    (workdir / "config").mkdir()
    (workdir / "config" / "config.yaml").write_text(yaml.safe_dump(GRID))
    cmd = [
        sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
        "--workflow-profile", str(REPO / "profiles/slurm"),
        # this test cluster has no accounting database and no accounts; its one node is small
        "--slurm-status-command", "squeue", "--slurm-no-account", "--slurm-init-seconds-before-status-checks", "1",
        "--max-threads", str(MAX_THREADS), "--default-resources", "mem_mb=1000", "runtime=10",
        "--set-resources", f"benchmark_cell:mem_mb={CELL_MEMORY_MB}", "prepare_data:mem_mb=1000",
        "export_onnx:mem_mb=1500", "train_mlp:mem_mb=1000", "reference_output:mem_mb=1000", *extra,
    ]  # fmt: skip
    run = subprocess.run(cmd, env=slurm, capture_output=True, text=True, timeout=1200, check=False)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]


def test_every_cell_is_its_own_slurm_job_with_the_profiles_resources(slurm, tmp_path):
    _submit(slurm, tmp_path)

    jobs = _jobs(slurm)
    records = sorted((tmp_path / "results" / "cells").rglob("*.json"))
    assert len(records) == 2 * 2 * (2 + 1)  # engines x batches x (cpu threads 1, 2 + cuda)
    slurm_ids = set()
    for path in records:
        record = CellRecord.load(path)
        key = record.key
        assert record.status == ("ok" if key.device == "cpu" else "unavailable"), record.reason
        job = jobs[record.environment["slurm_job_id"]]  # the record was written inside that job
        assert job["JobState"] == "COMPLETED"
        assert job["NumCPUs"] == str(key.threads if key.device == "cpu" else min(4, MAX_THREADS))
        assert job["MinMemoryNode"] == f"{CELL_MEMORY_MB}M"
        gpus = job.get("TresPerJob", "") + job.get("TresPerNode", "")
        assert ("gpu:1" in gpus) == (key.device == "cuda"), f"{key.cell_id}: {gpus!r}"
        slurm_ids.add(job["JobId"])
    assert len(slurm_ids) == len(records), "one Slurm job per cell"
    # summary, plots and report are local rules: they ran beside snakemake, not as cluster jobs
    assert (tmp_path / "results" / "report.md").exists()
    comments = [job.get("Comment", "") for job in jobs.values()]
    assert not [c for c in comments if c.startswith(("rule_aggregate", "rule_report"))]


def test_cpu_cells_can_be_bundled_into_fewer_cluster_jobs(slurm, tmp_path):
    # --cores caps what one bundle may ask for: its cells are then stacked in series within it
    _submit(slurm, tmp_path, "--group-components", "cpu_cells=4", "--cores", "2")
    records = [CellRecord.load(p) for p in sorted((tmp_path / "results" / "cells").rglob("*.json"))]
    cpu_jobs = {r.environment["slurm_job_id"] for r in records if r.key.device == "cpu"}
    gpu_jobs = [r.environment["slurm_job_id"] for r in records if r.key.device == "cuda"]
    assert all(r.status in ("ok", "unavailable") for r in records)
    assert len(cpu_jobs) == 8 // 4, "8 CPU cells in bundles of 4"
    assert len(set(gpu_jobs)) == len(gpu_jobs) == 4, "GPU cells are never bundled"
    assert not cpu_jobs & set(gpu_jobs)
