"""Atomic file writes: a killed job never leaves a half-written file that looks complete."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any


def _umask_from_proc() -> int | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return None  # not Linux, or a kernel before 4.7


def _umask_at_import() -> int:
    found = _umask_from_proc()
    if found is None:
        # os.umask can only be read by setting it, for the whole process: done once, here, at import
        found = os.umask(0o077)
        os.umask(found)
    return found


_UMASK_AT_IMPORT = _umask_at_import()


def current_umask() -> int:
    """The process's umask, read without changing it (Linux), else as it was when this was imported."""
    found = _umask_from_proc()
    return _UMASK_AT_IMPORT if found is None else found


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only if the block succeeds. The
    file has the mode the user's umask gives new files."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        try:
            # mkstemp makes it 0600; an output gets the mode any new file of the user gets (0644 for umask
            # 022). A filesystem that refuses chmod (FAT, some network mounts) leaves it 0600, as before.
            with suppress(OSError):
                os.fchmod(fd, 0o666 & ~current_umask())
        finally:
            os.close(fd)
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_atomic(path: str | Path, writer: Callable[[Path], Any]) -> None:
    """Call ``writer(tmp_path)`` and move the result onto ``path`` atomically."""
    with atomic_path(path) as tmp:
        writer(tmp)


def write_json(path: str | Path, obj: Any) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=False, allow_nan=True) + "\n")


def read_json(path: str | Path) -> Any:
    return json.loads(Path(path).read_text())
