"""The package as a user installs it: a wheel, outside the checkout (issue 72)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow  # builds a wheel and a venv (about a minute)


def test_a_wheel_built_from_the_checkout_imports_every_module_in_a_venv_outside_it(tmp_path):
    """The package reads nothing from the checkout: its config schema is package data. The venv sees the
    machine's packages (torch & co.) but its own wheel of inferbench comes first."""
    wheels, venv = tmp_path / "wheels", tmp_path / "venv"
    build = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        str(wheels),
        str(REPO),
    ]
    subprocess.run(build, check=True, capture_output=True, timeout=600)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    wheel = next(wheels.glob("inferbench-*.whl"))
    install = [python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)]
    subprocess.run(install, check=True, capture_output=True, timeout=300)
    script = (
        "import importlib, pkgutil, inferbench\n"
        "names = [m.name for m in pkgutil.walk_packages(inferbench.__path__, 'inferbench.')]\n"
        "names = [n for n in names if n != 'inferbench.__main__']  # runs the command line\n"
        "for name in names: importlib.import_module(name)\n"
        "from inferbench.core.settings import MeasureSettings\n"
        "print(inferbench.__file__, len(names), MeasureSettings().repeats)\n"
    )
    done = subprocess.run([python, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    where, count, repeats = done.stdout.split()
    assert where.startswith(str(venv)) and int(count) > 100 and int(repeats) >= 1, done.stdout
