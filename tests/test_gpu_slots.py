"""Each running GPU job gets a device of its own, released when it ends: tested with a fake pool of
devices (INFERBENCH_GPUS), since the lock files, not CUDA, do the work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from inferbench.core.cells import CellRecord
from inferbench.machine.gpu_slots import POOL_ENV, claim_gpu, gpu_pool
from inferbench.machine.lock import MachineLock

pytestmark = pytest.mark.fast  # pure logic: the developer's loop (docs/contributing.md)


def test_pool_comes_from_the_env_then_the_visible_devices(monkeypatch):
    monkeypatch.setenv(POOL_ENV, "0, 1,3")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    assert gpu_pool() == ["0", "1", "3"]
    monkeypatch.delenv(POOL_ENV)
    assert gpu_pool() == ["7"]  # e.g. what SLURM allocated to the job
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.setenv("PATH", "")  # no nvidia-smi: no GPUs to hand out
    assert gpu_pool() == []


def test_claims_are_distinct_and_a_full_pool_waits_for_a_release(tmp_path):
    first, second = claim_gpu(["0", "1"], tmp_path), claim_gpu(["0", "1"], tmp_path)
    assert {first.device, second.device} == {"0", "1"}
    got: list[str] = []
    waiter = threading.Thread(target=lambda: got.append(claim_gpu(["0", "1"], tmp_path).device))
    waiter.start()
    time.sleep(0.3)
    assert got == [], "both devices are taken: the third job waits"
    first.release()
    waiter.join(timeout=5)
    assert got == [first.device]
    with pytest.raises(ValueError, match="no GPUs"):
        claim_gpu([], tmp_path)


@pytest.mark.parametrize("ending", ["exception", "kill"])
def test_a_device_is_released_when_its_job_dies(tmp_path, ending):
    holder = (
        "import os, sys, time\n"
        "from inferbench.machine.gpu_slots import claim_gpu\n"
        f"slot = claim_gpu(['0'], {str(tmp_path)!r})\n"
        "print('claimed', flush=True)\n"
        + ("raise RuntimeError('the cell crashed')\n" if ending == "exception" else "time.sleep(60)\n")
    )
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    process = subprocess.Popen([sys.executable, "-c", holder], **pipes)
    assert process.stdout.readline().strip() == "claimed"
    if ending == "kill":
        process.kill()
    process.wait(timeout=30)
    claimed = []
    thread = threading.Thread(target=lambda: claimed.append(claim_gpu(["0"], tmp_path)), daemon=True)
    thread.start()
    thread.join(timeout=5)
    assert claimed and claimed[0].device == "0", "the dead job's device is free again"


def _cuda_cell(tmp_path, name: str, measure: dict | None = None) -> list[str]:
    return [
        sys.executable, "-m", "inferbench", "run-cell", "--workload", "mlp_heart", "--engine", "noop",
        "--engine-options", '{"engine": "noop"}', "--precision", "fp32", "--device", "cuda", "--batch", "1",
        "--measure", json.dumps(measure or {}), "--out", str(tmp_path / f"{name}.json"),
    ]  # fmt: skip


def test_concurrent_gpu_jobs_run_on_distinct_devices(tmp_path, monkeypatch):
    lock_file = tmp_path / "measure.lock"
    env = {**os.environ, POOL_ENV: "0,1,2", "INFERBENCH_LOCK_FILE": str(lock_file)}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    monkeypatch.setenv("INFERBENCH_LOCK_FILE", str(lock_file))
    blocker = MachineLock(lock_file)
    blocker.exclusive()  # holds the three jobs after they claimed a GPU, so they surely overlap
    jobs = [
        subprocess.Popen(_cuda_cell(tmp_path, f"job{i}"), env=env, stderr=subprocess.PIPE, text=True) for i in range(3)
    ]
    for job in jobs:
        assert "GPU job on device" in job.stderr.readline()  # the job's first log line
    blocker.close()
    for job in jobs:
        assert job.wait(timeout=120) == 0
    records = [CellRecord.load(tmp_path / f"job{i}.json") for i in range(3)]
    devices = {record.environment["thread_env"]["CUDA_VISIBLE_DEVICES"] for record in records}
    assert devices == {"0", "1", "2"}


def test_repeats_run_on_their_parents_device(tmp_path):
    env = {**os.environ, POOL_ENV: "5", "INFERBENCH_LOCK_FILE": str(tmp_path / "lock")}
    done = subprocess.run(
        _cuda_cell(tmp_path, "r", {"repeats": 2, "min_time_s": 0}), env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr  # a child that re-claimed device 5 would wait forever
    record = CellRecord.load(tmp_path / "r.json")
    # no GPU here: the first process finds the cell unavailable, and that ends it (the next would too)
    assert record.status == "unavailable" and record.repeats["n"] == 1
    assert record.environment["thread_env"]["CUDA_VISIBLE_DEVICES"] == "5"


def _gpu_record(cell: str, windows: list[list[float]], uuids: list[str], status: str = "ok") -> CellRecord:
    from inferbench.core.cells import CellKey

    key = CellKey(cell, "torch_eager", "fp16", "cuda", 1, 0, 1)
    per_repeat = [{"gpu_uuid": u} for u in uuids]
    return CellRecord(key, status, "torch_eager", reason=None if status == "ok" else "x",
                      measured_windows_unix=windows, repeats={"n": len(uuids), "per_repeat": per_repeat},
                      environment={"gpu_uuid": uuids[0]})  # fmt: skip


def test_measuring_windows_name_their_gpu_and_overlaps_are_found():
    from inferbench.analysis.gpu_use import measured_windows, overlaps, per_gpu

    a = _gpu_record("a", [[0.0, 1.0], [3.0, 4.0]], ["GPU-0", "GPU-0"])
    b = _gpu_record("b", [[1.0, 2.5]], ["GPU-1"])  # touches a's first window: no overlap
    assert overlaps(measured_windows([a, b])) == []
    use = per_gpu([a, b])
    assert use["GPU-0"] == {"cells": 1, "processes": 2, "measuring_s": 2.0}
    assert use["GPU-1"]["cells"] == 1 and use["GPU-1"]["measuring_s"] == 1.5
    late = _gpu_record("c", [[3.5, 5.0]], ["GPU-1"])  # measured while a's second process did
    found = overlaps(measured_windows([a, b, late]))
    assert [(x.cell_id[0], y.cell_id[0], shared) for x, y, shared in found] == [("a", "c", 0.5)]
    failed = _gpu_record("d", [[0.5, 0.7]], ["GPU-1"], status="failed")  # no measurement: not counted
    assert len(measured_windows([a, failed])) == 2


def test_two_gpus_may_measure_at_once_under_their_own_locks_and_nothing_else_may_overlap():
    from inferbench.analysis.gpu_use import conflicts, measured_windows

    def measured_under(record: CellRecord, locks: list[str]) -> CellRecord:
        for process, lock in zip(record.repeats["per_repeat"], locks, strict=True):
            process["measuring_lock"] = lock
        return record

    a = measured_under(_gpu_record("a", [[0.0, 2.0]], ["GPU-0"]), ["gpu 0"])
    b = measured_under(_gpu_record("b", [[1.0, 3.0]], ["GPU-1"]), ["gpu 1"])
    assert conflicts(measured_windows([a, b])) == []  # a partitioned host: the two GPUs at once
    same = measured_under(_gpu_record("c", [[1.5, 2.5]], ["GPU-0"]), ["gpu 0"])
    machine = measured_under(_gpu_record("d", [[2.8, 3.5]], ["GPU-1"]), ["machine"])
    found = {(x.cell_id[0], y.cell_id[0]) for x, y, _ in conflicts(measured_windows([a, b, same, machine]))}
    assert found == {("a", "c"), ("b", "d")}  # one GPU twice at once; a machine-wide measurement beside one
    # the GPUs' one lock (the default): one GPU's timed loop at a time, so any overlap is against the rule
    one_at_a_time = [
        measured_under(_gpu_record("g", [[0.0, 2.0]], ["GPU-0"]), ["gpus"]),
        measured_under(_gpu_record("h", [[1.0, 3.0]], ["GPU-1"]), ["gpus"]),
        measured_under(_gpu_record("i", [[2.5, 3.5]], ["GPU-0"]), ["gpu 0"]),
    ]
    found = {(x.cell_id[0], y.cell_id[0]) for x, y, _ in conflicts(measured_windows(one_at_a_time))}
    assert found == {("g", "h"), ("h", "i")}
    # records made before the lock was recorded measured machine-wide: any overlap is against the rule
    assert (
        len(conflicts(measured_windows([_gpu_record("e", [[0.0, 2.0]], ["x"]), _gpu_record("f", [[1.0, 3.0]], ["y"])])))
        == 1
    )
