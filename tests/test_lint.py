"""The workflow lints clean under the default and the test config: `snakemake --lint` (about 10 s each)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow  # Snakemake parses the whole workflow twice: not the developer's fast loop


@pytest.mark.parametrize("directory", [".", ".test"], ids=["default config", "test config"])
def test_snakemake_lint_is_clean(directory):
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "--lint", "--directory", directory],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Lints for" not in done.stdout + done.stderr, done.stdout + done.stderr
