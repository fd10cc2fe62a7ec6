"""A bad `report.lease_spread` stops the run before any job, by name (not a traceback in the report job
after every cell was measured)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import copy_checkout

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("content", ['{"sd_log": {"host": -1}}', '"abc"', "[1, 2]", "NaN"])
def test_a_bad_lease_spread_file_stops_the_run_before_any_job(tmp_path, content):
    workdir = copy_checkout(tmp_path / "w")
    (workdir / "leases.json").write_text(content)
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--config", "report={lease_spread: leases.json}"],
        cwd=workdir, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "INFERBENCH_LOCK_FILE": str(tmp_path / "lock")},
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode != 0 and "report.lease_spread: 'leases.json'" in output
    assert not (workdir / "results").exists(), "no job ran"
