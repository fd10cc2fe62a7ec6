"""A run killed with `kill -9` half-way resumes with the same command (README: "A run killed
half-way resumes with the same command"): its Snakemake lock is stale once no run holds the
directory (inferbench.launch.run_lock), and the profile re-runs the jobs it left incomplete."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from inferbench.launch import run_lock
from tests.conftest import REPO

CONFIG = {
    "run": ["small"],
    "studies": {
        "small": {
            "workloads": ["mlp_heart"],
            "engines": ["noop", "torch_eager"],
            "devices": ["cpu"],
            "batch_sizes": [1, 2],
            "threads": [1],
        }
    },
    "engines": {"noop": {"engine": "noop"}, "torch_eager": {"engine": "torch_eager"}},
    "models": {"mlp_heart": {"arch": {"hidden": [8]}, "train": {"epochs": 2, "batch_size": 32}}},
    # cells long enough to be killed in the middle of one
    "measure": {"warmup_s": 0.0, "min_time_s": 2.0, "min_iters": 3},
    "profile": {"cells": []},
}


def command() -> list[str]:
    """The README's command, pointed at this checkout's Snakefile."""
    return [sys.executable, "-m", "snakemake", "--cores", "2", "--snakefile", str(REPO / "Snakefile")]


@pytest.mark.slow
def test_a_run_killed_with_sigkill_resumes_with_the_same_command(tmp_path):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    log = (tmp_path / "first.log").open("w")
    first = subprocess.Popen(command(), cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    cells = tmp_path / "logs" / "benchmark_cell"
    deadline = time.monotonic() + 300
    while not (cells.exists() and any(cells.rglob("*.log"))):
        assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "no cell started"
        time.sleep(0.2)
    first.send_signal(signal.SIGKILL)  # Snakemake itself, as `kill -9 <pid>` would; its jobs live on
    first.wait(30)
    assert list((tmp_path / ".snakemake" / "locks").glob("*.lock")), "a killed run leaves its lock"

    second = subprocess.run(command(), cwd=tmp_path, capture_output=True, text=True, timeout=900)
    output = second.stdout + second.stderr
    assert second.returncode == 0, output[-4000:]
    assert "cannot be locked" not in output
    assert "left by a run that was killed" in output
    records = sorted((tmp_path / "results" / "cells").rglob("*.json"))
    assert len(records) == 4
    assert (tmp_path / "results" / "report.md").exists()
    if _group_alive(first.pid):  # a job of the killed run still going: not left behind by a test
        os.killpg(first.pid, signal.SIGKILL)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("holder_code", ["clear_stale_locks", "join_run"], ids=["a live run", "a job of a killed run"])
def test_a_live_run_or_job_keeps_the_lock_and_a_finished_one_leaves_none_to_clear(tmp_path, holder_code):
    locks = tmp_path / ".snakemake" / "locks"
    locks.mkdir(parents=True)
    (tmp_path / run_lock.RUN_LOCK).touch()  # the run the job belongs to created it
    # another process holds the run lock: a run (or a job of one) is active, the Snakemake lock is not stale
    holder = subprocess.Popen(
        [sys.executable, "-c", f"from inferbench.launch.run_lock import {holder_code};"
         f"{holder_code}({str(tmp_path)!r}); import sys; print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO / "src")},
    )  # fmt: skip
    assert holder.stdout.readline().strip() == "held"
    (locks / "0.input.lock").write_text("x")  # the live run's Snakemake lock
    assert run_lock.clear_stale_locks(tmp_path) == []
    assert (locks / "0.input.lock").exists()
    holder.stdin.close()
    holder.wait(10)
    # its process is gone, and the lock with it: what Snakemake left is stale
    assert run_lock.clear_stale_locks(tmp_path) == [locks / "0.input.lock"]
    assert not list(Path(locks).glob("*.lock"))
    # this run now shares the lock: a job of it joins without waiting, outside a workflow nothing happens
    joined = subprocess.run(
        [sys.executable, "-c", f"from inferbench.launch.run_lock import join_run; print(join_run({str(tmp_path)!r}), "
         f"join_run({str(tmp_path / 'elsewhere')!r}))"],
        capture_output=True, text=True, timeout=30, env={**os.environ, "PYTHONPATH": str(REPO / "src")}, check=True,
    )  # fmt: skip
    assert joined.stdout.split() == ["True", "False"]
