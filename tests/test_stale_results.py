"""No stale publication: a cell whose re-measurement is cancelled leaves none of its earlier numbers in the
summary or the report, nor its scratch or processes, and the plain command measures it again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import copy_checkout

pytestmark = pytest.mark.slow

STUDY = {"workloads": ["mlp_heart"], "engines": ["noop"], "precisions": ["fp32"], "devices": ["cpu"],
         "batch_sizes": [1], "threads": [1], "percentiles": ["p50"]}  # fmt: skip
CONFIG = {
    "run": ["one"],
    "studies": {"one": STUDY},
    "models": {"mlp_heart": {"arch": {"hidden": [8]}, "train": {"epochs": 2, "batch_size": 32}}},
    "measure": {"warmup_s": 0.0, "min_time_s": 0.01, "min_iters": 3, "repeats": 1},
}
RECORD = "results/cells/mlp_heart/noop-fp32/cpu/b1-s0-t1.json"
PUBLISHED = ("results/summary.csv", "results/summary.parquet", "results/report.md")


def _snakemake(workdir: Path, *args: str, wait: bool = True) -> subprocess.Popen | subprocess.CompletedProcess:
    command = [sys.executable, "-m", "snakemake", "--cores", "2", "--configfile", "run.yaml", *args]
    env = {**os.environ, "INFERBENCH_LOCK_FILE": str(workdir / "machine.lock")}
    if not wait:
        return subprocess.Popen(command, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=900, check=False)


def _cell_jobs(workdir: Path) -> list[int]:
    """The run-cell processes working in ``workdir``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            if b"run-cell" in cmdline and Path(os.readlink(entry / "cwd")) == workdir:
                found.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return found


def test_a_cancelled_re_measurement_leaves_no_earlier_numbers_and_the_plain_command_measures_again(tmp_path):
    workdir = copy_checkout(tmp_path / "w").resolve()
    (workdir / "run.yaml").write_text(yaml.safe_dump(CONFIG))
    first = _snakemake(workdir)
    assert first.returncode == 0, first.stderr[-3000:]
    assert all((workdir / path).exists() for path in (RECORD, *PUBLISHED))

    # a config change re-measures the cell; its job is cancelled (SIGTERM) while it measures
    CONFIG["measure"]["min_time_s"] = 60.0
    (workdir / "run.yaml").write_text(yaml.safe_dump(CONFIG))
    run = _snakemake(workdir, wait=False)
    deadline = time.monotonic() + 240
    while not (jobs := _cell_jobs(workdir)) and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.5)
    assert jobs, "the cell's job started"
    while (workdir / "results/summary.csv").exists() and time.monotonic() < deadline:
        time.sleep(0.5)  # the job withdraws what publishes the cell's numbers before it measures
    for pid in jobs:
        os.kill(pid, signal.SIGTERM)
    assert run.wait(timeout=300) != 0, "the run reports the cancelled job"

    assert not [path for path in (RECORD, *PUBLISHED) if (workdir / path).exists()], "no earlier numbers stand"
    # the cancelled job ended its measuring process and removed its scratch before it went
    cell_dir = (workdir / RECORD).parent
    while list(cell_dir.glob("repeats-*")) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not list(cell_dir.glob("repeats-*")), "no scratch folder is left behind"
    assert not _cell_jobs(workdir)
    planned = _snakemake(workdir, "-n")
    assert planned.returncode == 0, planned.stderr[-3000:]
    assert "benchmark_cell" in planned.stdout and "aggregate" in planned.stdout, "the plain command measures again"
