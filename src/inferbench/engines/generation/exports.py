"""A decoder's checkpoint turned into another runtime's files once, then reused by every process of a
cell and every later cell of the same checkpoint, precision and device."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def checkpoint_digest(artifact: Path | None, engine: str) -> str:
    """A short digest of the checkpoint's bytes: the export's folder name starts with it."""
    if artifact is None:
        raise ValueError(f"{engine} is prepared from the workload's checkpoint")
    return hashlib.sha256(Path(artifact).read_bytes()).hexdigest()[:16]


def made_once(folder: Path, marker: str, build: Callable[[Path], Path]) -> Path:
    """``folder``, unless a complete one (holding ``marker``) is there already: ``build(scratch)`` makes it
    inside a scratch folder beside it and returns where; it is moved into place whole, since another
    process may look meanwhile (the first to finish wins, the others' copies go)."""
    if (folder / marker).exists():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent) as scratch:
        built = build(Path(scratch))
        if not (built / marker).exists():
            raise RuntimeError(f"the export into {built} made no {marker}")
        try:
            os.replace(built, folder)
        except OSError:
            if not (folder / marker).exists():
                raise
    return folder
