from __future__ import annotations

import errno
import shutil
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
#: what a checkout holds that the workflow and the package need (a copy a test may edit)
CHECKOUT = ("Snakefile", "workflow", "src", "config", "profiles", "envs")


def copy_checkout(dest: Path) -> Path:
    """A copy of the repository's workflow and package in ``dest``, to edit as a contributor would."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in CHECKOUT:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, dest / name)
    return dest


#: a Llama small enough for seconds on 2 cores (the `llm:llama` workload's layout)
TINY_LLAMA = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 512}  # fmt: skip


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with TINY_LLAMA's checkpoint (``m.pt``, random weights), its model meta (``m.json``) and FP32
    eager's reference outputs and greedy tokens for prompts of 16 tokens (``ref.npz``)."""
    import json
    from dataclasses import asdict

    from inferbench.models import create_model
    from inferbench.models.parity import make_reference
    from inferbench.models.registry import save_checkpoint

    root = tmp_path_factory.mktemp("llama")
    spec = create_model("llm:llama", **TINY_LLAMA)
    save_checkpoint(spec, root / "m.pt", seed=0)
    (root / "m.json").write_text(json.dumps({"inputs": [asdict(i) for i in spec.inputs]}))
    make_reference(root / "m.pt", spec.inputs, 16, 2, root / "ref.npz")
    return root


@pytest.fixture(autouse=True)
def private_lock(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Tests never wait on (or block) the machine-wide lock of a real run on the same machine."""
    path = tmp_path_factory.getbasetemp() / "inferbench-test.lock"
    monkeypatch.setenv("INFERBENCH_LOCK_FILE", str(path))
    return path


def run_as_job(request: Any, out: Path) -> Any:
    """One cell measured as its job measures it (``run_cell``) under a shared machine lock, released after."""
    from inferbench.machine.lock import MachineLock
    from inferbench.scenarios.run import run_cell

    lock = MachineLock()
    lock.shared()
    try:
        return run_cell(request, out, lock)
    finally:
        lock.close()


def disk_full_at(monkeypatch: pytest.MonkeyPatch, full: Path) -> None:
    """Writing a cell record at ``full`` fails as on a full disk; records elsewhere are written."""
    from inferbench.core.cells import CellRecord

    real_save = CellRecord.save

    def save(self: CellRecord, path: str | Path) -> None:
        if Path(path) == full:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real_save(self, path)

    monkeypatch.setattr(CellRecord, "save", save)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The fast tier stays fast: a module marked ``fast`` holds no test marked ``slow``."""
    both = [item.nodeid for item in items if item.get_closest_marker("fast") and item.get_closest_marker("slow")]
    if both:
        raise pytest.UsageError(f"slow tests in a fast module (move them to a module of their own): {both}")
