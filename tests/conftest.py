from __future__ import annotations

import errno
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def private_lock(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Tests never wait on (or block) the machine-wide lock of a real run on the same machine."""
    path = tmp_path_factory.getbasetemp() / "inferbench-test.lock"
    monkeypatch.setenv("INFERBENCH_LOCK_FILE", str(path))
    return path


def disk_full_at(monkeypatch: pytest.MonkeyPatch, full: Path) -> None:
    """Writing a cell record at ``full`` fails as on a full disk; records elsewhere are written."""
    from inferbench.core.cells import CellRecord

    real_save = CellRecord.save

    def save(self: CellRecord, path: str | Path) -> None:
        if Path(path) == full:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real_save(self, path)

    monkeypatch.setattr(CellRecord, "save", save)
