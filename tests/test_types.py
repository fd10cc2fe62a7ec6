"""The packages a contributor extends type-check: the ground floor's declarations (catalog/), the engines and
the scenarios, with mypy as pyproject.toml configures it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow


def test_the_declarations_engines_and_scenarios_type_check():
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental"], cwd=REPO, capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "Success: no issues found" in result.stdout


def test_a_wrong_option_read_is_caught(tmp_path):
    """An engine reading an option its options class does not declare is a type error, not a run-time one."""
    engine = tmp_path / "engine.py"
    engine.write_text(
        "from inferbench.engines.pytorch import TorchCompileOptions\n"
        "from inferbench.engines.pytorch.compile import TorchCompile\n\n\n"
        "def mode(engine: TorchCompile) -> str:\n"
        "    return engine.options.modes\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--config-file", str(REPO / "pyproject.toml"), str(engine)],
        cwd=REPO, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert result.returncode == 1 and '"TorchCompileOptions" has no attribute "modes"' in result.stdout, result.stdout
