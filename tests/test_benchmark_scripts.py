"""The scripts in benchmarks/tools/ and experiments/ run on lent GPU machines, where a broken import costs
device time: every name they take from the package exists (checked from their source, without running them)."""

from __future__ import annotations

import ast
import importlib
import importlib.util

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.fast  # pure logic: the developer's loop (docs/contributing.md)

SCRIPTS = sorted([*(REPO / "benchmarks" / "tools").glob("*.py"), *(REPO / "experiments").glob("*/*.py")])


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_name_a_benchmark_script_imports_from_the_package_exists(script):
    missing = []
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("inferbench"):
            module = importlib.import_module(node.module)
            missing += [f"{node.module}.{a.name}" for a in node.names if not hasattr(module, a.name)
                        and importlib.util.find_spec(f"{node.module}.{a.name}") is None]  # fmt: skip
        elif isinstance(node, ast.Import):
            missing += [a.name for a in node.names if a.name.startswith("inferbench")
                        and importlib.util.find_spec(a.name) is None]  # fmt: skip
    assert not missing, f"{script.name} imports what the package no longer has: {missing}"
