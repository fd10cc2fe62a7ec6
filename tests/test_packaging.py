"""Lint and packaging checks that must hold on every commit."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tomllib

import pytest
import yaml
from packaging.requirements import Requirement

from tests.conftest import REPO

pytestmark = pytest.mark.fast  # pure logic: the developer's loop (docs/contributing.md)


def _declared() -> dict[str, Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    return {Requirement(r).name.lower(): Requirement(r) for r in reqs}


@pytest.mark.parametrize("env", sorted(p.name for p in (REPO / "envs").glob("*.yaml")))
def test_conda_envs_pin_versions_that_pyproject_allows(env):
    declared = _declared()
    spec = yaml.safe_load((REPO / "envs" / env).read_text())
    pins = [d for item in spec["dependencies"] if isinstance(item, dict) for d in item["pip"]]
    assert pins
    for pin in pins:
        req = Requirement(pin)
        version = str(next(iter(req.specifier)).version)
        assert req.name.lower() in declared, f"{env}: {req.name} is not a dependency in pyproject.toml"
        assert declared[req.name.lower()].specifier.contains(version), f"{env}: {pin} outside pyproject's range"


@pytest.mark.skipif(importlib.util.find_spec("ruff") is None, reason="ruff is not installed (the `test` extra has it)")
def test_ruff_is_clean():
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("platform", "machine", "expected"),
    [("linux", "x86_64", "onnxruntime-gpu"), ("linux", "aarch64", "onnxruntime"), ("darwin", "arm64", "onnxruntime")],
)
def test_one_install_brings_exactly_one_onnxruntime_build(platform, machine, expected):
    """`pip install -e .` installs the GPU build where it exists (it also runs the CPU provider) and
    the CPU package elsewhere, never both: they install the same module."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    environment = {"sys_platform": platform, "platform_machine": machine}
    chosen = [
        Requirement(r).name
        for r in project["dependencies"]
        if Requirement(r).name in ("onnxruntime", "onnxruntime-gpu")
        and (Requirement(r).marker is None or Requirement(r).marker.evaluate(environment))
    ]
    assert chosen == [expected]
    assert any(Requirement(r).name == "nvidia-ml-py" for r in project["dependencies"]), "NVML comes with the install"


def test_snakefile_min_version_is_pyprojects_lower_bound():
    import re

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    snakemake = next(Requirement(r) for r in project["dependencies"] if Requirement(r).name == "snakemake")
    lower = next(s.version for s in snakemake.specifier if s.operator == ">=")
    declared = re.search(r'min_version\("([^"]+)"\)', (REPO / "Snakefile").read_text())
    assert declared and declared[1] == lower


def test_report_captions_are_at_most_three_sentences():
    import re

    for caption in sorted((REPO / "workflow" / "report").glob("*.rst")):
        text = " ".join(caption.read_text().split())
        sentences = [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z`(])", text) if s]
        assert len(sentences) <= 3, f"{caption.name}: {len(sentences)} sentences"
