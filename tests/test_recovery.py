"""A run killed with `kill -9` half-way resumes with the same command (README: "A run killed
half-way resumes with the same command"): its Snakemake lock is stale once no run holds the
directory (inferbench.machine.run_lock), and the profile re-runs the jobs it left incomplete."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from inferbench.machine import run_lock
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


def _hold(tmp_path: Path, holder_code: str) -> subprocess.Popen:
    """Another process that holds the run lock through ``holder_code`` until its stdin closes."""
    holder = subprocess.Popen(
        [sys.executable, "-c", f"from inferbench.machine.run_lock import {holder_code};"
         f"{holder_code}({str(tmp_path)!r}); import sys; print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO / "src")},
    )  # fmt: skip
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_a_live_run_keeps_its_lock_and_a_finished_one_leaves_none_to_clear(tmp_path):
    locks = tmp_path / ".snakemake" / "locks"
    locks.mkdir(parents=True)
    holder = _hold(tmp_path, "clear_stale_locks")  # a run: it owns the directory
    assert (tmp_path / run_lock.RUN_OWNER).read_text().strip() == str(holder.pid)
    (locks / "0.input.lock").write_text("x")  # the live run's Snakemake lock
    assert run_lock.clear_stale_locks(tmp_path) == []  # at once: a live run is not waited for
    assert (locks / "0.input.lock").exists()
    holder.stdin.close()
    holder.wait(10)
    # its process is gone, and the lock with it: what Snakemake left is stale
    assert run_lock.clear_stale_locks(tmp_path) == [locks / "0.input.lock"]
    assert not list(Path(locks).glob("*.lock"))
    # this run now shares the lock: a job of it joins without waiting, outside a workflow nothing happens
    joined = subprocess.run(
        [sys.executable, "-c", "from inferbench.machine.run_lock import join_run; "
         f"print(bool(join_run({str(tmp_path)!r})), bool(join_run({str(tmp_path / 'elsewhere')!r})))"],
        capture_output=True, text=True, timeout=30, env={**os.environ, "PYTHONPATH": str(REPO / "src")}, check=True,
    )  # fmt: skip
    assert joined.stdout.split() == ["True", "False"]


def test_a_new_run_waits_for_the_jobs_of_a_killed_run_then_clears_its_locks(tmp_path, capfd):
    locks = tmp_path / ".snakemake" / "locks"
    locks.mkdir(parents=True)
    (tmp_path / run_lock.RUN_LOCK).touch()  # the killed run created it
    (tmp_path / run_lock.RUN_OWNER).write_text("999999999\n")  # and owned the directory: no such process now
    (locks / "0.input.lock").write_text("x")  # what Snakemake left at its kill -9
    job = _hold(tmp_path, "join_run")  # a job of it, still working
    cleared: list[list[Path]] = []
    starting = threading.Thread(target=lambda: cleared.append(run_lock.clear_stale_locks(tmp_path)), daemon=True)
    starting.start()
    starting.join(1.0)
    assert starting.is_alive() and not cleared, "a new run goes on while a job of the killed run still writes"
    assert (locks / "0.input.lock").exists()
    assert f"pid {job.pid}" in capfd.readouterr().err  # it says whom it waits for
    job.stdin.close()
    job.wait(10)
    starting.join(30)
    assert cleared == [[locks / "0.input.lock"]]
    assert (tmp_path / run_lock.RUN_OWNER).read_text().strip() == str(os.getpid())


def test_the_wait_for_a_killed_run_s_jobs_has_a_limit_and_says_who_still_holds(tmp_path, capfd, monkeypatch):
    (tmp_path / ".snakemake" / "locks").mkdir(parents=True)
    (tmp_path / run_lock.RUN_LOCK).touch()
    (tmp_path / run_lock.RUN_OWNER).write_text("999999999\n")  # the killed run: no such process now
    (tmp_path / ".snakemake" / "locks" / "0.input.lock").write_text("x")
    job = _hold(tmp_path, "join_run")  # a job of it that never ends
    monkeypatch.setattr(run_lock, "ORPHAN_WAIT_S", 1.0)
    try:
        assert run_lock.clear_stale_locks(tmp_path) == [], "Snakemake's lock stays: it will say the directory is locked"
        err = capfd.readouterr().err
        assert "waiting up to 1 s" in err and f"gave up after 1 s: pid {job.pid}" in err
    finally:
        job.stdin.close()
        job.wait(10)


def test_a_verb_run_in_process_lets_go_of_the_run_lock_when_it_is_done(tmp_path, monkeypatch):
    from inferbench.cli import results
    from inferbench.cli.main import main

    (tmp_path / run_lock.RUN_LOCK).parent.mkdir(parents=True)
    (tmp_path / run_lock.RUN_LOCK).touch()
    monkeypatch.chdir(tmp_path)
    path = (tmp_path / run_lock.RUN_LOCK).resolve()
    held_during = []

    def aggregate(args):
        held_during.append(run_lock.lock_holders(path))

    aggregate.add_arguments = results.aggregate.add_arguments
    monkeypatch.setattr(results, "aggregate", aggregate)
    assert main(["aggregate", "none.json", "--out-csv", "s.csv", "--out-parquet", "s.parquet"]) == 0
    assert os.getpid() in held_during[0], "the verb ran as a job of the run"
    # a test or a notebook that ran a verb holds nothing a later run would wait for as for a killed run's job
    assert os.getpid() not in run_lock.lock_holders(path)


@pytest.mark.slow
def test_unlock_beside_a_live_run_does_not_let_a_second_run_measure(tmp_path):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    live = _hold(tmp_path, "clear_stale_locks")  # a run that owns the directory and works in it
    (tmp_path / ".snakemake" / "locks").mkdir(parents=True)
    (tmp_path / ".snakemake" / "locks" / "0.input.lock").write_text("x")  # its Snakemake lock
    try:
        unlock = subprocess.run([*command(), "--unlock"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert unlock.returncode == 0, (unlock.stdout + unlock.stderr)[-3000:]  # Snakemake's lock is gone
        second = subprocess.run(command(), cwd=tmp_path, capture_output=True, text=True, timeout=300)
        output = second.stdout + second.stderr
        assert second.returncode != 0
        assert f"another run of this workflow (pid {live.pid}) is working in {tmp_path}" in output
        assert not (tmp_path / "results").exists(), "nothing measured, trained or written beside the live run"
        dry = subprocess.run([*command(), "-n"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert dry.returncode == 0, "a dry run only reads: it still works"
    finally:
        live.stdin.close()
        live.wait(10)
    after = subprocess.run([*command(), "-n"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert after.returncode == 0 and "another run" not in after.stdout + after.stderr
