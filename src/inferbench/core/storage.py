"""Where a cell's files live beside its record, and how they are written: atomically, and never lost.

``<cell>.json`` is the record (inferbench.core.cells), ``<cell>.samples.npy`` and
``<cell>.e2e_samples.npy`` the raw per-call latencies of its two boundaries, ``<cell>.loadgen/`` the
logs of a serving cell's LoadGen runs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from inferbench.catalog.scenarios import LOADGEN_LOGS
from inferbench.core.cells import CellRecord
from inferbench.core.errors import UserError
from inferbench.core.fsutil import atomic_path, user_dir

#: what a single-call cell times: ``device`` (inputs already where the engine computes) and
#: ``end_to_end`` (host arrays in, a host array out)
BOUNDARIES = ("device", "end_to_end")


def samples_path(record_path: str | Path, boundary: str = "device") -> Path:
    """Raw per-call latencies (seconds, float32) live beside the record, one file per boundary."""
    if boundary not in BOUNDARIES:
        raise ValueError(f"boundary must be one of {BOUNDARIES}")
    suffix = ".samples.npy" if boundary == "device" else ".e2e_samples.npy"
    return Path(record_path).with_suffix(suffix)


def loadgen_dir(record_path: str | Path) -> Path:
    """LoadGen's logs of a serving cell live beside its record: ``<record>.loadgen/<run>/``."""
    return Path(record_path).with_suffix(LOADGEN_LOGS)


def save_samples(record_path: str | Path, samples: dict[str, np.ndarray]) -> None:
    for boundary in BOUNDARIES:
        with atomic_path(samples_path(record_path, boundary)) as tmp, tmp.open("wb") as fh:
            # 7 significant digits: 0.1 µs at 1 s, half the bytes
            np.save(fh, np.asarray(samples.get(boundary, np.empty(0)), dtype=np.float32))


def load_samples(record_path: str | Path) -> dict[str, np.ndarray]:
    return {boundary: np.load(samples_path(record_path, boundary)) for boundary in BOUNDARIES}


def save_cell(
    out: str | Path, record: CellRecord, samples: dict[str, np.ndarray], cell_path: str | Path | None = None
) -> None:
    """Write a cell's record and samples. If that fails (a full disk, a read-only folder), the
    measurement is not thrown away: it goes to ``unsaved/`` in this user's own directory
    (inferbench.core.fsutil.user_dir) or, failing that, into the job's log; the error names the path,
    the reason and where the measurement is. ``cell_path``: the cell's record, where ``out`` is one of its
    processes' records in a scratch folder (gone once the job ends: no use copying anything there)."""
    try:
        save_samples(out, samples)
        record.save(out)
        return
    except OSError as error:
        reason = f"cannot write {out}: {error.strerror or error}"
    try:
        # this user's own directory: in the shared temp directory another user could have planted a
        # symlink that this run (root's, say) would write through
        kept = user_dir() / "unsaved" / Path(out).relative_to(Path(out).anchor)
        save_samples(kept, samples)
        record.save(kept)
        if cell_path is None or Path(cell_path) == Path(out):
            where = f"kept in {kept} (copy it to {out} once there is room, or re-run the cell)"
        else:  # one process of several: the cell's record is their merge, which the job could not make
            where = f"kept in {kept}, one of the processes of the cell {cell_path}: re-run it once there is room"
    except (OSError, UserError) as error:
        print(json.dumps(record.to_dict()), file=sys.stderr)
        where = f"printed above in this job's log (it could not be kept in a file either: {error})"
    raise UserError(f"{reason}; the measurement ({record.status}) is {where}")
