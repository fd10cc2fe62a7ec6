from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def private_lock(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Tests never wait on (or block) the machine-wide lock of a real run on the same machine."""
    path = tmp_path_factory.getbasetemp() / "inferbench-test.lock"
    monkeypatch.setenv("INFERBENCH_LOCK_FILE", str(path))
    return path
