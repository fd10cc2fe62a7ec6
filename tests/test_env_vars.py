"""Every environment variable inferbench reads is parsed in one place (inferbench.core.env_vars): a bad
value is refused by name, with the value and what is allowed, by the modules that read it and by the
command line before its verb runs (issue 56, item 5). The workflow's own check before any job is in
tests/test_env_vars_workflow.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from inferbench.cli.main import main
from inferbench.core import env_vars
from inferbench.core.errors import UserError
from inferbench.machine import host_partition
from inferbench.machine.gpu_slots import claim_for_this_process, gpu_pool
from inferbench.machine.host_partition import HostPartition, current_partition, keep_to_shared_cores
from inferbench.machine.lock import MachineLock, lock_path
from tests.conftest import REPO

pytestmark = pytest.mark.fast  # pure logic: the developer's loop (docs/contributing.md)

EMPTY_SLOT = json.dumps({"slots": {"0": [], "1": [0]}, "shared": [0]})
NO_SHARED = json.dumps({"slots": {"0": [0], "1": [0]}, "shared": []})
#: (variable, bad value, what the refusal says is wrong); "<dir>": a directory of the test's
BAD = [
    ("INFERBENCH_GPU_SLOT_CPUS", "abc", "is not a whole number"),
    ("INFERBENCH_GPU_SLOT_CPUS", "0", "is out of range"),
    ("INFERBENCH_GPU_SLOT_CPUS", "-4", "is out of range"),
    ("INFERBENCH_HOST_PARTITION", "OFFF", "is neither off nor a partition's JSON"),
    ("INFERBENCH_HOST_PARTITION", "[0, 1]", "is not an object"),
    ("INFERBENCH_HOST_PARTITION", EMPTY_SLOT, "GPU 0's slot is not a non-empty list of CPUs"),
    ("INFERBENCH_HOST_PARTITION", NO_SHARED, "the shared CPUs is not a non-empty list of CPUs"),
    ("INFERBENCH_HOST_PARTITION", json.dumps({"slots": {"0": [-1]}, "shared": [0]}), "other than a CPU number"),
    ("INFERBENCH_HOST_PARTITION", json.dumps({"slots": {"0": [True]}, "shared": [0]}), "other than a CPU number"),
    ("INFERBENCH_HOST_PARTITION", json.dumps({"slots": {"0": [0]}, "shared": "0-3"}), "the shared CPUs is not a"),
    ("INFERBENCH_GPUS", "a/b", "'a/b' is not a GPU index or UUID"),
    ("INFERBENCH_GPUS", "0,1,0", "0 named more than once"),
    ("INFERBENCH_GPUS", ",", "names no GPU"),
    ("INFERBENCH_LOCK_FILE", "<dir>", "is a directory"),
    ("INFERBENCH_GPUS_MEASURE_AT_ONCE", "maybe", "is neither on nor off"),
    ("OMP_NUM_THREADS", "abc", "is not a whole number"),
    ("OMP_NUM_THREADS", "0", "is out of range"),
    ("OMP_NUM_THREADS", "4,x", "is not a whole number"),
]


def _value(value: str, tmp_path) -> str:
    return str(tmp_path) if value == "<dir>" else value


@pytest.mark.parametrize(("name", "value", "wrong"), BAD)
def test_a_bad_value_is_refused_naming_the_variable_the_value_and_what_is_allowed(tmp_path, name, value, wrong):
    value = _value(value, tmp_path)
    variable = env_vars.VARIABLES[name]
    with pytest.raises(UserError) as refused:
        variable.read({name: value})
    message = str(refused.value)
    assert message.startswith(f"{name}=") and value[:20] in message and wrong in message
    assert f"; allowed: {variable.allowed}" in message
    assert env_vars.problems({name: value}) == [message]


def test_every_bad_value_is_listed_at_once(tmp_path):
    environ = {"INFERBENCH_GPU_SLOT_CPUS": "abc", "INFERBENCH_GPUS": "a/b", "OMP_NUM_THREADS": "abc"}
    assert [line.split("=")[0] for line in env_vars.problems(environ)] == [
        "INFERBENCH_GPUS",
        "INFERBENCH_GPU_SLOT_CPUS",
        "OMP_NUM_THREADS",
    ]


def test_good_values_are_read_as_their_type(tmp_path):
    planned = HostPartition({"0": (1,), "1": (0,)}, (0,))
    environ = {
        "INFERBENCH_GPU_SLOT_CPUS": " 2 ",
        "INFERBENCH_GPUS": "0, 1,GPU-8d1f-aa,MIG-3c2e",
        "INFERBENCH_LOCK_FILE": str(tmp_path / "new" / "folders" / "lock"),  # made when the lock is
        "INFERBENCH_GPUS_MEASURE_AT_ONCE": "Yes",
        "INFERBENCH_HOST_PARTITION": planned.to_json(),
        "OMP_NUM_THREADS": "4,2",  # OpenMP's threads per nesting level: the job's are the first
    }
    assert env_vars.problems(environ) == []
    assert env_vars.GPU_SLOT_CPUS.read(environ) == 2
    assert env_vars.GPUS.read(environ) == ("0", "1", "GPU-8d1f-aa", "MIG-3c2e")
    assert env_vars.LOCK_FILE.read(environ) == tmp_path / "new" / "folders" / "lock"
    assert env_vars.GPUS_MEASURE_AT_ONCE.read(environ) is True
    assert HostPartition(*env_vars.HOST_PARTITION.read(environ)) == planned
    assert env_vars.OMP_NUM_THREADS.read(environ) == 4


def test_an_empty_value_counts_as_unset():
    names = list(env_vars.VARIABLES)
    assert env_vars.problems({name: "" for name in names}) == []
    assert [env_vars.VARIABLES[n].read({n: " "}) for n in names] == [env_vars.VARIABLES[n].default for n in names]


@pytest.mark.parametrize("word", ["off", "OFF", "0", "false", "no", "none"])
def test_the_words_for_off_turn_the_partition_off_without_planning_one(monkeypatch, word):
    monkeypatch.setenv(host_partition.PARTITION_ENV, word)
    monkeypatch.setenv(host_partition.SLOT_CPUS_ENV, "4")
    monkeypatch.setattr(host_partition, "gpu_pool", lambda: pytest.fail("planned although turned off"))
    assert current_partition() is None
    assert keep_to_shared_cores() is None  # no job is moved


def test_an_empty_partition_is_planned_as_if_unset(monkeypatch):
    monkeypatch.setenv(host_partition.PARTITION_ENV, "")
    monkeypatch.setenv("INFERBENCH_GPUS", "0,1")
    monkeypatch.setenv(host_partition.SLOT_CPUS_ENV, "2")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    monkeypatch.setattr(host_partition, "numa_local_cpus", lambda devices: {})
    assert current_partition() == HostPartition({"0": (6, 7), "1": (4, 5)}, (0, 1, 2, 3))


@pytest.mark.parametrize(("name", "value", "wrong"), BAD[:3])
def test_the_partition_refuses_a_bad_slot_size_even_without_a_gpu(monkeypatch, name, value, wrong):
    monkeypatch.delenv(host_partition.PARTITION_ENV, raising=False)
    monkeypatch.setattr(host_partition, "gpu_pool", lambda: [])
    monkeypatch.setenv(name, value)
    with pytest.raises(UserError, match=f"^{name}={value}: {wrong}"):
        current_partition()


@pytest.mark.parametrize("partition", [EMPTY_SLOT, NO_SHARED])
def test_a_partition_with_an_empty_cpu_set_is_refused_by_name_before_pinning(monkeypatch, partition):
    monkeypatch.setenv(host_partition.PARTITION_ENV, partition)
    monkeypatch.setattr(host_partition, "pin_process", lambda cpus: pytest.fail(f"pinned to {cpus}"))
    with pytest.raises(UserError, match=r"^INFERBENCH_HOST_PARTITION=.*is not a non-empty list of CPUs"):
        keep_to_shared_cores()


def test_a_gpu_pool_that_is_no_list_of_gpus_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("INFERBENCH_GPUS", "a/b")
    monkeypatch.delenv("INFERBENCH_GPU_CLAIMED", raising=False)
    with pytest.raises(UserError, match=r"^INFERBENCH_GPUS=a/b: 'a/b' is not a GPU index or UUID"):
        gpu_pool()
    with pytest.raises(UserError, match=r"^INFERBENCH_GPUS=a/b"):
        claim_for_this_process()


def test_a_lock_file_that_is_a_directory_is_refused_by_name(monkeypatch, tmp_path):
    monkeypatch.setenv("INFERBENCH_LOCK_FILE", str(tmp_path))
    with pytest.raises(UserError, match=f"^INFERBENCH_LOCK_FILE={re.escape(str(tmp_path))}: is a directory"):
        lock_path()
    with pytest.raises(UserError, match=r"^INFERBENCH_LOCK_FILE="):
        MachineLock()
    plain = tmp_path / "plain"
    plain.write_text("")
    monkeypatch.setenv("INFERBENCH_LOCK_FILE", str(plain / "lock"))
    with pytest.raises(UserError, match=f"its folder {re.escape(str(plain))} is not a directory"):
        lock_path()


@pytest.mark.parametrize(("name", "value", "wrong"), BAD)
def test_the_command_line_refuses_a_bad_value_before_its_verb_runs(monkeypatch, capsys, tmp_path, name, value, wrong):
    value = _value(value, tmp_path)
    monkeypatch.setenv(name, value)
    # the first thing main does after the check: nothing of the verb (logging, GPU, lock) started
    monkeypatch.setattr("inferbench.cli.main.configure_logging", lambda: pytest.fail("the verb went on"))
    assert main(["list", "engines"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"inferbench list: error: {name}=") and wrong in err


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("INFERBENCH_GPU_SLOT_CPUS", "abc"),
        ("INFERBENCH_HOST_PARTITION", NO_SHARED),
        ("INFERBENCH_GPUS", "a/b"),
        ("INFERBENCH_LOCK_FILE", "<dir>"),
        ("OMP_NUM_THREADS", "abc"),
    ],
)
def test_inferbench_list_engines_exits_2_naming_a_bad_variable(tmp_path, name, value):
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), name: _value(value, tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "inferbench", "list", "engines"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"inferbench list: error: {name}=") and "allowed: " in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
