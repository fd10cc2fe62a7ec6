"""The workflow refuses a bad environment variable by name before any job, in a dry run as in a real one,
GPU or not; the words that turn the host partition off let a real run start (issue 56, item 5). The
parser's own rules are in tests/test_env_vars.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from inferbench.core import env_vars
from tests.conftest import copy_checkout

pytestmark = pytest.mark.slow  # runs Snakemake in a copy of the checkout

#: a cheap job of the default config: the heart dataset's synthetic raw file
CHEAP_TARGET = "data/raw/heart/synthetic/processed.cleveland.data"


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy no job runs in (the refused runs share it)."""
    return copy_checkout(tmp_path_factory.mktemp("env-vars"))


@pytest.fixture(scope="module")
def run_checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy that jobs run in."""
    return copy_checkout(tmp_path_factory.mktemp("env-vars-run"))


def _snakemake(root: Path, name: str, value: str, *args: str) -> subprocess.CompletedProcess[str]:
    # the developer's own values of the variables stay out; the lock is the test's (conftest)
    env = {k: v for k, v in os.environ.items() if k not in env_vars.VARIABLES or k == env_vars.LOCK_FILE.name}
    env[name] = value
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "1", *args],
        cwd=root, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("name", "value", "wrong"),
    [
        ("INFERBENCH_GPU_SLOT_CPUS", "abc", "is not a whole number"),
        ("INFERBENCH_HOST_PARTITION", json.dumps({"slots": {"0": []}, "shared": [0]}), "is not a non-empty list"),
        ("INFERBENCH_HOST_PARTITION", json.dumps({"slots": {"0": [0]}, "shared": []}), "is not a non-empty list"),
        ("INFERBENCH_HOST_PARTITION", "OFFF", "is neither off nor a partition's JSON"),
        ("INFERBENCH_GPUS", "a/b", "is not a GPU index or UUID"),
        ("INFERBENCH_LOCK_FILE", "<dir>", "is a directory"),
        ("OMP_NUM_THREADS", "abc", "is not a whole number"),
    ],
)
@pytest.mark.parametrize("dry", [True, False], ids=["dry-run", "run"])
def test_a_bad_variable_is_refused_by_name_before_any_job(checkout, tmp_path, name, value, wrong, dry):
    value = str(tmp_path) if value == "<dir>" else value
    done = _snakemake(checkout, name, value, *(["-n"] if dry else []))
    output = done.stdout + done.stderr
    assert done.returncode == 1, output[-3000:]
    assert f"{name}=" in output and wrong in output and "allowed: " in output, output[-3000:]
    assert "Traceback" not in output and "Fix or unset these environment variables." in output
    assert not (checkout / "logs").exists() and not (checkout / "data").exists(), "a job ran"


@pytest.mark.parametrize("value", ["", "OFF", "0"])
def test_a_run_with_the_partition_turned_off_or_empty_starts_and_finishes(run_checkout, value):
    """onstart reads the partition (a dry run never does): empty plans it as unset, OFF and 0 turn it off."""
    args = ("--config", "warm_start=False", "--forcerun", "synthetic_data", "--", CHEAP_TARGET)
    done = _snakemake(run_checkout, "INFERBENCH_HOST_PARTITION", value, *args)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert (run_checkout / CHEAP_TARGET).stat().st_size > 0
