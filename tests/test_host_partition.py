"""Several GPUs, each measuring on cores of its own (inferbench.machine.host_partition): the host's cores
split into a slot per GPU and the rest; one GPU's timed loop at a time, or each GPU under a measuring lock
of its own where asked. Tested with fake GPUs: the pool comes from
INFERBENCH_GPUS, a process's GPU from its claim, and the lock files, not CUDA, do the work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from inferbench.machine import host_partition
from inferbench.machine.cores import auto_cores
from inferbench.machine.gpu_slots import CLAIMED_ENV, POOL_ENV
from inferbench.machine.host_partition import (
    AT_ONCE_ENV,
    PARTITION_ENV,
    SLOT_CPUS_ENV,
    HostPartition,
    current_partition,
    measuring,
    parse_cpulist,
    plan_partition,
)
from inferbench.machine.lock import MachineLock

LINUX = hasattr(os, "sched_setaffinity")


def test_each_gpu_gets_cores_of_its_own_from_its_numa_node_and_the_rest_are_shared():
    local = {"0": set(range(16)), "1": set(range(16, 32))}
    partition = plan_partition(range(32), ["0", "1"], 4, local)
    assert partition.slots == {"0": (12, 13, 14, 15), "1": (28, 29, 30, 31)}
    assert partition.shared == tuple(c for c in range(32) if c not in (12, 13, 14, 15, 28, 29, 30, 31))
    # without NUMA information: the highest-numbered cores, never two slots on one core
    blind = plan_partition(range(32), ["0", "1", "2"], 4)
    assert blind.slots == {"0": (28, 29, 30, 31), "1": (24, 25, 26, 27), "2": (20, 21, 22, 23)}
    cores = [c for slot in blind.slots.values() for c in slot] + list(blind.shared)
    assert sorted(cores) == list(range(32))


def test_no_partition_with_one_gpu_or_too_few_cores():
    assert plan_partition(range(32), ["0"], 4) is None  # one GPU: measurements stay machine-wide
    assert plan_partition(range(11), ["0", "1"], 4) is None  # 2 x 4 cores and 4 more for the rest: 12
    assert plan_partition(range(12), ["0", "1"], 4) is not None
    assert parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}


def test_the_partition_is_planned_once_and_handed_to_the_processes_of_the_run(monkeypatch):
    monkeypatch.delenv(PARTITION_ENV, raising=False)
    monkeypatch.setenv(POOL_ENV, "0,1")
    monkeypatch.setenv(SLOT_CPUS_ENV, "2")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    monkeypatch.setattr(host_partition, "numa_local_cpus", lambda devices: {})
    planned = current_partition()
    assert planned.slots == {"0": (6, 7), "1": (4, 5)} and planned.shared == (0, 1, 2, 3)
    assert HostPartition.from_json(os.environ[PARTITION_ENV]) == planned  # what children read
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(5)))  # read once, not again
    assert current_partition() == planned
    monkeypatch.setenv(PARTITION_ENV, "off")
    assert current_partition() is None


def test_too_few_cores_keep_measurements_machine_wide(monkeypatch):
    monkeypatch.delenv(PARTITION_ENV, raising=False)
    monkeypatch.setenv(POOL_ENV, "0,1")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert current_partition() is None and os.environ[PARTITION_ENV] == "off"


#: a process that takes the measuring lock of ``device``, says it holds it (a file), and waits a while
#: for ``other``'s file: whether both held at once
HOLDER = """
import json, os, sys, time
from pathlib import Path
from inferbench.machine.host_partition import measuring
from inferbench.machine.lock import MachineLock
me, other, device, wait_s = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
lock = MachineLock()
lock.shared()
def wait_for(path, seconds):
    deadline = time.time() + seconds
    while not Path(path).exists() and time.time() < deadline:
        time.sleep(0.02)
    return Path(path).exists()
with measuring(lock, device) as held:
    Path(me + ".held").touch()
    together = wait_for(other + ".held", wait_s)
    if together:  # seen: say so, and hold on until the other has seen this one too
        Path(me + ".seen").touch()
        wait_for(other + ".seen", 60)
    Path(me + ".held").unlink()
print(json.dumps({"together": together, **held}))
"""


def _hold_both(
    tmp_path, first: tuple[str, str], second: tuple[str, str], wait_s: float, at_once: bool = False
) -> list[dict]:
    """Two processes (device, claimed GPU or '') measuring at once, each waiting up to ``wait_s`` for the
    other to hold too; ``at_once``: each GPU under a measuring lock of its own."""
    partition = HostPartition({"0": (0,), "1": (1,)}, (0, 1))
    processes = []
    for index, (device, gpu) in enumerate((first, second)):
        env = {**os.environ, PARTITION_ENV: partition.to_json()}
        env.pop(CLAIMED_ENV, None)
        env.pop(AT_ONCE_ENV, None)
        if at_once:
            env[AT_ONCE_ENV] = "1"
        if gpu:
            env[CLAIMED_ENV] = gpu
        me, other = tmp_path / f"held{index}", tmp_path / f"held{1 - index}"
        command = [sys.executable, "-c", HOLDER, str(me), str(other), device, str(wait_s)]
        processes.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True))
    return [json.loads(p.communicate(timeout=120)[0]) for p in processes]


def test_two_gpus_time_their_calls_one_at_a_time_by_default(tmp_path):
    done = _hold_both(tmp_path, ("cuda", "0"), ("cuda", "1"), wait_s=1.5)
    assert [d["together"] for d in done] == [False, False]
    assert [d["lock"] for d in done] == ["gpus", "gpus"]


def test_two_gpus_measure_at_once_each_under_its_own_lock_when_asked(tmp_path):
    done = _hold_both(tmp_path, ("cuda", "0"), ("cuda", "1"), wait_s=60, at_once=True)
    assert [d["together"] for d in done] == [True, True]
    assert [d["lock"] for d in done] == ["gpu 0", "gpu 1"]


@pytest.mark.parametrize("at_once", [False, True])
def test_one_gpu_measures_once_at_a_time_and_a_cpu_cell_alone(tmp_path, at_once):
    same_gpu = _hold_both(tmp_path, ("cuda", "0"), ("cuda", "0"), wait_s=1.5, at_once=at_once)
    assert [d["together"] for d in same_gpu] == [False, False]
    beside_cpu = _hold_both(tmp_path, ("cuda", "1"), ("cpu", ""), wait_s=1.5, at_once=at_once)
    assert [d["together"] for d in beside_cpu] == [False, False]
    assert sorted(d["lock"] for d in beside_cpu) == ["gpu 1" if at_once else "gpus", "machine"]


@pytest.mark.skipif(not LINUX, reason="CPU affinity is Linux's")
def test_a_gpu_cell_times_its_calls_on_its_slot_and_sets_up_on_the_shared_cores(tmp_path):
    script = (
        "import os, sys\n"
        "from inferbench.machine.host_partition import keep_to_shared_cores, measuring\n"
        "from pathlib import Path\nfrom inferbench.machine.lock import MachineLock\n"
        "print(keep_to_shared_cores(), sorted(os.sched_getaffinity(0)))\n"
        "with measuring(MachineLock(Path(sys.argv[1])), 'cuda') as held:\n"
        "    print(held['lock'], held['cpus'], sorted(os.sched_getaffinity(0)))\n"
        "print(sorted(os.sched_getaffinity(0)))\n"
    )
    lock = str(tmp_path / "measure.lock")
    env = {**os.environ, PARTITION_ENV: HostPartition({"0": (1,), "1": (0,)}, (0,)).to_json(), CLAIMED_ENV: "0"}
    run = subprocess.run([sys.executable, "-c", script, lock], env=env, capture_output=True, text=True, check=True)
    # set-up on the shared cores, the timed loop on GPU 0's slot, back to the shared cores after
    assert run.stdout.splitlines() == ["(0,) [0]", "gpus [1] [1]", "[0]"]
    # a process pinned elsewhere (measure.cpu_affinity), not on the shared cores, stays where it was put
    elsewhere = script.replace("print(keep_to_shared_cores(), ", "print(os.sched_setaffinity(0, {0, 1}), ")
    run = subprocess.run([sys.executable, "-c", elsewhere, lock], env=env, capture_output=True, text=True, check=True)
    assert run.stdout.splitlines()[1:] == ["gpus [0, 1] [0, 1]", "[0, 1]"]
    # not partitioned: nothing moves, and the machine lock is held exclusively
    env[PARTITION_ENV] = "off"
    run = subprocess.run([sys.executable, "-c", script, lock], env=env, capture_output=True, text=True, check=True)
    lines = run.stdout.splitlines()
    assert lines[0].startswith("None ") and lines[1].startswith("machine ")


@pytest.mark.skipif(not LINUX, reason="CPU affinity is Linux's")
def test_auto_pins_only_a_gpu_cells_launching_thread_and_only_while_it_times(tmp_path, monkeypatch):
    monkeypatch.setenv(PARTITION_ENV, "off")
    before = os.sched_getaffinity(0)
    core = list(auto_cores(1).cpus)
    started, release = threading.Event(), threading.Event()
    other = threading.Thread(target=lambda: (started.set(), release.wait()), daemon=True)
    other.start()  # a thread of the process that does not launch: it keeps its cores
    started.wait()
    lock = MachineLock(tmp_path / "measure.lock")
    try:
        with measuring(lock, "cuda", "auto") as held:
            assert held["cpus"] == core and sorted(os.sched_getaffinity(0)) == core
            assert held["pinning"].startswith("auto: the launching thread")
            assert os.sched_getaffinity(other.native_id) == before
        assert os.sched_getaffinity(0) == before
        # threads started in the block launch the work (a LoadGen server's): nothing pinned, and why
        with measuring(lock, "cuda", "auto", launches_here=False) as held:
            assert held["cpus"] == sorted(before) and held["pinning"].startswith("unpinned: ")
        # a CPU cell was pinned as a whole before it loaded; null or a list: nothing more here
        for device, affinity in [("cpu", "auto"), ("cuda", None), ("cuda", (min(before),))]:
            with measuring(lock, device, affinity) as held:
                assert held == {"lock": "machine", "cpus": sorted(before)} and os.sched_getaffinity(0) == before
    finally:
        release.set()


@pytest.mark.skipif(not LINUX, reason="CPU affinity is Linux's")
def test_a_gpu_slot_takes_precedence_over_auto(tmp_path):
    script = (
        "import os, sys\n"
        "from inferbench.machine.host_partition import keep_to_shared_cores, measuring\n"
        "from pathlib import Path\nfrom inferbench.machine.lock import MachineLock\n"
        "keep_to_shared_cores()\n"
        "with measuring(MachineLock(Path(sys.argv[1])), 'cuda', 'auto') as held:\n"
        "    print(held['cpus'], held['pinning'], sorted(os.sched_getaffinity(0)))\n"
    )
    env = {**os.environ, PARTITION_ENV: HostPartition({"0": (1,), "1": (0,)}, (0,)).to_json(), CLAIMED_ENV: "0"}
    command = [sys.executable, "-c", script, str(tmp_path / "measure.lock")]
    run = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    assert run.stdout.splitlines() == ["[1] gpu slot: the process on its GPU's cores while timing [1]"]
